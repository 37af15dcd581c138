package oracle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadCommitted makes r read read_committed: the alerts of exactly-once
// workers' committed transactions only. It returns r.
//
// The alerts r reports are then read by franz-go's consumer (kgo, with
// read_committed), a client independent of the code under test, whenever
// the reader's client is plain TCP (no TLS or SASL); joiner's own
// read_committed fetch (package fetch, through demo.TopicReader) reads them
// too, and CrossCheck compares the two. With TLS or SASL, r reads with
// joiner's fetch alone. Close ends the franz-go client.
func (r *AlertReader) ReadCommitted() *AlertReader {
	r.r.ReadCommitted()
	if seeds, ok := plainSeeds(r.client); ok {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(r.topic),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(50*time.Millisecond))
		if err == nil {
			r.indep = cl
		} else {
			r.indepErr = fmt.Errorf("oracle: franz-go reader of %s: %w", r.topic, err)
		}
	}
	return r
}

// plainSeeds returns c's broker addresses if c dials plain TCP.
func plainSeeds(c *kafka.Client) ([]string, bool) {
	if c == nil || c.Addr == nil {
		return nil, false
	}
	switch t := c.Transport.(type) {
	case nil:
	case *kafka.Transport:
		if t.TLS != nil || t.SASL != nil {
			return nil, false
		}
	default:
		return nil, false
	}
	return strings.Split(c.Addr.String(), ","), true
}

// pollIndependent reads what franz-go's reader has that is new, until a
// poll finds nothing within a short wait.
func (r *AlertReader) pollIndependent(ctx context.Context) error {
	if r.indepErr != nil {
		return r.indepErr
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := r.indep.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var errs []error
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s-%d: %w", topic, p, err))
			}
		})
		if len(errs) > 0 {
			return fmt.Errorf("oracle: franz-go reader: %w", errors.Join(errs...))
		}
		n := 0
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			r.values = append(r.values, rec.Value)
			r.origins = append(r.origins, fmt.Sprintf("%s-%d@%d (producer %d, epoch %d, written %s)",
				rec.Topic, rec.Partition, rec.Offset, rec.ProducerID, rec.ProducerEpoch, rec.Timestamp.UTC().Format("15:04:05.000")))
			hs := make([]kafka.Header, len(rec.Headers))
			for i, h := range rec.Headers {
				hs[i] = kafka.Header{Key: h.Key, Value: h.Value}
			}
			r.headers = append(r.headers, hs)
		})
		if n == 0 {
			return nil
		}
	}
}

// CrossCheck reports whether joiner's own read_committed fetch read the
// same alerts (as a multiset of values) as franz-go's independent reader.
// Call it once both have read everything (after the oracle settled). It
// is nil when r does not read read_committed with franz-go.
func (r *AlertReader) CrossCheck(ctx context.Context) error {
	if r.indep == nil {
		return r.indepErr
	}
	if err := r.pollOwn(ctx); err != nil {
		return err
	}
	count := func(vs [][]byte) map[string]int {
		m := make(map[string]int, len(vs))
		for _, v := range vs {
			m[string(v)]++
		}
		return m
	}
	indep, own := count(r.values), count(r.own)
	var diffs []string
	for v, n := range indep {
		if own[v] != n {
			diffs = append(diffs, fmt.Sprintf("%dx franz-go, %dx joiner's fetch: %s", n, own[v], v))
		}
	}
	for v, n := range own {
		if _, ok := indep[v]; !ok {
			diffs = append(diffs, fmt.Sprintf("0x franz-go, %dx joiner's fetch: %s", n, v))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	return fmt.Errorf("oracle: joiner's read_committed fetch of %s disagrees with franz-go's on %d alerts (%d records against %d), e.g. %s",
		r.topic, len(diffs), len(r.own), len(r.values), strings.Join(diffs[:min(len(diffs), 5)], "; "))
}

// pollOwn reads with joiner's read_committed fetch what is new.
func (r *AlertReader) pollOwn(ctx context.Context) error {
	for {
		n, err := r.r.Poll(ctx, func(_ kafka.Record, v []byte) { r.own = append(r.own, bytes.Clone(v)) })
		if err != nil || n == 0 {
			return err
		}
	}
}

// Close ends r's franz-go reader, if any.
func (r *AlertReader) Close() {
	if r.indep != nil {
		r.indep.Close()
	}
}

// DuplicateOrigins lists, for up to max alert ids read more than once by
// franz-go's reader, where each copy is (partition, offset, producer id and
// epoch): which transactions committed them.
func (r *AlertReader) DuplicateOrigins(max int) []string {
	if r.indep == nil {
		return nil
	}
	var order []string
	copies := map[string][]string{}
	for i, v := range r.values {
		ms, err := members(v)
		if err != nil {
			continue
		}
		a, _, _ := alertOf(ms, "")
		if a.ID == "" {
			continue
		}
		if copies[a.ID] == nil {
			order = append(order, a.ID)
		}
		copies[a.ID] = append(copies[a.ID], r.origins[i])
	}
	var out []string
	for _, id := range order {
		if len(copies[id]) > 1 && len(out) < max {
			out = append(out, id+": "+strings.Join(copies[id], ", "))
		}
	}
	return out
}
