package group

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// Restart: the member stops its tasks (Lost, with the reason, and no
// Rebalancing: nothing may be committed) and is given them again
// (Assigned, all tasks), and Generation names the new generation.
func TestRestartLosesThenAssignsAgain(t *testing.T) {
	addrs := newCluster(t)
	a := startMember(t, addrs, "pod-a", nil)
	_, as := stableTasks(t, a)
	gen, member, instance, ok := a.Generation()
	if !ok || gen != as[0].Generation || member == "" || instance != "pod-a" {
		t.Fatalf("Generation() = %d %q %q %v, want %d, a member id, pod-a", gen, member, instance, ok, as[0].Generation)
	}
	reason := errors.New("the transaction was aborted")
	a.Restart(reason)
	waitFor(t, 10*time.Second, "Assigned again after Restart", func() bool {
		n, _ := a.rec.counts()
		return n >= 2
	})
	a.rec.mu.Lock()
	lost, assigned, rebalancing := slices.Clone(a.rec.lost), slices.Clone(a.rec.assigned), a.rec.rebalancing
	a.rec.mu.Unlock()
	if len(lost) != 1 || !errors.Is(lost[0], reason) {
		t.Fatalf("Lost %v, want once with the reason", lost)
	}
	if rebalancing != 0 {
		t.Errorf("Rebalancing called %d times on a restart, want 0 (it commits)", rebalancing)
	}
	last := assigned[len(assigned)-1]
	for _, topic := range testTopics {
		if len(last.Topics[topic]) != testPartitions {
			t.Errorf("after the restart %s: %v, want every partition", topic, last.Topics[topic])
		}
	}
	if g, _, _, ok := a.Generation(); !ok || g != last.Generation {
		t.Errorf("Generation() after the restart = %d (%v), want %d", g, ok, last.Generation)
	}
}

// A Restart still pending when the membership is lost is dropped (Lost,
// then Assigned, restarted the tasks from the committed offsets already);
// one asked after the loss, or with no loss, still restarts; a Release
// still rejoins.
func TestRestartDroppedAfterALoss(t *testing.T) {
	newMember := func() *Member {
		return &Member{log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{Handler: &recorder{}}, live: true}
	}
	reason := errors.New("aborted")
	for _, tc := range []struct {
		name string
		do   func(m *Member)
		want error // nil: the heartbeat loop goes on
	}{
		{"restart", func(m *Member) { m.Restart(reason) }, errRestart},
		{"restart, then lost", func(m *Member) { m.Restart(reason); m.lose(context.Background(), reason) }, nil},
		{"lost, then restart", func(m *Member) { m.lose(context.Background(), reason); m.live = true; m.Restart(reason) }, errRestart},
		{"restart, lost, release", func(m *Member) { m.Restart(reason); m.lose(context.Background(), reason); m.Release(3) }, errReleased},
	} {
		m := newMember()
		tc.do(m)
		got := m.rejoinReason()
		if (tc.want == nil) != (got == nil) || (tc.want != nil && !errors.Is(got, tc.want)) {
			t.Errorf("%s: rejoinReason() = %v, want %v", tc.name, got, tc.want)
		}
		if again := m.rejoinReason(); again != nil {
			t.Errorf("%s: a second rejoinReason() = %v, want nil (each reason once)", tc.name, again)
		}
	}
}
