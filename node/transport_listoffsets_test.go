package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestListOffsetsByLeader: a ListOffsets of many partitions goes as one
// request per leader (kafka-go's own split sends one per partition, each
// on a connection of its own), a partition asked twice in a second one.
func TestListOffsetsByLeader(t *testing.T) {
	cluster := protocol.Cluster{Brokers: map[int32]protocol.Broker{1: {ID: 1}, 2: {ID: 2}}, Topics: map[string]protocol.Topic{
		"n": {Name: "n", Partitions: map[int32]protocol.Partition{}},
	}}
	var parts []listoffsets.RequestPartition
	for p := range int32(8) {
		cluster.Topics["n"].Partitions[p] = protocol.Partition{ID: p, Leader: 1 + p%2}
		parts = append(parts, listoffsets.RequestPartition{Partition: p, Timestamp: kafka.LastOffset})
	}
	parts = append(parts, listoffsets.RequestPartition{Partition: 3, Timestamp: kafka.FirstOffset})
	msgs, _, err := byLeader{&listoffsets.Request{ReplicaID: -1, Topics: []listoffsets.RequestTopic{{Topic: "n", Partitions: parts}}}}.Split(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("%d requests; want 3 (one per leader, and one for partition 3 asked twice)", len(msgs))
	}
	for _, m := range msgs {
		r := m.(*listoffsets.Request)
		b, _ := r.Broker(cluster)
		seen := map[int32]bool{}
		for _, p := range r.Topics[0].Partitions {
			if leader := cluster.Topics["n"].Partitions[p.Partition].Leader; leader != b.ID {
				t.Errorf("partition %d (leader %d) in the request to broker %d", p.Partition, leader, b.ID)
			}
			if seen[p.Partition] {
				t.Errorf("partition %d twice in one request", p.Partition)
			}
			seen[p.Partition] = true
		}
	}
}

// TestListOffsetsByLeaderValues: through the node's transport, on a
// cluster of three brokers, the first and last offsets of every partition
// are each partition's own.
func TestListOffsetsByLeaderValues(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(9, "n"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second, Transport: newLimitTransport(tr)}
	ctx := context.Background()
	for p := range 9 {
		recs := make([]kafka.Record, p+1)
		if _, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: "n", Partition: p, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)}); err != nil {
			t.Fatal(err)
		}
	}
	var req []kafka.OffsetRequest
	for p := range 9 {
		req = append(req, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"n": req}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int][2]int64{}
	for _, po := range res.Topics["n"] {
		if po.Error != nil {
			t.Fatalf("partition %d: %v", po.Partition, po.Error)
		}
		got[po.Partition] = [2]int64{po.FirstOffset, po.LastOffset}
	}
	for p := range 9 {
		if want := [2]int64{0, int64(p + 1)}; got[p] != want {
			t.Errorf("partition %d: first, last %v; want %v", p, got[p], want)
		}
	}
}

// recordRT records the requests it is given.
type recordRT struct{ reqs []kafka.Request }

func (r *recordRT) RoundTrip(_ context.Context, _ net.Addr, req kafka.Request) (kafka.Response, error) {
	r.reqs = append(r.reqs, req)
	return nil, nil
}

// TestListOffsetsGoByLeader: the node's transport hands kafka-go its
// ListOffsets split by leader, not for kafka-go's split by partition.
func TestListOffsetsGoByLeader(t *testing.T) {
	rt := &recordRT{}
	newLimitTransport(rt).RoundTrip(context.Background(), nil, &listoffsets.Request{})
	if len(rt.reqs) != 1 {
		t.Fatalf("%d requests sent; want 1", len(rt.reqs))
	}
	if _, ok := rt.reqs[0].(byLeader); !ok {
		t.Fatalf("a ListOffsets went as %T; want byLeader", rt.reqs[0])
	}
}
