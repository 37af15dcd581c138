package node

import (
	"context"
	"net"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// kafka-go's transport sends one request per connection at a time and
// opens a connection for each request that finds none idle, so a worker
// whose 1,024 tasks each ask for their committed offset and their end
// offsets at once opens a thousand connections (and runs out of files).
// limitTransport bounds the requests in flight through the node's
// transport, and so its connections:
//
//   - Fetch requests are not limited here: the tasks' go through
//     fetch.Mux, which has at most fetch.MuxInflight in flight per broker.
//   - The group's own requests (JoinGroup, SyncGroup, Heartbeat,
//     LeaveGroup, FindCoordinator, OffsetCommit) are not limited: JoinGroup
//     waits for the rebalance, and neither a heartbeat nor the commit of a
//     handover may queue behind the tasks' requests.
//   - Produce requests: at most produceInflight at once.
//   - Every other request (ListOffsets, OffsetFetch, OffsetCommit,
//     Metadata, the admin calls): at most otherInflight at once.
type limitTransport struct {
	rt      kafka.RoundTripper
	produce chan struct{}
	other   chan struct{}
}

const (
	produceInflight = 8
	otherInflight   = 8
)

func newLimitTransport(rt kafka.RoundTripper) *limitTransport {
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return &limitTransport{rt: rt, produce: make(chan struct{}, produceInflight), other: make(chan struct{}, otherInflight)}
}

// Unwrap returns the transport t limits: package join reads its TLS and
// SASL settings for a connection of its own (the partition counts it
// confirms uncached).
func (t *limitTransport) Unwrap() kafka.RoundTripper { return t.rt }

func (t *limitTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	var sem chan struct{}
	switch req.ApiKey() {
	case protocol.Fetch, protocol.JoinGroup, protocol.SyncGroup, protocol.Heartbeat, protocol.LeaveGroup, protocol.FindCoordinator, protocol.OffsetCommit:
		return t.rt.RoundTrip(ctx, addr, req)
	case protocol.Produce:
		sem = t.produce
	default:
		sem = t.other
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-sem }()
	return t.rt.RoundTrip(ctx, addr, req)
}
