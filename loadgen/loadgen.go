// Package loadgen produces price ticks and notifications keyed by stock
// symbol, partitioned with Kafka's murmur2 so that they are co-partitioned
// with what Java producers write. Every tick of the run is acknowledged
// before the first notification is sent, so each notification is produced
// after every tick of its symbol.
package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// Config configures a run. Zero values take the defaults shown.
type Config struct {
	// Brokers are bootstrap addresses. Required unless Writer is set.
	Brokers []string
	// Writer, when set, is used instead of one built from Brokers. Its
	// Topic must be empty.
	Writer *kafka.Writer
	// Transport carries the requests of the writer built from Brokers,
	// with its TLS and SASL settings (kafkasec). Default: kafka-go's.
	Transport *kafka.Transport

	// MarketTopic and NotificationsTopic. Default: market, notifications.
	MarketTopic        string
	NotificationsTopic string

	// Symbols is the number of symbols. Default: 10.
	Symbols int
	// TicksPerSymbol and NotificationsPerSymbol; zero produces none.
	TicksPerSymbol         int
	NotificationsPerSymbol int
	// Malformed is how many malformed notifications to add, to exercise
	// the dead-letter path. Default: 0.
	Malformed int
	// Rate is the target records per second; 0 means as fast as possible.
	Rate float64
	// Seed makes prices reproducible. Default: 1.
	Seed uint64
	// RunID is put in notification ids so several runs on the same topics
	// stay distinct. Default: none.
	RunID string
	// DropIDs leaves Summary.NotificationIDs empty, for runs too large to
	// keep every id (the demo counts alerts instead).
	DropIDs bool
	// RetryTimeout is how long failed writes are retried without progress
	// before the run gives up. Default: DefaultRetryTimeout.
	RetryTimeout time.Duration

	// Fields names the symbol member of ticks and notifications and the
	// price member of ticks. Default: symbol, price.
	Fields record.Fields
	// ExtraFields writes the notifications in the shapes of
	// ShapedNotification, one after the other: members of their own,
	// nested values, long integers, escapes, members named like the
	// join's. Default: the plain {"id","user","symbol","text"}.
	ExtraFields bool
	// NotificationBytes pads each notification to at least this many
	// bytes with a "meta" member holding an object (a channel, a language
	// and a body of filler), as a notification with a text, a user and
	// metadata is. Default: 0, no padding.
	NotificationBytes int
	// Headers puts NotificationHeaders on every notification.
	Headers bool
	// OutOfOrder stamps each tick up to this long before it is written
	// (a random amount), as producers with retries do: the ticks are out
	// of timestamp order by up to that much. Default: 0 (stamped when
	// written).
	OutOfOrder time.Duration

	// Progress receives a line at least once a second and a summary.
	// Default: io.Discard.
	Progress io.Writer

	// Transactional writes each chunk of records (up to 1,000) in one
	// Kafka transaction, with produce's transactional producer, from
	// Brokers (not Writer). Default: false.
	Transactional bool
	// AbortEvery, with Transactional, writes before every AbortEvery-th
	// committed transaction a transaction of decoys that it aborts: the
	// same keys and topics, ticks at DecoyPrice and notifications with
	// ids starting with DecoyIDPrefix. A read_committed reader sees none
	// of them; Summary.Aborted counts them. 0: none.
	AbortEvery int
	// TransactionalID of a transactional run. Default:
	// joiner-loadgen-<time>.
	TransactionalID string
}

// Summary is what a run produced.
type Summary struct {
	Ticks         int
	Notifications int
	Malformed     int
	// Retried counts the records written again after a failed write
	// (a record retried twice counts twice).
	Retried int
	Elapsed time.Duration
	// LastPrice is the last price produced for each symbol.
	LastPrice map[string]float64
	// NotificationIDs are the ids of the well-formed notifications (none
	// with Config.DropIDs).
	NotificationIDs []string
	// Transactions is the number of committed transactions of a
	// transactional run; AbortedTicks and AbortedNotifications count the
	// decoys of its aborted ones (Config.AbortEvery), which are not in
	// the counts above.
	Transactions         int
	AbortedTicks         int
	AbortedNotifications int
}

