package statestore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// appliedSidecar is written into a task dir by Store.Close: the applied
// offset of the store as it was closed, so that Held can report a closed
// store without opening it. OpenTask deletes it before opening the store,
// so a sidecar is present only while the store is closed and matches it. A
// store that was not closed cleanly (the process was killed) has none and
// is opened read-only once instead.
const appliedSidecar = "JOINER-APPLIED"

// Held returns every task with a store in this Manager's state dirs, open
// or not, with the next market offset the store lacks (AppliedOffset + 1;
// 0 for an empty store). Open stores report their live offset. A closed
// store is read once, from the sidecar its Close wrote or, lacking one, by
// opening it read-only, and cached until it is opened, rebuilt or removed.
// A store that is being opened, or that cannot be read, is left out.
//
// It is meant to be called before each JoinGroup (group.Config.Held): after
// the first call it reads no store, only the state dirs' listings. It holds
// the Manager's lock throughout, so it never races with OpenTask, Rebuild,
// RemoveTask or Close of the same task.
func (m *Manager) Held() (map[int]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("statestore: held stores: %w", ErrClosed)
	}
	out := map[int]int64{}
	for p, s := range m.open {
		if s != nil {
			out[p] = s.AppliedOffset() + 1
		}
	}
	rebuilt := make([]int, 0, len(m.override)) // dirs chosen by Rebuild
	for p := range m.override {
		rebuilt = append(rebuilt, p)
	}
	onDisk, err := m.tasksLocked(rebuilt)
	if err != nil {
		return nil, err
	}
	for _, p := range onDisk {
		if _, open := m.open[p]; open {
			continue
		}
		if next, ok := m.held[p]; ok {
			if next >= 0 {
				out[p] = next
			}
			continue
		}
		next, err := m.readClosedLocked(p)
		if err != nil {
			m.log.Warn("statestore: cannot read the applied offset of a closed task store; not reporting it as held", "task", p, "err", err)
			next = -1 // not retried until the store is opened, rebuilt or removed
		} else {
			out[p] = next
		}
		if m.held == nil {
			m.held = map[int]int64{}
		}
		m.held[p] = next
	}
	return out, nil
}

// readClosedLocked reads the next offset a closed store of task lacks;
// m.mu is held.
func (m *Manager) readClosedLocked(task int) (int64, error) {
	dir, ok := m.findDirLocked(task)
	if !ok {
		return 0, fmt.Errorf("task %d has no dir", task)
	}
	if _, bad := m.marked(dir); bad {
		return 0, fmt.Errorf("task %d in %s is marked corrupt", task, dir)
	}
	if f, err := m.fs.Open(m.fs.PathJoin(dir, appliedSidecar)); err == nil {
		var buf [32]byte
		n, rerr := f.Read(buf[:])
		f.Close()
		if off, perr := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64); (rerr == nil || n > 0) && perr == nil && off >= -1 {
			return off + 1, nil
		}
		// A torn or foreign sidecar: read the store itself.
	}
	db, err := pebble.Open(dir, &pebble.Options{
		ReadOnly:  true,
		Cache:     m.cache,
		FileCache: m.files,
		FS:        m.fs,
		Logger:    pebbleLogger{l: m.log.With("task", task)}, // no fatal hook: the store is not in use
	})
	if err != nil {
		return 0, fmt.Errorf("open %s read-only: %w", dir, err)
	}
	defer db.Close()
	v, closer, err := db.Get([]byte(formatKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil // never written: empty
	}
	if err != nil {
		return 0, fmt.Errorf("read the layout of %s: %w", dir, err)
	}
	layout := len(v) == 1 && v[0] == formatVersioned
	closer.Close()
	if !layout {
		return 0, fmt.Errorf("%s: %w", dir, errOldFormat)
	}
	off, err := readAppliedOffset(db)
	if err != nil {
		return 0, fmt.Errorf("read the applied offset in %s: %w", dir, err)
	}
	return off + 1, nil
}

// findDirLocked returns the dir of task, if it has one; m.mu is held.
func (m *Manager) findDirLocked(task int) (string, bool) {
	if p, ok := m.override[task]; ok {
		if fi, err := m.fs.Stat(p); err == nil && fi.IsDir() {
			return p, true
		}
	}
	for _, d := range m.opts.Dirs {
		p := m.taskDir(d, task)
		if fi, err := m.fs.Stat(p); err == nil && fi.IsDir() {
			return p, true
		}
	}
	return "", false
}

// writeSidecar records the applied offset of a store being closed.
// Best effort: without it, Held opens the store read-only.
func (m *Manager) writeSidecar(dir string, applied int64) {
	path := m.fs.PathJoin(dir, appliedSidecar)
	f, err := m.fs.Create(path, "")
	if err == nil {
		_, err = f.Write([]byte(strconv.FormatInt(applied, 10) + "\n"))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		m.log.Debug("statestore: cannot write the applied-offset sidecar; the store is read to report it", "dir", dir, "err", err)
		_ = m.fs.Remove(path)
	}
}

// dropSidecar removes the sidecar of a store about to be opened or
// rebuilt, and forgets its cached offset; m.mu is held.
func (m *Manager) dropSidecarLocked(task int, dir string) {
	delete(m.held, task)
	if dir != "" {
		if err := m.fs.Remove(m.fs.PathJoin(dir, appliedSidecar)); err != nil && !isNotExist(err) {
			m.log.Warn("statestore: cannot remove the applied-offset sidecar of a store being opened", "dir", dir, "err", err)
		}
	}
}

// standbyMarker is present in the dir of a store last used as a standby
// copy (Store.SetStandby): such a store is held (Held) but its task was not
// owned here, so ActiveTasks leaves it out.
const standbyMarker = "JOINER-STANDBY"

// Standby reports whether the store was last used as a standby copy of its
// task (SetStandby(true), possibly by an earlier process).
func (s *Store) Standby() bool {
	_, err := s.mgr.fs.Stat(s.mgr.fs.PathJoin(s.dir, standbyMarker))
	return err == nil
}

// SetStandby records whether the store is used as a standby copy of its
// task (true) or by the task's active owner (false). It survives a crash:
// after a restart, ActiveTasks reports only the tasks this member owned.
func (s *Store) SetStandby(standby bool) error {
	path := s.mgr.fs.PathJoin(s.dir, standbyMarker)
	if !standby {
		if err := s.mgr.fs.Remove(path); err != nil && !isNotExist(err) {
			return fmt.Errorf("statestore: task %d: remove %s: %w", s.task, path, err)
		}
		return nil
	}
	if _, err := s.mgr.fs.Stat(path); err == nil {
		return nil
	}
	f, err := s.mgr.fs.Create(path, "")
	if err != nil {
		return fmt.Errorf("statestore: task %d: create %s: %w", s.task, path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("statestore: task %d: create %s: %w", s.task, path, err)
	}
	return nil
}

// ActiveTasks returns the tasks with a dir in some state dir, ascending,
// like Tasks, but without those whose store was last used as a standby
// copy (Store.SetStandby): the tasks this member owned.
func (m *Manager) ActiveTasks() ([]int, error) {
	tasks, err := m.Tasks()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.DeleteFunc(tasks, func(p int) bool {
		dir, ok := m.findDirLocked(p)
		if !ok {
			return true
		}
		_, err := m.fs.Stat(m.fs.PathJoin(dir, standbyMarker))
		return err == nil
	}), nil
}
