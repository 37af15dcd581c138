package statestore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/joiner-dev/joiner/internal/fielderr"
)

// The lock of one group in one state dir is <dir>/<group>.lock, beside the
// group dir, held with flock(2) for as long as the Manager is open, and
// naming its holder.
const lockSuffix = ".lock"

// ErrLocked is returned (wrapped) by Open when another process or Manager
// holds the lock of the group in one of the state dirs.
var ErrLocked = errors.New("state dir is in use by another worker")

// dirLock is a held lock file.
type dirLock struct{ f *os.File }

// lockGroupDirs locks the group dir of every state dir, or none. Locks are
// only taken on the OS filesystem (vfs.Default); an in-memory FS is private
// to its Manager anyway.
func (m *Manager) lockGroupDirs() error {
	if m.fs != vfs.Default {
		return nil
	}
	for _, d := range m.opts.Dirs {
		l, err := lockDir(m.groupDir(d), m.opts.InstanceID)
		if IsDiskFull(err) { // no lock file on a full disk: no store opens there either (diskfull.go)
			m.log.Warn("statestore: cannot create the lock file of a full state dir; no task store opens there until space is freed",
				"dir", m.groupDir(d), "err", err)
			continue
		}
		if err != nil {
			m.unlockGroupDirs()
			return err
		}
		m.locks = append(m.locks, l)
	}
	return nil
}

func (m *Manager) unlockGroupDirs() {
	for _, l := range m.locks {
		_ = l.f.Close() // releases the flock
	}
	m.locks = nil
}

// lockDir takes the lock of gdir without waiting and writes the holder
// into it. When it is held, the error names the holder.
func lockDir(gdir, instance string) (*dirLock, error) {
	p := gdir + lockSuffix
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, dirError("open its lock file", gdir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fielderr.Errorf("statestore: %w: %s is locked by %s; give each worker its own {Dirs} (or stop the other one)",
				ErrLocked, gdir, describeHolder(holder))
		}
		return nil, dirError("lock "+p, gdir, err)
	}
	host, _ := os.Hostname()
	info := fmt.Sprintf("instance=%s pid=%d host=%s since=%s\n", instance, os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(info), 0)
		_ = f.Sync()
	}
	return &dirLock{f: f}, nil
}

func describeHolder(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "another process (it wrote no instance id)"
	}
	return "another worker (" + s + ")"
}