// Records is the number of records produced.
func (s Summary) Records() int { return s.Ticks + s.Notifications + s.Malformed }

// Symbols returns n deterministic symbol names.
func Symbols(n int) []string {
	base := []string{"BBCA", "BBRI", "TLKM", "ASII", "BMRI", "UNVR", "GOTO", "ANTM", "ICBP", "ADRO"}
	out := make([]string, n)
	for i := range out {
		if i < len(base) {
			out[i] = base[i]
		} else {
			out[i] = "S" + strconv.Itoa(i)
		}
	}
	return out
}

// The defaults of Config's zero fields, applied by withDefaults (and
// DefaultRetryTimeout).
const (
	DefaultSymbols = 10
	DefaultSeed    = 1
)

// Validate reports the first problem of c: a negative count, rate or
// duration, AbortEvery without Transactional, or no brokers to write to.
// Zero values take their defaults (withDefaults).
func (c Config) Validate() error {
	switch {
	case c.Symbols < 0, c.TicksPerSymbol < 0, c.NotificationsPerSymbol < 0, c.Malformed < 0:
		return errors.New("loadgen: counts must not be negative")
	case c.Rate < 0 || math.IsNaN(c.Rate):
		return errors.New("loadgen: rate must be 0 (as fast as possible) or positive")
	case c.OutOfOrder < 0 || c.NotificationBytes < 0:
		return errors.New("loadgen: OutOfOrder and NotificationBytes must not be negative")
	case c.AbortEvery < 0 || c.AbortEvery > 0 && !c.Transactional:
		return errors.New("loadgen: AbortEvery must not be negative, and needs Transactional")
	case c.Transactional && len(c.Brokers) == 0:
		return errors.New("loadgen: a transactional run needs Brokers")
	case !c.Transactional && c.Writer == nil && len(c.Brokers) == 0:
		return errors.New("loadgen: no brokers given")
	}
	return nil
}

// withDefaults returns c with every zero field set to the default its doc
// comment names: the one place loadgen's defaults are applied.
func (c Config) withDefaults() Config {
	if c.MarketTopic == "" {
		c.MarketTopic = record.DefaultMarketTopic
	}
	if c.NotificationsTopic == "" {
		c.NotificationsTopic = record.DefaultNotificationsTopic
	}
	if c.Symbols == 0 {
		c.Symbols = DefaultSymbols
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.RetryTimeout <= 0 {
		c.RetryTimeout = DefaultRetryTimeout
	}
	return c
}

// Run produces the ticks, then the notifications, then the malformed
// records.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	cfg = cfg.withDefaults()
	var txn *txnWriter
	if cfg.Transactional {
		var err error
		if txn, err = newTxnWriter(ctx, cfg); err != nil {
			return Summary{}, err
		}
		defer txn.p.Close()
	}
	w := cfg.Writer
	if txn == nil && w == nil { // a transactional run writes through txn
		w = NewWriter(cfg.Brokers)
		if cfg.Transport != nil {
			w.Transport = cfg.Transport
		}
		defer w.Close()
	}
	syms := Symbols(cfg.Symbols)
	total := cfg.Symbols*(cfg.TicksPerSymbol+cfg.NotificationsPerSymbol) + cfg.Malformed
	p := &producer{w: w, txn: txn, rate: cfg.Rate, total: total, out: cfg.Progress, start: time.Now(), lastReport: time.Now(), retryTimeout: cfg.RetryTimeout}
	sum := Summary{LastPrice: make(map[string]float64, len(syms))}
	if err := produceTicks(ctx, cfg, p, syms, &sum); err != nil {
		return sum, err
	}
	// Every tick is acknowledged before the first notification.
	if err := p.flush(ctx); err != nil {
		return sum, err
	}
	if err := produceNotifications(ctx, cfg, p, syms, &sum); err != nil {
		return sum, err
	}
	if err := p.flush(ctx); err != nil {
		return sum, err
	}
	sum.Elapsed = time.Since(p.start)
	rate := float64(sum.Records()) / max(sum.Elapsed.Seconds(), 1e-9)
	sum.Retried = p.retried
	fmt.Fprintf(cfg.Progress, "loadgen: done: %d ticks, %d notifications, %d malformed in %s (%.0f records/s); %d records retried\n",
		sum.Ticks, sum.Notifications, sum.Malformed, sum.Elapsed.Round(time.Millisecond), rate, sum.Retried)
	if txn != nil {
		sum.Transactions, sum.AbortedTicks, sum.AbortedNotifications = txn.txns, txn.aborted.Ticks, txn.aborted.Notifications
		fmt.Fprintf(cfg.Progress, "loadgen: %d transactions committed; aborted: %d ticks, %d notifications\n",
			sum.Transactions, sum.AbortedTicks, sum.AbortedNotifications)
	}
	return sum, nil
}

