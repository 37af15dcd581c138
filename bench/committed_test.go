package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCommittedCount: on kfake, an output written in transactions (two
// committed, one aborted, across two partitions) and one written without:
// waitRecords is satisfied by the committed data records and not by one
// more, although the transactional output's end offsets (markers and
// aborted records included) sum to more; readAll and outputSpan give
// exactly the committed values, markers and aborted records left out.
func TestCommittedCount(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "eos", "alo"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := c.ListenAddrs()

	txn, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("bench-test"), kgo.DefaultProduceTopic("eos"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	var committed []string
	for i, commit := range []bool{true, false, true} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for k := range 5 {
			v := fmt.Sprintf("t%d-%d", i, k)
			if err := txn.ProduceSync(ctx, &kgo.Record{Partition: int32(k % 2), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if commit {
				committed = append(committed, v)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("alo"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var plainValues []string
	for k := range 7 {
		v := fmt.Sprintf("p%d", k)
		if err := plain.ProduceSync(ctx, &kgo.Record{Partition: int32(k % 2), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		plainValues = append(plainValues, v)
	}

	b := &bench{cfg: config{brokers: strings.Join(addrs, ",")}, client: &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 10 * time.Second}}
	ends, err := b.endOffsets(ctx, "eos", 2)
	if err == nil && (ends[0] == 0 || ends[1] == 0) {
		err = fmt.Errorf("a partition is empty: end offsets %v", ends)
	}
	if err != nil {
		t.Fatal(err)
	}
	if sum := ends[0] + ends[1]; sum <= int64(len(committed))+5 {
		t.Fatalf("eos end offsets %v sum to %d; want more than the %d committed and 5 aborted records (markers)", ends, sum, len(committed))
	}
	for _, tc := range []struct {
		topic string
		want  []string
	}{{"eos", committed}, {"alo", plainValues}} {
		n := int64(len(tc.want))
		if err := b.waitRecords(ctx, tc.topic, 2, n, 5*time.Second); err != nil {
			t.Errorf("%s: waitRecords(%d): %v", tc.topic, n, err)
		}
		if err := b.waitRecords(ctx, tc.topic, 2, n+1, 300*time.Millisecond); err == nil {
			t.Errorf("%s: waitRecords(%d) returned with %d data records", tc.topic, n+1, n)
		}
		var got []string
		if err := b.readAll(ctx, tc.topic, 2, func(_ int, _ time.Time, v []byte) { got = append(got, string(v)) }); err != nil {
			t.Fatalf("%s: readAll: %v", tc.topic, err)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: read %q; want %q", tc.topic, got, want)
		}
		// Markers: two commits per partition of eos (the abort's marker is
		// not one), none of alo; each commit marker comes after the
		// records of its transaction.
		markers, since := map[int]int{}, map[int]int{}
		err := b.readAllMarked(ctx, tc.topic, 2, func(p int, _ time.Time, _ []byte) { since[p]++ }, func(p int, _ time.Time) {
			if since[p] == 0 {
				t.Errorf("%s-%d: a commit marker with no record before it since the last", tc.topic, p)
			}
			markers[p]++
			since[p] = 0
		})
		if err != nil {
			t.Fatalf("%s: readAllMarked: %v", tc.topic, err)
		}
		wantMarkers := map[string]map[int]int{"eos": {0: 2, 1: 2}, "alo": {}}[tc.topic]
		if !maps.Equal(markers, wantMarkers) {
			t.Errorf("%s: commit markers per partition %v, want %v", tc.topic, markers, wantMarkers)
		}
		if _, _, on, err := b.outputSpan(ctx, tc.topic, 2); err != nil || on != n {
			t.Errorf("%s: outputSpan counted %d records (%v); want %d", tc.topic, on, err, n)
		}
	}
}
