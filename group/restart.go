package group

import (
	"errors"
	"fmt"
)

// Restarting the tasks. Under exactly-once processing an aborted
// transaction leaves every task of the member past what the group has
// committed: the handler asks for its tasks to be stopped (Handler.Lost)
// and given again (Handler.Assigned), which starts them from the group's
// committed offsets. Restart does that through the group, so that Lost
// and Assigned keep being called from Run's goroutine only.

// errRestart makes the heartbeat loop drop the generation, call
// Handler.Lost and rejoin with the same member id.
var errRestart = errors.New("group: the handler asked to restart its tasks from the committed offsets")

// Restart makes the member stop every task (Handler.Lost, with an error
// wrapping reason) at its next heartbeat tick and rejoin the group with
// its member id; the tasks it is given then start from the group's
// committed offsets. Safe for concurrent use.
//
// A Restart still pending when the member loses its membership is dropped:
// Handler.Lost, then Assigned, restart the tasks from the committed offsets
// already (restarting them again would only lose the next generation's
// tasks, and churn the group).
func (m *Member) Restart(reason error) {
	m.mu.Lock()
	m.restart, m.restartLosses = reason, m.losses
	m.mu.Unlock()
	m.log.Warn("group: restarting this member's tasks from the committed offsets", "reason", reason)
	select {
	case m.rejoinCh() <- struct{}{}:
	default:
	}
}

// rejoinReason is why the heartbeat loop was woken: a Restart, or a
// Release, or nil for a Restart that a lost membership has done since
// (the loop goes on).
func (m *Member) rejoinReason() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, stale := m.restart, m.losses > m.restartLosses
	m.restart = nil
	released := m.released
	m.released = false
	switch {
	case r != nil && !stale:
		return fmt.Errorf("%w: %w", errRestart, r)
	case released:
		return errReleased
	case r != nil:
		m.log.Info("group: a restart of the tasks asked before the membership was lost is done: the tasks restarted from the committed offsets since", "reason", r)
	}
	return nil
}

// Generation returns the generation, member id and instance id that
// Commit uses, and whether there is one (KIP-447: a transactional
// producer sends them with the offsets it commits).
func (m *Member) Generation() (generation int32, memberID, instanceID string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen.id, m.gen.memberID, m.cfg.InstanceID, m.gen.valid
}

// GroupID is the group's id.
func (m *Member) GroupID() string { return m.cfg.GroupID }