// produceTicks writes cfg.TicksPerSymbol rounds of one tick per symbol,
// counting them in sum.
func produceTicks(ctx context.Context, cfg Config, p *producer, syms []string, sum *Summary) error {
	prices := newWalk(cfg.Seed, len(syms))
	late := rand.New(rand.NewPCG(cfg.Seed, 0x1a7e))
	for k := 0; k < cfg.TicksPerSymbol; k++ {
		for i, s := range syms {
			price := prices.tick(i)
			sum.LastPrice[s] = price
			v := cfg.Fields.AppendTick(nil, record.Tick{Symbol: s, Price: price})
			m := kafka.Message{Topic: cfg.MarketTopic, Key: []byte(s), Value: v}
			if cfg.OutOfOrder > 0 {
				m.Time = time.Now().Add(-time.Duration(late.Int64N(int64(cfg.OutOfOrder) + 1)))
			}
			if err := p.add(ctx, m); err != nil {
				return err
			}
			sum.Ticks++
		}
	}
	return nil
}

// produceNotifications writes cfg.NotificationsPerSymbol rounds of one
// notification per symbol, then cfg.Malformed malformed ones, counting
// them in sum.
func produceNotifications(ctx context.Context, cfg Config, p *producer, syms []string, sum *Summary) error {
	for k := 0; k < cfg.NotificationsPerSymbol; k++ {
		for i, s := range syms {
			n := NotificationOf(cfg.RunID, syms, i, k)
			v := NotificationValue(cfg, &n, sum.Notifications)
			m := kafka.Message{Topic: cfg.NotificationsTopic, Key: []byte(s), Value: v}
			if cfg.Headers {
				m.Headers = NotificationHeaders(sum.Notifications)
			}
			if err := p.add(ctx, m); err != nil {
				return err
			}
			sum.Notifications++
			if !cfg.DropIDs {
				sum.NotificationIDs = append(sum.NotificationIDs, n.ID)
			}
		}
	}
	bad := []string{`{"id":"bad","symbol":`, `{"id":"bad"}`, `{"id":"bad","symbol":42}`, `not json`}
	for k := 0; k < cfg.Malformed; k++ {
		s := syms[k%len(syms)]
		if err := p.add(ctx, kafka.Message{Topic: cfg.NotificationsTopic, Key: []byte(s), Value: []byte(bad[k%len(bad)])}); err != nil {
			return err
		}
		sum.Malformed++
	}
	return nil
}

// NotificationValue is the value Run writes for notification n, the
// seq-th of the run (from 0), with cfg's Fields, ExtraFields and
// NotificationBytes.
func NotificationValue(cfg Config, n *record.Notification, seq int) []byte {
	var v []byte
	if cfg.ExtraFields {
		v = ShapedNotification(nil, n, cfg.Fields, seq, "")
	} else {
		v = cfg.Fields.AppendNotification(nil, n)
	}
	return pad(v, cfg.NotificationBytes)
}

// pad inserts a "meta" member before the closing brace of the object v so
// that it has at least size bytes.
func pad(v []byte, size int) []byte {
	const head, tail = `,"meta":{"channel":"push","lang":"id","body":"`, `"}`
	end := bytes.LastIndexByte(v, '}')
	if size <= len(v) || end < 0 {
		return v
	}
	filler := max(0, size-len(v)-len(head)-len(tail))
	out := make([]byte, 0, len(v)+len(head)+filler+len(tail))
	out = append(append(out, v[:end]...), head...)
	for i := range filler {
		out = append(out, "lorem ipsum "[i%12])
	}
	return append(append(out, tail...), v[end:]...)
}

