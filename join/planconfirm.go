package join

import (
	"context"
	"errors"
	"fmt"
	"github.com/joiner-dev/joiner/fetch"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// The metadata window of a partition change (issue 19, item 5).
//
// checkGrowth sees a partition change through the client's cached
// metadata, seconds late. In those seconds producers switch to the new
// count one by one: a tick producer already on the new count writes a
// moved symbol's tick to a partition no lookup under the plan asks, and a
// notification producer still on the old count writes a later
// notification to the plan's partition; joined, it gets the older price,
// silently. So no notification is joined before the plan's partition
// count is confirmed for it, uncached:
//
//   - A confirmation round reads, in this order, the end offsets of this
//     worker's notifications partitions (ListOffsets) and then the input
//     topics' partition counts from a broker with a Metadata request of
//     its own (not kafka-go's cache: partitionCounter).
//   - A notification of partition p at offset o is confirmed by a round
//     whose end offset of p is above o and whose market count is the
//     plan's: it was written before the round read that end, so every
//     tick written before it was written before the Metadata read, with a
//     count the producer knew, at most the one read. With a grace D the
//     round's Metadata request must also have been sent at least D after
//     the notification's timestamp T by the clock, since a tick up to D
//     late may be written after the notification (the merge's
//     end-confirmation rule, merge.go). Every tick the join guarantee
//     covers (README "Timestamp order") is then in its symbol's partition
//     under the plan's count or an earlier one, which lookups ask
//     (repartition.go).
//   - A batch whose last notification is not confirmed asks for a round
//     and waits for it: rounds are shared by every task of the worker
//     (one in flight, at most one per Config.PartitionCheckInterval), and
//     a round confirms everything written before it, fetched yet or not.
//     The cost is latency: a live notification waits for the next round
//     (about half the interval plus two round trips under a steady load).
//   - A round that finds the market topic with more partitions than the
//     plan holds every join: with the notifications topic grown too, until
//     the group's replan (errRepartitioning); with the market grown alone,
//     until the notifications topic gets the same count (errMarketAhead,
//     an ERROR every 10 s): ticks written with the new count are in
//     partitions no task reads. A market with fewer partitions than the
//     plan (the topic was recreated) holds them too.
//
// Remaining assumption: the broker that answers the Metadata request
// knows every partition another broker already took a write for (brokers
// apply a partition change within milliseconds of each other).

// DefaultPartitionCheckInterval is the default of
// Config.PartitionCheckInterval.
const DefaultPartitionCheckInterval = 10 * time.Millisecond

// partitionCountTimeout bounds one confirmation round.
const partitionCountTimeout = 5 * time.Second

// errMarketAhead holds joins while the market topic has more partitions
// than the plan and the notifications topic does not.
var errMarketAhead = errors.New("the market topic has more partitions than the group planned and the notifications topic does not: ticks written with the new count are in partitions no task reads; joins wait until the notifications topic has as many partitions (the group then replans)")

// errPlanUnconfirmed fails a batch whose partition counts could not be
// confirmed (the round failed or took too long): retried.
var errPlanUnconfirmed = errors.New("the input topics' partition counts could not be confirmed")

// partitionCounter reads topics' partition counts from a broker, never
// from a cache. Tests' fake clients implement it; for a *kafka.Client it
// is a dialCounter.
type partitionCounter interface {
	PartitionCounts(ctx context.Context, topics ...string) (map[string]int, error)
}

// confirmRound is one completed confirmation round.
type confirmRound struct {
	ends   map[int]int64 // notifications partition -> end offset read
	sent   time.Time     // when the Metadata request was sent
	market int           // partition counts read
	notes  int
}

// planConfirm holds the rounds of one Processor (see above).
type planConfirm struct {
	counter  partitionCounter
	interval time.Duration
	closer   func() // closes the counter's connection

	mu       sync.Mutex
	last     *confirmRound // the newest successful round
	lastErr  error         // of the newest round, nil when it succeeded
	inFlight chan struct{} // closed when the round in flight ends; nil when none
	nextAt   time.Time     // the earliest start of the next round
}

// newPlanConfirm returns the rounds of a Processor reading with client,
// or nil when client cannot read partition counts uncached (a fake).
func newPlanConfirm(client Fetcher, interval time.Duration) (*planConfirm, error) {
	c := &planConfirm{interval: interval}
	var kc *kafka.Client
	switch cl := client.(type) {
	case partitionCounter:
		c.counter = cl
		return c, nil
	case *kafka.Client:
		kc = cl
	case interface{ Client() *kafka.Client }: // a *fetch.Mux
		kc = cl.Client()
	default:
		return nil, nil
	}
	d, err := newDialCounter(kc)
	if err != nil {
		return nil, err
	}
	c.counter, c.closer = d, d.close
	return c, nil
}

func (c *planConfirm) close() {
	if c != nil && c.closer != nil {
		c.closer()
	}
}

// planReady returns nil when the notifications recs of task t may be
// joined under a plan of parts partitions (peers.planReady).
func (t *processTask) planReady(ctx context.Context, parts int, recs []fetchedRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return t.env.peers.planReady(ctx, parts, t.p, recs[len(recs)-1].Offset, maxTs(recs))
}

// planReady implements peers: the plan is not known to be outdated
// (checkGrowth), and it is confirmed for the notification of task p at
// offset off and time tsMs (confirmPlan).
func (w *Processor) planReady(ctx context.Context, parts, p int, off, tsMs int64) error {
	if w.repartitioning(parts) {
		return fmt.Errorf("%w: %w", errLookup, errRepartitioning)
	}
	return w.confirmPlan(ctx, parts, p, off, tsMs)
}

// confirmPlan returns nil once the notification of task p at offset off
// and time tsMs (the last of a batch), joined under a plan of parts
// partitions, is confirmed (see above), waiting for a round when needed;
// else an error wrapping errLookup.
func (w *Processor) confirmPlan(ctx context.Context, parts, p int, off, tsMs int64) error {
	c := w.confirm
	if c == nil {
		return nil
	}
	var due time.Time // the Metadata request must be sent at or after it
	if g := w.cfg.Grace; g > 0 {
		due = time.UnixMilli(tsMs).Add(g)
	}
	begin := time.Now()
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		r, rerr, flight := c.last, c.lastErr, c.inFlight
		c.mu.Unlock()
		if r != nil && r.ends[p] > off && !r.sent.Before(due) {
			return w.judgeRound(r, parts)
		}
		if attempt > 0 && rerr != nil {
			return fmt.Errorf("%w: %w: %w", errLookup, errPlanUnconfirmed, rerr)
		}
		if time.Since(begin) > c.interval+partitionCountTimeout || time.Until(due) > time.Second {
			// No round covered this batch in that time, or its grace is
			// far ahead: retried later.
			return fmt.Errorf("%w: %w (notification offset %d of partition %d not yet covered)", errLookup, errPlanUnconfirmed, off, p)
		}
		if flight == nil {
			flight = w.startRound(ctx, p, due)
		}
		select {
		case <-flight:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startRound starts a round, or joins the one a concurrent caller
// started, and returns the channel closed when it ends. It runs on the
// caller's goroutine's behalf in a goroutine the Processor waits for
// (w.rounds), so a caller whose ctx ends does not cancel the others'.
func (w *Processor) startRound(ctx context.Context, p int, due time.Time) chan struct{} {
	c := w.confirm
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight != nil {
		return c.inFlight
	}
	done := make(chan struct{})
	c.inFlight = done
	start := c.nextAt
	if due.After(start) {
		start = due
	}
	w.rounds.Add(1)
	go func() {
		defer w.rounds.Done()
		rctx := w.ctx // the Processor's, not the caller's: others wait for it too
		if rctx == nil {
			rctx = ctx
		}
		r, err := w.round(rctx, p, start)
		c.mu.Lock()
		c.nextAt = time.Now().Add(c.interval)
		if err == nil {
			c.last = r
		}
		c.lastErr = err
		c.inFlight = nil
		c.mu.Unlock()
		close(done)
	}()
	return done
}

// round waits until start, reads the end offsets of the worker's
// notifications partitions (and p's), then the partition counts.
func (w *Processor) round(ctx context.Context, p int, start time.Time) (*confirmRound, error) {
	if d := time.Until(start); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(ctx, partitionCountTimeout)
	defer cancel()
	w.mu.RLock()
	req := []kafka.OffsetRequest{{Partition: p, Timestamp: kafka.LastOffset}}
	for q := range w.procs {
		if q != p {
			req = append(req, kafka.OffsetRequest{Partition: q, Timestamp: kafka.LastOffset})
		}
	}
	w.mu.RUnlock()
	topic := w.cfg.Topics.Notifications
	res, err := w.cfg.Client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	if err != nil {
		return nil, fmt.Errorf("reading the end offsets of %s: %w", topic, err)
	}
	r := &confirmRound{ends: map[int]int64{}}
	for _, po := range res.Topics[topic] {
		if po.Error == nil {
			r.ends[po.Partition] = po.LastOffset
		}
	}
	r.sent = time.Now()
	counts, err := w.confirm.counter.PartitionCounts(ctx, w.cfg.Topics.Market, topic)
	if err != nil {
		return nil, fmt.Errorf("reading the partition counts of %s and %s: %w", w.cfg.Topics.Market, topic, err)
	}
	r.market, r.notes = counts[w.cfg.Topics.Market], counts[topic]
	return r, nil
}

// judgeRound returns nil when round r confirms a plan of parts
// partitions, else why joins wait (wrapping errLookup).
func (w *Processor) judgeRound(r *confirmRound, parts int) error {
	w.metrics.PartitionsAhead.Set(float64(max(r.market-parts, 0)))
	switch {
	case r.market == parts:
		return nil
	case r.market > parts && r.notes > parts:
		w.noteGrowth(parts, map[string]int{w.cfg.Topics.Market: r.market, w.cfg.Topics.Notifications: r.notes})
		return fmt.Errorf("%w: %w", errLookup, errRepartitioning)
	case r.market > parts:
		w.outLog.Error("market-ahead", "joins wait: "+errMarketAhead.Error(),
			"planned", parts, "market", w.cfg.Topics.Market, "market_partitions", r.market,
			"notifications", w.cfg.Topics.Notifications, "notifications_partitions", r.notes)
		// errRepartitioning too: the retries are not logged, this line is.
		return fmt.Errorf("%w: %w: %w (%s has %d partitions, %s %d, planned %d)", errLookup, errRepartitioning, errMarketAhead,
			w.cfg.Topics.Market, r.market, w.cfg.Topics.Notifications, r.notes, parts)
	}
	return fmt.Errorf("%w: %w: %s has %d partitions, fewer than the %d planned (was it recreated?)", errLookup, errPlanUnconfirmed,
		w.cfg.Topics.Market, r.market, parts)
}

// dialCounter reads partition counts over a connection of its own to a
// bootstrap broker, with the TLS and SASL settings of the client's
// Transport. kafka-go's Client.Metadata answers from the Transport's
// cache (refreshed every few seconds), which is what the window above
// is about.
type dialCounter struct {
	dialer *kafka.Dialer
	addrs  []string

	mu   sync.Mutex
	conn *kafka.Conn
}

func newDialCounter(cl *kafka.Client) (*dialCounter, error) {
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	switch tr := fetch.TransportOf(cl.Transport); {
	case cl.Transport == nil:
	case tr != nil:
		d.TLS, d.SASLMechanism, d.ClientID = tr.TLS, tr.SASL, tr.ClientID
	default:
		return nil, fmt.Errorf("join: Config.Client's Transport is a %T; the partition counts are read over a connection of their own and need a *kafka.Transport (its TLS and SASL settings), or a wrapper whose Unwrap returns one", cl.Transport)
	}
	if cl.Addr == nil {
		return nil, errors.New("join: Config.Client has no Addr")
	}
	c := &dialCounter{dialer: d}
	for a := range strings.SplitSeq(cl.Addr.String(), ",") { // kafka.TCP's canonical host:port list
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	return c, nil
}

// PartitionCounts implements partitionCounter. A connection that fails
// is closed; the next call dials again (each bootstrap address in turn).
func (d *dialCounter) PartitionCounts(ctx context.Context, topics ...string) (map[string]int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		var err error
		for _, a := range d.addrs {
			if d.conn, err = d.dialer.DialContext(ctx, "tcp", a); err == nil {
				break
			}
		}
		if d.conn == nil {
			return nil, fmt.Errorf("dialing %v: %w", d.addrs, err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = d.conn.SetDeadline(dl)
	}
	parts, err := d.conn.ReadPartitions(topics...)
	if err != nil {
		d.conn.Close()
		d.conn = nil
		return nil, err
	}
	counts := make(map[string]int, len(topics))
	for _, p := range parts {
		counts[p.Topic]++
	}
	return counts, nil
}

func (d *dialCounter) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}
