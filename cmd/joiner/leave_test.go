package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/twmb/franz-go/pkg/kfake"
)

type nopHandler struct{ assigned chan group.Assignment }

func (h nopHandler) Assigned(_ context.Context, a group.Assignment) {
	select {
	case h.assigned <- a:
	default:
	}
}
func (nopHandler) Rebalancing(context.Context) {}
func (nopHandler) Lost(context.Context, error) {}

func leave(args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := runLeave(args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestLeaveUsage(t *testing.T) {
	t.Setenv("JOINER_INSTANCE_ID", "pod-0") // never read: removal is explicit
	for _, args := range [][]string{nil, {"--group", "g"}, {"--instance-id", "x", "extra"}, {"--bogus"},
		{"--instance-id", "x", "--sasl-username", "u"}} {
		if code, out, errOut := leave(args...); code != 2 || out != "" || errOut == "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 2 and a message", args, code, out, errOut)
		}
	}
}

// joiner leave removes a static member that stopped without leaving; the
// group rebalances at once. Removing it again fails with exit status 1.
func TestLeaveRemovesStaticMember(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.SeedTopics(2, "market", "notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	h := nopHandler{assigned: make(chan group.Assignment, 1)}
	m, err := group.New(group.Config{
		Brokers: c.ListenAddrs(), GroupID: "g", InstanceID: "pod-1", Topics: record.Topics{Market: "market", Notifications: "notifications"},
		SessionTimeout: time.Minute, HeartbeatInterval: 100 * time.Millisecond, Handler: h,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-h.assigned:
	case <-time.After(10 * time.Second):
		t.Fatal("no assignment")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("static stop: %v", err)
	}
	code, out, errOut := leave("--brokers", brokers, "--group", "g", "--instance-id", "pod-1")
	if code != 0 || !strings.Contains(out, "removed instance pod-1 from group g") || errOut != "" {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = leave("--brokers", brokers, "--group", "g", "--instance-id", "pod-1")
	if code != 1 || out != "" || !strings.Contains(errOut, "no member with this instance id") {
		t.Errorf("again: code %d, stdout %q, stderr %q; want 1 and no such instance", code, out, errOut)
	}
}