// NotificationOf is the k-th notification (from 0) Run produces for
// symbol i of syms, with cfg.RunID runID.
func NotificationOf(runID string, syms []string, i, k int) record.Notification {
	s := syms[i]
	return record.Notification{ID: fmt.Sprintf("n%s-%s-%d", runID, s, k), User: fmt.Sprintf("u%d", (i+k)%97), Symbol: s, Text: s + " moved"}
}

// LastPrices are the last prices Run produces for each of n symbols (in
// the order of Symbols(n)) with ticksPerSymbol ticks each and cfg.Seed
// seed (0: the default); nil when there are no ticks.
func LastPrices(n, ticksPerSymbol int, seed uint64) []float64 {
	if ticksPerSymbol <= 0 || n <= 0 {
		return nil
	}
	if seed == 0 {
		seed = 1
	}
	w := newWalk(seed, n)
	out := make([]float64, n)
	for range ticksPerSymbol {
		for i := range out {
			out[i] = w.tick(i)
		}
	}
	return out
}

// walk is the random walk of the symbols' prices: a start between 1000
// and 9999, then each tick moves by up to ±1%, rounded to cents.
type walk struct {
	rng   *rand.Rand
	price []float64
}

func newWalk(seed uint64, n int) *walk {
	w := &walk{rng: rand.New(rand.NewPCG(seed, 0x6a6f696e6572)), price: make([]float64, n)}
	for i := range w.price {
		w.price[i] = float64(1000 + w.rng.IntN(9000))
	}
	return w
}

// tick moves symbol i's price and returns it. Ticks must come in Run's
// order (every symbol once per round) for the same prices.
func (w *walk) tick(i int) float64 {
	w.price[i] = math.Round(w.price[i]*(1+(w.rng.Float64()-0.5)/50)*100) / 100
	return w.price[i]
}

// NewWriter returns a writer partitioning by murmur2, acknowledged by all
// in-sync replicas, and batching for throughput. Each message names its
// topic.
func NewWriter(brokers []string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Balancer:     &murmur2.Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    2000,
		BatchBytes:   4 << 20,
		BatchTimeout: 5 * time.Millisecond,
	}
}

// producer sends messages in batches, paced to a rate, reporting progress.
type producer struct {
	w          *kafka.Writer
	txn        *txnWriter // a transactional run's, instead of w
	rate       float64
	total      int
	out        io.Writer
	start      time.Time
	buf        []kafka.Message
	sent       int
	lastReport time.Time

	retryTimeout time.Duration
	retried      int
}

const chunk = 1000

func (p *producer) add(ctx context.Context, m kafka.Message) error {
	if m.Time.IsZero() {
		m.Time = time.Now()
	}
	p.buf = append(p.buf, m)
	size := chunk
	if p.rate > 0 {
		size = max(1, min(chunk, int(p.rate/20)))
	}
	if len(p.buf) >= size {
		return p.flush(ctx)
	}
	return nil
}

func (p *producer) flush(ctx context.Context) error {
	if len(p.buf) == 0 {
		return nil
	}
	write := p.write
	if p.txn != nil {
		write = p.writeTxn
	}
	if err := write(ctx, p.buf); err != nil {
		return fmt.Errorf("loadgen: writing %d records after %d sent (%d retried): %w", len(p.buf), p.sent, p.retried, err)
	}
	p.sent += len(p.buf)
	p.buf = p.buf[:0]
	if p.rate > 0 {
		// Pace: the sent records are due at sent/rate after the start.
		due := p.start.Add(time.Duration(float64(p.sent) / p.rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	if now := time.Now(); now.Sub(p.lastReport) >= time.Second {
		p.lastReport = now
		el := now.Sub(p.start).Seconds()
		rate := float64(p.sent) / el
		eta := "?"
		if rate > 0 {
			eta = time.Duration(float64(p.total-p.sent) / rate * float64(time.Second)).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(p.out, "loadgen: %d/%d records (%.1f%%), %.0f records/s, ETA %s\n",
			p.sent, p.total, 100*float64(p.sent)/float64(max(p.total, 1)), rate, eta)
	}
	return nil
}
