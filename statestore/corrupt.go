package statestore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Rebuild reasons, the label of joiner_store_rebuilds_total.
const (
	// RebuildOpenFailed: the store failed to open or its offset to read.
	RebuildOpenFailed = "open_failed"
	// RebuildCorruption: Pebble reported corruption while the store was
	// open; the marker file made the next start rebuild it.
	RebuildCorruption = "corruption"
	// RebuildUnusable: the caller gave up on a store it could not write
	// (MoveAside).
	RebuildUnusable = "unusable"
)

// RebuildReasons lists every reason, for metrics.
var RebuildReasons = []string{RebuildOpenFailed, RebuildCorruption, RebuildUnusable}

// DefaultCorruptRetention is how long moved-aside stores are kept.
const DefaultCorruptRetention = 24 * time.Hour

// corruptMarker is written into a task dir when Pebble reports corruption
// at run time. The next OpenTask moves such a store aside and rebuilds it.
const corruptMarker = "JOINER-CORRUPT"

const asideInfix = ".corrupt-"

// ErrCorrupt is passed (wrapped) to Options.Fatal when Pebble reports
// corruption in a task store.
var ErrCorrupt = errors.New("task store is corrupt")

// corruption handles Pebble's reports for one task: it records the marker
// durably, then calls Options.Fatal, which does not return by default (the
// process exits 1). Pebble expects its Fatalf not to return.
func (m *Manager) corruption(task int, dir string, what string) {
	err := fmt.Errorf("statestore: task %d in %s: %w: %s", task, dir, ErrCorrupt, what)
	if merr := m.writeMarker(dir, what); merr != nil {
		m.log.Error("statestore: cannot record the corruption; the store may crash again on the next start",
			"task", task, "dir", dir, "err", merr)
	}
	m.log.Error("statestore: task store is corrupt; recorded it, exiting so that the next start rebuilds it from Kafka",
		"task", task, "dir", dir, "err", err)
	m.opts.Fatal(task, err)
}

func (m *Manager) writeMarker(dir, what string) error {
	p := m.fs.PathJoin(dir, corruptMarker)
	f, err := m.fs.Create(p, "")
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(time.Now().UTC().Format(time.RFC3339) + " " + what + "\n")); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if d, err := m.fs.OpenDir(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// marked reports whether dir holds a corruption marker, and its text.
func (m *Manager) marked(dir string) (string, bool) {
	f, err := m.fs.Open(m.fs.PathJoin(dir, corruptMarker))
	if err != nil {
		return "", false
	}
	defer f.Close()
	b := make([]byte, 512)
	n, _ := f.Read(b)
	return strings.TrimSpace(string(b[:n])), true
}

// eventListener reports Pebble's corruption events and fatal logs of one
// task to corruption and its disk-full errors to backgroundDiskFull
// (diskfull.go); other background errors are logged, rate-limited.
func (m *Manager) eventListener(task int, dir string, ev *storeEvents) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			if pebble.IsCorruptionError(err) {
				m.corruption(task, dir, "background error: "+err.Error())
				return
			}
			m.rl.Error(rateKey(task, "background "+Errno(err)), "pebble: background error", "task", task, "dir", dir, "errno", Errno(err), "err", err)
			if IsDiskFull(err) {
				m.writeFailed(task, dir, ev, err)
			}
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			m.corruption(task, dir, "data corruption: "+info.String())
		},
	}
}

// sweepCorrupt deletes moved-aside stores older than CorruptRetention and
// counts those kept.
func (m *Manager) sweepCorrupt() {
	now := time.Now()
	kept := 0
	for _, d := range m.opts.Dirs {
		gdir := m.groupDir(d)
		names, err := m.fs.List(gdir)
		if err != nil {
			continue
		}
		for _, n := range names {
			i := strings.Index(n, asideInfix)
			if i < 0 {
				continue
			}
			if _, ok := parseTaskDirName(n[:i]); !ok {
				continue
			}
			ns, err := strconv.ParseInt(n[i+len(asideInfix):], 10, 64)
			if err != nil {
				kept++
				continue
			}
			if age := now.Sub(time.Unix(0, ns)); age > m.opts.CorruptRetention {
				p := m.fs.PathJoin(gdir, n)
				if err := m.fs.RemoveAll(p); err != nil {
					m.log.Warn("statestore: cannot delete a moved-aside store past --corrupt-retention", "dir", p, "err", err)
					kept++
					continue
				}
				m.log.Info("statestore: deleted a moved-aside store past --corrupt-retention", "dir", p, "age", age.Round(time.Second))
				continue
			}
			kept++
		}
	}
	m.corruptDirs.Store(int64(kept))
}

// CorruptDirs is the number of moved-aside stores kept (as of the last
// sweep: at Open and at every rebuild).
func (m *Manager) CorruptDirs() int64 { return m.corruptDirs.Load() }

// RebuildsFor counts the rebuilds with reason since Open.
func (m *Manager) RebuildsFor(reason string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byReason[reason]
}

func (m *Manager) countRebuild(reason string) {
	m.rebuilds.Add(1)
	m.mu.Lock()
	if m.byReason == nil {
		m.byReason = map[string]int64{}
	}
	m.byReason[reason]++
	m.mu.Unlock()
}

func exitOne(int, error) { os.Exit(1) }
