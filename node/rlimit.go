package node

import (
	"fmt"

	"github.com/joiner-dev/joiner/statestore"
)

// filesNeeded is the open files a worker of a topic pair with parts
// partitions may need when it owns every task: each task's store
// (statestore.OpenFilesPerStore), the tables shared by the stores
// (statestore.DefaultOpenTables) and filesSpare for connections (a few
// per broker: fetch.MuxInflight and limitTransport's bounds), the HTTP
// API and the binary's own.
func filesNeeded(parts int) uint64 {
	return uint64(parts)*statestore.OpenFilesPerStore + statestore.DefaultOpenTables + filesSpare
}

const filesSpare = 256

// checkFileLimit raises the soft open-file limit (RLIMIT_NOFILE) to the
// hard one when it is below what parts tasks need, and fails with what
// to set when the hard limit is below it too. It returns the soft limit
// in force; getrlimit is nil where there is none (Windows).
func checkFileLimit(parts int, getrlimit func() (cur, max uint64, err error), setrlimit func(cur, max uint64) error) (uint64, error) {
	if getrlimit == nil {
		return 0, nil
	}
	cur, hard, err := getrlimit()
	if err != nil {
		return 0, nil // nothing to compare with: go on
	}
	need := filesNeeded(parts)
	if cur >= need {
		return cur, nil
	}
	if hard > cur {
		if err := setrlimit(hard, hard); err == nil {
			cur = hard
		}
	}
	if cur < need {
		return cur, fmt.Errorf("the open-file limit (RLIMIT_NOFILE) is %d, below the %d a worker owning all %d tasks may need (%d per task store, %d shared tables, %d for connections): raise it, e.g. ulimit -n %d, LimitNOFILE=%d in a systemd unit or --ulimit nofile=%d in Docker",
			cur, need, parts, statestore.OpenFilesPerStore, statestore.DefaultOpenTables, filesSpare, need, need, need)
	}
	return cur, nil
}
