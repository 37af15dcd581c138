package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// TestIntegrationCompactedMarketRestore: the market topic as a changelog
// (cleanup.policy=compact, min.compaction.lag.ms 30 s ≥ --history-retention
// 10 s), with segments rolled every 2 s so the broker's cleaner compacts it
// while the load flows (log.cleaner.backoff.ms, 15 s by default, paces it).
// Once compaction removed records, the worker that held every task stops
// and one with an empty state dir takes them over: it restores each task
// from the partition's first offset across the offset gaps, reading fewer
// records than the offsets it restored span, and every alert, the ones it
// made from the restored stores included, carries the as-of price the input
// implies (the oracle).
func TestIntegrationCompactedMarketRestore(t *testing.T) {
	t.Setenv("JOINER_LEAVE_ON_SHUTDOWN", "true") // the takeover starts at once
	c := newCluster(t, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var cfgs []kafka.IncrementalAlterConfigsRequestConfig
	for k, v := range map[string]string{
		"cleanup.policy": "compact", "min.compaction.lag.ms": "30000", "segment.ms": "2000",
		"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000",
	} {
		cfgs = append(cfgs, kafka.IncrementalAlterConfigsRequestConfig{Name: k, Value: v, ConfigOperation: kafka.ConfigOperationSet})
	}
	res, err := c.client.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{Resources: []kafka.IncrementalAlterConfigsRequestResource{
		{ResourceType: kafka.ResourceTypeTopic, ResourceName: c.market, Configs: cfgs},
	}})
	if err != nil {
		t.Fatalf("compacting %s: %v", c.market, err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			t.Fatalf("compacting %s: %v", c.market, r.Error)
		}
	}
	// The workers' start check must see the new configs.
	c.poll("the market topic's configs", 30*time.Second, func() (bool, string) {
		r, err := c.client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{
			{ResourceType: kafka.ResourceTypeTopic, ResourceName: c.market, ConfigNames: []string{"cleanup.policy", "segment.ms"}}}})
		if err != nil || len(r.Resources) != 1 {
			return false, fmt.Sprint(err)
		}
		got := map[string]string{}
		for _, e := range r.Resources[0].ConfigEntries {
			got[e.ConfigName] = e.ConfigValue
		}
		return got["cleanup.policy"] == "compact" && got["segment.ms"] == "2000", fmt.Sprint(got)
	})
	c.flags = []string{"--history-retention", "10s"}
	w1 := c.start("w1")
	c.waitStable([]*worker{w1}, 0, 60*time.Second)

	// 100 ticks/s over 55 symbols, 300 notifications/s, for 150 s.
	cfg := oracle.Config{Rounds: 1500, TicksPerRound: 10, NotificationsPerRound: 30, RoundInterval: 100 * time.Millisecond,
		Symbols: 50, LateSymbols: 5, NoTickSymbols: 5}
	p := oracle.NewProducer(brokers, nil, oracle.Topics{Market: c.market, Notifications: c.notifs, Alerts: c.alertsT}, cfg)
	produced := make(chan error, 1)
	go func() { produced <- p.Run(ctx) }()

	// Wait until the cleaner removed a good share of the records: the
	// topic holds fewer than its offsets span.
	var kept int
	var span int64
	c.poll("compaction of the market topic", 150*time.Second, func() (bool, string) {
		select {
		case err := <-produced:
			t.Fatalf("the load ended before the market topic was compacted (%v)", err)
		default:
		}
		ends, err := c.endOffsets(ctx, c.market)
		if err != nil {
			return false, err.Error()
		}
		span = 0
		for _, e := range ends {
			span += e
		}
		if kept, err = countRecords(ctx, c, c.market); err != nil {
			return false, err.Error()
		}
		time.Sleep(2 * time.Second)
		return span >= 3000 && float64(kept) < 0.7*float64(span), fmt.Sprintf("the market topic holds %d records over %d offsets", kept, span)
	})
	_, ticks, _ := p.Workload().Counts()
	t.Logf("compacted: the market topic holds %d records over %d offsets (%d ticks produced so far)", kept, span, ticks)

	// The takeover, bulk-loading each store: ranges read at once from
	// offsets that may fall in a gap.
	c.stop(w1)
	c.flags = append(c.flags, "--bulk-restore-min", "1")
	w2 := c.start("w2")
	c.waitStable([]*worker{w2}, 0, 60*time.Second)

	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	checkOracle(ctx, t, c, p, 2*time.Minute)

	// The restores of w2 read fewer records than they spanned.
	read, span, tasks := restoredByLog(t, w2.logPath)
	t.Logf("w2 restored %d tasks: %d records read over %d offsets", tasks, read, span)
	if tasks != partitions {
		t.Errorf("w2 logged %d restores, want %d", tasks, partitions)
	}
	if read == 0 || read >= span {
		t.Errorf("w2's restores read %d records over %d offsets: want fewer records than offsets from a compacted topic", read, span)
	}
	if g := w2.metricsOf(t).Sum("joiner_market_retention_unsafe"); g != 0 {
		t.Errorf("joiner_market_retention_unsafe = %v for a compacted market topic with enough lag", g)
	}
	c.stop(w2)
}

// countRecords reads every partition of topic from its start to its end
// offset and counts its records (offsets a compaction emptied hold none).
func countRecords(ctx context.Context, c *cluster, topic string) (int, error) {
	ends, err := c.endOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	total := 0
	for p, end := range ends {
		for next := int64(0); next < end; {
			res, err := c.client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p, Offset: next, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
			if err != nil {
				return 0, err
			}
			if res.Error != nil {
				return 0, res.Error
			}
			n := 0
			for {
				rec, err := res.Records.ReadRecord()
				if err != nil {
					break
				}
				if rec.Offset < next || rec.Offset >= end {
					continue
				}
				next = rec.Offset + 1
				n++
			}
			if n == 0 {
				break
			}
			total += n
		}
	}
	return total, nil
}

// restoredByLog sums, over the "restore complete" lines of a JSON worker
// log, the records each restore read, and over its "restore started" lines
// the offsets each was to read (end_offset - from_offset), keeping the last
// of each task.
func restoredByLog(t *testing.T, path string) (read, span int64, tasks int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Msg     string `json:"msg"`
		Task    *int   `json:"task"`
		From    int64  `json:"from_offset"`
		End     int64  `json:"end_offset"`
		Records int64  `json:"records"`
	}
	spans, reads := map[int]int64{}, map[int]int64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l line
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Task == nil {
			continue
		}
		switch l.Msg {
		case "restore started":
			spans[*l.Task] = l.End - l.From
		case "restore complete":
			reads[*l.Task] = l.Records
		}
	}
	for p, n := range reads {
		read += n
		span += spans[p]
	}
	return read, span, len(reads)
}
