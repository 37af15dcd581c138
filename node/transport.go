package node

import (
	"context"
	"net"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
)

// kafka-go's transport sends one request per connection at a time and
// opens a connection for each request that finds none idle, so a worker
// whose 1,024 tasks each ask for their committed offset and their end
// offsets at once opens a thousand connections (and runs out of files).
// limitTransport bounds the requests in flight through the node's
// transport, and so its connections, in lanes:
//
//   - Fetch requests are not limited here: the tasks' go through
//     fetch.Mux, which has at most fetch.MuxInflight in flight per broker.
//   - The group's own requests (JoinGroup, SyncGroup, Heartbeat,
//     LeaveGroup, FindCoordinator, OffsetCommit): at most groupInflight
//     at once, in a lane of their own, so that neither a heartbeat nor the
//     commit of a handover queues behind the tasks' requests.
//   - Produce requests: at most produceInflight at once.
//   - Every other request (ListOffsets, OffsetFetch, Metadata, the admin
//     calls): at most otherInflight at once.
//
// A request holds its lane's slot until kafka-go's transport answers it,
// not until its caller stops waiting: a caller whose context is cancelled
// returns at once, but the request stays on its connection until the
// broker answers (kafka-go does not abandon a request sent), and a slot
// freed then would let the next request dial another connection. The
// request goes on without the caller's cancellation, under its deadline.
// Measured on one worker with 1,024 tasks (integration/width_test.go):
// releasing the slot when the caller gave up let the tasks' cancelled end
// checks open over 300 connections.
type limitTransport struct {
	rt      kafka.RoundTripper
	group   chan struct{}
	produce chan struct{}
	other   chan struct{}
}

const (
	groupInflight   = 3 // a JoinGroup waiting for the rebalance, a heartbeat or a commit, and one more
	produceInflight = 4
	otherInflight   = 4
)

func newLimitTransport(rt kafka.RoundTripper) *limitTransport {
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	return &limitTransport{rt: rt, group: make(chan struct{}, groupInflight), produce: make(chan struct{}, produceInflight), other: make(chan struct{}, otherInflight)}
}

// lane is the semaphore of requests of api, nil for none.
func (t *limitTransport) lane(api protocol.ApiKey) chan struct{} {
	switch api {
	case protocol.Fetch:
		return nil
	case protocol.JoinGroup, protocol.SyncGroup, protocol.Heartbeat, protocol.LeaveGroup, protocol.FindCoordinator, protocol.OffsetCommit:
		return t.group
	case protocol.Produce:
		return t.produce
	default:
		return t.other
	}
}

type roundTripped struct {
	res kafka.Response
	err error
}

// Unwrap returns the transport t limits: package join reads its TLS and
// SASL settings for a connection of its own (the partition counts it
// confirms uncached).
func (t *limitTransport) Unwrap() kafka.RoundTripper { return t.rt }

func (t *limitTransport) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	if lo, ok := req.(*listoffsets.Request); ok {
		req = byLeader{lo}
	}
	sem := t.lane(req.ApiKey())
	if sem == nil {
		return t.rt.RoundTrip(ctx, addr, req)
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// The request runs to its answer (or its deadline) holding the slot;
	// the goroutine ends then, so at most the lane's size of them run.
	rctx := context.WithoutCancel(ctx)
	cancel := context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(rctx, d)
	}
	out := make(chan roundTripped, 1)
	go func() {
		defer func() { <-sem }()
		defer cancel()
		res, err := t.rt.RoundTrip(rctx, addr, req)
		out <- roundTripped{res, err}
	}()
	select {
	case r := <-out:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// byLeader is a ListOffsets request sent as one request per partition
// leader. kafka-go's own split sends one request per partition, all at
// once: a lag check of 1,024 partitions then wants 1,024 connections.
// Kafka answers any number of distinct partitions in one ListOffsets; a
// partition asked twice (its first and its last offset) goes in a second
// request, as kafka-go requires for matching the answers.
type byLeader struct{ *listoffsets.Request }

func (r byLeader) Split(cluster protocol.Cluster) ([]protocol.Message, protocol.Merger, error) {
	type key struct {
		leader int32
		round  int
	}
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]int{}
	byKey := map[key]*listoffsets.Request{}
	var order []key
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			leader := int32(-1)
			for _, cp := range cluster.Topics[t.Topic].Partitions {
				if cp.ID == p.Partition {
					leader = cp.Leader
					break
				}
			}
			k := key{leader, seen[tp{t.Topic, p.Partition}]}
			seen[tp{t.Topic, p.Partition}]++
			sub := byKey[k]
			if sub == nil {
				sub = &listoffsets.Request{ReplicaID: r.ReplicaID, IsolationLevel: r.IsolationLevel}
				byKey[k] = sub
				order = append(order, k)
			}
			if n := len(sub.Topics); n == 0 || sub.Topics[n-1].Topic != t.Topic {
				sub.Topics = append(sub.Topics, listoffsets.RequestTopic{Topic: t.Topic})
			}
			last := &sub.Topics[len(sub.Topics)-1]
			last.Partitions = append(last.Partitions, p)
		}
	}
	msgs := make([]protocol.Message, len(order))
	for i, k := range order {
		msgs[i] = byKey[k] // routed by its first partition's leader, which is k.leader
	}
	return msgs, new(listoffsets.Response), nil
}
