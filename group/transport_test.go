package group

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/consumer"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
	"github.com/segmentio/kafka-go/protocol/joingroup"
)

// errCut is what every request of a member cut off from the broker fails
// with.
var errCut = errors.New("test: member cut off from the broker")

// testTransport is a member's way to the broker as a test controls it, at
// the transport, so that the Member under test runs unmodified. Cut makes
// every request fail at once, as when the network is gone (heartbeats stop
// reaching the coordinator, no LeaveGroup gets out); SetUserData replaces
// the subscription user data of the member's JoinGroup requests; HoldJoins
// keeps its JoinGroup requests from leaving until released; Heartbeats
// counts the heartbeats answered.
type testTransport struct {
	inner      *kafka.Transport
	cut        atomic.Bool
	heartbeats atomic.Int64

	mu       sync.Mutex
	userData []byte        // nil: unchanged
	joinGate chan struct{} // nil: JoinGroup goes out
}

func newTestTransport() *testTransport { return &testTransport{inner: &kafka.Transport{}} }

// Cut cuts the member off from the broker for good.
func (t *testTransport) Cut() { t.cut.Store(true) }

// SetUserData makes every later JoinGroup carry b as its user data.
func (t *testTransport) SetUserData(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.userData = b
}

// HoldJoins keeps every JoinGroup request from being sent until the
// returned function is called.
func (t *testTransport) HoldJoins() (release func()) {
	gate := make(chan struct{})
	t.mu.Lock()
	t.joinGate = gate
	t.mu.Unlock()
	return sync.OnceFunc(func() { close(gate) })
}

// Heartbeats returns the number of heartbeat requests answered (with or
// without an error code).
func (t *testTransport) Heartbeats() int64 { return t.heartbeats.Load() }

func (t *testTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if t.cut.Load() {
		return nil, errCut
	}
	if _, ok := req.(*heartbeat.Request); ok {
		resp, err := t.inner.RoundTrip(ctx, addr, req)
		if err == nil {
			t.heartbeats.Add(1)
		}
		return resp, err
	}
	if jr, ok := req.(*joingroup.Request); ok {
		t.mu.Lock()
		ud, gate := t.userData, t.joinGate
		t.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if ud != nil {
			rewritten, err := withUserData(jr, ud)
			if err != nil {
				return nil, err
			}
			req = rewritten
		}
	}
	return t.inner.RoundTrip(ctx, addr, req)
}

// withUserData returns a copy of jr whose protocols carry ud as their
// subscription user data.
func withUserData(jr *joingroup.Request, ud []byte) (*joingroup.Request, error) {
	out := *jr
	out.Protocols = make([]joingroup.RequestProtocol, len(jr.Protocols))
	for i, p := range jr.Protocols {
		var sub consumer.Subscription
		if err := protocol.Unmarshal(p.Metadata, consumer.MaxVersionSupported, &sub); err != nil {
			return nil, fmt.Errorf("test transport: decode subscription: %w", err)
		}
		sub.UserData = ud
		meta, err := protocol.Marshal(consumer.MaxVersionSupported, sub)
		if err != nil {
			return nil, fmt.Errorf("test transport: encode subscription: %w", err)
		}
		p.Metadata = meta
		out.Protocols[i] = p
	}
	return &out, nil
}
