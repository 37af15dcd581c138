package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Rebuild gives up on the store of task, which the caller could not open or
// write: every dir of the task is moved aside (task-<p>.corrupt-<unixnano>)
// where it can be, and a fresh, empty store is opened in the first state dir
// that works, preferring the dirs where the old one could be moved (a dir
// that cannot even rename is likely read-only). Later OpenTask calls of the
// task use the new dir. The rebuild counts as RebuildUnusable. It fails when
// no state dir can hold the task. The task must not be open.
func (m *Manager) Rebuild(task int) (*Store, error) {
	if task < 0 {
		return nil, fmt.Errorf("statestore: task %d is negative", task)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("statestore: rebuild task %d: %w", task, ErrClosed)
	}
	if _, ok := m.open[task]; ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("statestore: rebuild task %d: %w", task, ErrTaskOpen)
	}
	m.open[task] = nil
	delete(m.override, task)
	m.dropSidecarLocked(task, "") // the old dir, sidecar and all, is moved aside
	m.mu.Unlock()

	s, err := m.rebuild(task)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil || m.closed {
		delete(m.open, task)
		if err == nil {
			s.db.Close()
			err = fmt.Errorf("statestore: rebuild task %d: %w", task, ErrClosed)
		}
		return nil, err
	}
	m.open[task] = s
	if m.override == nil {
		m.override = map[int]string{}
	}
	m.override[task] = s.dir
	return s, nil
}

func (m *Manager) rebuild(task int) (*Store, error) {
	bad := map[string]bool{}
	var errs []error
	for _, d := range m.opts.Dirs {
		p := m.taskDir(d, task)
		if _, err := m.fs.Stat(p); err != nil {
			continue
		}
		aside := p + asideInfix + strconv.FormatInt(time.Now().UnixNano(), 10)
		if err := m.fs.Rename(p, aside); err != nil {
			bad[d] = true
			errs = append(errs, fmt.Errorf("move %s aside: %w", p, err))
			m.log.Warn("statestore: cannot move an unusable task store aside; trying another state dir", "task", task, "dir", p, "err", err)
			continue
		}
		m.log.Warn("statestore: moved an unusable task store aside", "task", task, "dir", p, "moved_to", aside)
	}
	order := make([]string, 0, len(m.opts.Dirs))
	for _, d := range m.opts.Dirs {
		if !bad[d] {
			order = append(order, d)
		}
	}
	for _, d := range m.opts.Dirs {
		if bad[d] {
			order = append(order, d)
		}
	}
	for _, d := range order {
		p := m.taskDir(d, task)
		if bad[d] {
			// The old store is still there: use a sibling name, fresh.
			p = m.fs.PathJoin(m.groupDir(d), taskDirName(task)+".rebuilt")
			_ = m.fs.RemoveAll(p)
		}
		if err := m.fs.MkdirAll(p, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("create %s: %w", p, err))
			continue
		}
		s, err := m.openStore(context.Background(), task, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.countRebuild(RebuildUnusable)
		m.sweepCorrupt()
		m.log.Warn("statestore: rebuilding an unusable task store from Kafka in a fresh dir", "task", task, "dir", p)
		return s, nil
	}
	return nil, fmt.Errorf("statestore: no state dir can hold task %d: %w", task, errors.Join(errs...))
}
