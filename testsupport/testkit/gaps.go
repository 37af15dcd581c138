package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/segmentio/kafka-go"
)

// LongestAlertGap reads the alerts topic (partitions partitions) until it
// has read want records, and returns the longest time between two
// consecutive alerts, by record time, of one of tasks, among those written
// within [from, to]. An alert's task is its symbol's.
func LongestAlertGap(ctx context.Context, client *kafka.Client, topic string, partitions, want int, tasks []int, from, to time.Time) (time.Duration, error) {
	times := map[int][]time.Time{}
	n := 0
	var bad error
	err := Collect(ctx, NewTopicReader(client, topic, partitions), func(rec kafka.Record, value []byte) {
		n++
		var a struct{ Symbol string }
		if err := json.Unmarshal(value, &a); err != nil {
			bad = fmt.Errorf("alert %q: %w", value, err)
			return
		}
		p := join.SymbolTask(a.Symbol, partitions)
		times[p] = append(times[p], rec.Time)
	}, func() bool { return n >= want })
	if err == nil {
		err = bad
	}
	if err != nil {
		return 0, err
	}
	var longest time.Duration
	for _, p := range tasks {
		var prev time.Time
		for _, ts := range times[p] {
			if ts.Before(from) || ts.After(to) {
				continue
			}
			if !prev.IsZero() {
				longest = max(longest, ts.Sub(prev))
			}
			prev = ts
		}
	}
	return longest, nil
}
