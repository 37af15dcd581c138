// Package oracle produces a workload of ticks and notifications with
// explicit timestamps and checks every alert joiner wrote for it against
// what the input says it must be: the price of the notification's symbol
// as of the notification's time (the tick with the greatest timestamp at
// or before it, ties to the later one), or a miss when there was none.
//
// The workload is produced in rounds. A round's ticks are written and
// acknowledged before its notifications, so a notification at time T is
// produced after every tick at or before T. Within a round, ticks and
// notifications interleave in time (a notification may be older than a
// tick written before it, and some notifications carry the exact timestamp
// of a tick of their symbol), and each partition receives its records in
// timestamp order. Some symbols get their first tick only halfway through,
// some never get one.
//
// It is test support for the embedded-broker tests and the real-broker
// suite; it imports the record format, the partitioner and demo's topic
// reader.
package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// Config shapes a workload. Zero values take the defaults shown.
type Config struct {
	// Seed makes the workload reproducible. Default: 1.
	Seed uint64
	// IDPrefix starts every notification id, so several workloads can share
	// topics. Default: "n".
	IDPrefix string
	// Symbols ticked from the first round, symbols whose first tick comes
	// halfway through, and symbols never ticked. Default: 40, 5, 5.
	Symbols, LateSymbols, NoTickSymbols int
	// Rounds, and per round the ticks and notifications. Default: 40, 10,
	// 30.
	Rounds, TicksPerRound, NotificationsPerRound int
	// RoundInterval is both the time a round spans in record timestamps
	// and its pace on the wall clock. Default: 50ms.
	RoundInterval time.Duration
	// Misrouted is the share of notifications written with librdkafka's
	// default partitioner (CRC32 of the key, kafka-go's CRC32Balancer)
	// instead of murmur2: about 1-1/partitions of them land outside their
	// symbol's partition. Default: 0.
	Misrouted float64
}

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.IDPrefix == "" {
		c.IDPrefix = "n"
	}
	def(&c.Symbols, 40)
	def(&c.LateSymbols, 5)
	def(&c.NoTickSymbols, 5)
	def(&c.Rounds, 40)
	def(&c.TicksPerRound, 10)
	def(&c.NotificationsPerRound, 30)
	if c.RoundInterval <= 0 {
		c.RoundInterval = 50 * time.Millisecond
	}
}

// Topics names the topics of a run; the dead-letter topic is not used.
type Topics = record.Topics

// tick is one produced tick: seq orders the ticks of a symbol as their
// offsets do (one partition, written in order).
type tick struct {
	ts    int64
	seq   int
	price float64
}

type notification struct {
	symbol string
	ts     int64
}

// Workload is what was produced, the oracle's input.
type Workload struct {
	mu            sync.Mutex
	ticks         map[string][]tick
	notifications map[string]notification
	ids           []string
	exactTs       int // notifications with the timestamp of a tick of their symbol
	misrouted     []string
}

// Produced returns the ids of the notifications produced so far, in order.
func (w *Workload) Produced() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ids)
}

// Counts returns how many notifications and ticks were produced, and how
// many notifications carry the exact timestamp of a tick of their symbol.
func (w *Workload) Counts() (notifications, ticks, exactTs int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ts := range w.ticks {
		ticks += len(ts)
	}
	return len(w.ids), ticks, w.exactTs
}

// Expected is the price a notification must be joined with: ok is false
// when its symbol had no price at its time (the alert must say miss).
func (w *Workload) Expected(id string) (price float64, tsMs int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.notifications[id]
	var best tick
	found := false
	for _, t := range w.ticks[n.symbol] {
		if t.ts <= n.ts && (!found || t.ts >= best.ts) {
			best, found = t, true
		}
	}
	return best.price, best.ts, found
}

// Producer writes a workload. Build it with NewProducer; Run is single use.
type Producer struct {
	cfg    Config
	topics Topics
	w      *kafka.Writer
	wl     *Workload
	// done counts the rounds produced.
	mu   sync.Mutex
	done int
}

// NewProducer returns a producer of cfg's workload to the brokers at
// addrs, using transport (nil: kafka-go's default).
func NewProducer(addrs []string, transport kafka.RoundTripper, topics Topics, cfg Config) *Producer {
	cfg.defaults()
	return &Producer{
		cfg:    cfg,
		topics: topics,
		w: &kafka.Writer{
			Addr:         kafka.TCP(addrs...),
			Transport:    transport,
			Balancer:     misrouter{},
			RequiredAcks: kafka.RequireAll,
			BatchSize:    10000,
			BatchBytes:   16 << 20,
			BatchTimeout: time.Millisecond,
			MaxAttempts:  20,
		},
		wl: &Workload{ticks: map[string][]tick{}, notifications: map[string]notification{}},
	}
}

// misrouteHeader marks the notifications misrouter partitions with CRC32.
const misrouteHeader = "oracle-partitioner"

// misrouter partitions with murmur2, or with CRC32 (librdkafka's default)
// the messages that carry misrouteHeader.
type misrouter struct{}

func (misrouter) Balance(msg kafka.Message, partitions ...int) int {
	for _, h := range msg.Headers {
		if h.Key == misrouteHeader {
			return kafka.CRC32Balancer{}.Balance(msg, partitions...)
		}
	}
	return (&murmur2.Balancer{}).Balance(msg, partitions...)
}

// MisroutedTo reports whether a notification of symbol written with CRC32
// lands outside its murmur2 partition among n.
func MisroutedTo(symbol string, n int) bool {
	m := kafka.Message{Key: []byte(symbol)}
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return kafka.CRC32Balancer{}.Balance(m, ps...) != (&murmur2.Balancer{}).Balance(m, ps...)
}

// Symbol returns the symbol of notification id.
func (w *Workload) Symbol(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notifications[id].symbol
}

// Misrouted returns the ids of the notifications written with CRC32.
func (w *Workload) Misrouted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.misrouted)
}

// Workload is the producer's workload, growing while Run runs.
func (p *Producer) Workload() *Workload { return p.wl }

// Rounds returns the number of rounds produced so far.
func (p *Producer) Rounds() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Run produces every round, paced by RoundInterval, and closes the writer.
func (p *Producer) Run(ctx context.Context) error {
	defer p.w.Close()
	c := p.cfg
	rng := rand.New(rand.NewPCG(c.Seed, 0x04ac1e))
	name := func(kind string, i int) string { return fmt.Sprintf("%s%s%03d", strings.ToUpper(c.IDPrefix), kind, i) }
	var early, late, never []string
	for i := range c.Symbols {
		early = append(early, name("S", i))
	}
	for i := range c.LateSymbols {
		late = append(late, name("L", i))
	}
	for i := range c.NoTickSymbols {
		never = append(never, name("Z", i))
	}
	all := slices.Concat(early, late, never)
	step := c.RoundInterval.Milliseconds()
	if step < 2 {
		step = 2
	}
	start := time.Now().UnixMilli()
	seq, nid := 0, 0
	for r := range c.Rounds {
		base := start + int64(r)*step
		tickable := early
		if r >= c.Rounds/2 {
			tickable = slices.Concat(early, late)
		}
		// Ticks of the round, in timestamp order.
		type rec struct {
			symbol string
			ts     int64
		}
		ticks := make([]rec, c.TicksPerRound)
		for i := range ticks {
			ticks[i] = rec{tickable[rng.IntN(len(tickable))], base + rng.Int64N(step)}
		}
		sort.SliceStable(ticks, func(i, j int) bool { return ticks[i].ts < ticks[j].ts })
		msgs := make([]kafka.Message, 0, len(ticks))
		var newTicks []struct {
			sym string
			t   tick
		}
		for _, t := range ticks {
			seq++
			price := float64(seq) + 0.25
			msgs = append(msgs, kafka.Message{
				Topic: p.topics.Market, Key: []byte(t.symbol), Time: time.UnixMilli(t.ts),
				Value: record.AppendTick(nil, record.Tick{Symbol: t.symbol, Price: price}),
			})
			newTicks = append(newTicks, struct {
				sym string
				t   tick
			}{t.symbol, tick{t.ts, seq, price}})
		}
		// Notifications of the round, in timestamp order; every third
		// takes the symbol and exact timestamp of one of the round's ticks.
		notes := make([]rec, c.NotificationsPerRound)
		exact := 0
		for i := range notes {
			if i%3 == 0 && len(ticks) > 0 {
				t := ticks[rng.IntN(len(ticks))]
				notes[i] = rec{t.symbol, t.ts}
				exact++
				continue
			}
			notes[i] = rec{all[rng.IntN(len(all))], base + rng.Int64N(step)}
		}
		sort.SliceStable(notes, func(i, j int) bool { return notes[i].ts < notes[j].ts })
		nmsgs := make([]kafka.Message, 0, len(notes))
		var ids, crc []string
		for _, n := range notes {
			nid++
			id := fmt.Sprintf("%s-%d", c.IDPrefix, nid)
			ids = append(ids, id)
			m := kafka.Message{
				Topic: p.topics.Notifications, Key: []byte(n.symbol), Time: time.UnixMilli(n.ts),
				Value: record.AppendNotification(nil, &record.Notification{ID: id, User: fmt.Sprintf("u-%d", nid%97), Symbol: n.symbol, Text: fmt.Sprintf("round %d", r)}),
			}
			if c.Misrouted > 0 && rng.Float64() < c.Misrouted {
				m.Headers = []kafka.Header{{Key: misrouteHeader, Value: []byte("crc32")}}
				crc = append(crc, id)
			}
			nmsgs = append(nmsgs, m)
		}

		if err := p.w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("oracle: round %d: write ticks: %w", r, err)
		}
		p.wl.mu.Lock()
		for _, t := range newTicks {
			p.wl.ticks[t.sym] = append(p.wl.ticks[t.sym], t.t)
		}
		p.wl.mu.Unlock()
		if err := p.w.WriteMessages(ctx, nmsgs...); err != nil {
			return fmt.Errorf("oracle: round %d: write notifications: %w", r, err)
		}
		p.wl.mu.Lock()
		for i, id := range ids {
			p.wl.notifications[id] = notification{notes[i].symbol, notes[i].ts}
		}
		p.wl.ids = append(p.wl.ids, ids...)
		p.wl.misrouted = append(p.wl.misrouted, crc...)
		p.wl.exactTs += exact
		p.wl.mu.Unlock()
		p.mu.Lock()
		p.done++
		p.mu.Unlock()
		if wait := time.Until(time.UnixMilli(base + step)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// Report is the oracle's verdict on the alerts of a workload.
type Report struct {
	Notifications int
	Alerts        int // alert records of this workload read back
	Lost          int // notifications without an alert
	Wrong         int // alerts whose price or result is not the as-of one
	Duplicates    int // alert records beyond the first per notification
	// DuplicatesDiffering are duplicates that differ from the first copy in
	// a field other than the worker.
	DuplicatesDiffering int
	Results             map[record.Result]int // of first copies
	// Examples of wrong or differing alerts, a few at most.
	Examples []string
}

func (r Report) String() string {
	return fmt.Sprintf("notifications=%d alerts=%d lost=%d wrong=%d duplicates=%d duplicates_differing=%d results=%v",
		r.Notifications, r.Alerts, r.Lost, r.Wrong, r.Duplicates, r.DuplicatesDiffering, r.Results)
}

// Check compares alerts (alert record values, in the order read) with the
// workload's notifications ids.
func (w *Workload) Check(ids []string, alerts [][]byte) Report {
	rep := Report{Notifications: len(ids), Results: map[record.Result]int{}}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	first := map[string]record.Alert{}
	example := func(format string, args ...any) {
		if len(rep.Examples) < 5 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
	}
	for _, v := range alerts {
		var a record.Alert
		if err := json.Unmarshal(v, &a); err != nil || !want[a.ID] {
			continue
		}
		rep.Alerts++
		if f, dup := first[a.ID]; dup {
			rep.Duplicates++
			g := a
			g.Worker = f.Worker
			if !sameAlert(f, g) {
				rep.DuplicatesDiffering++
				example("duplicate of %s differs: first %s, then %s", a.ID, alertString(f), alertString(a))
			}
			continue
		}
		first[a.ID] = a
		rep.Results[a.Result]++
		price, ts, ok := w.Expected(a.ID)
		w.mu.Lock()
		n := w.notifications[a.ID]
		w.mu.Unlock()
		switch {
		case a.Symbol != n.symbol || a.NotificationTsMs != n.ts:
			rep.Wrong++
			example("%s: alert for %s at %d, notification was %s at %d", a.ID, a.Symbol, a.NotificationTsMs, n.symbol, n.ts)
		case !ok && a.Result != record.ResultMiss:
			rep.Wrong++
			example("%s (%s at %d): %s, want miss (no tick before)", a.ID, n.symbol, n.ts, alertString(a))
		case ok && (a.Result != record.ResultLocal && a.Result != record.ResultRemote || a.Price == nil || *a.Price != price || a.PriceTsMs != ts):
			rep.Wrong++
			example("%s (%s at %d): %s, want price %v from %d", a.ID, n.symbol, n.ts, alertString(a), price, ts)
		}
	}
	for _, id := range ids {
		if _, ok := first[id]; !ok {
			rep.Lost++
			if rep.Lost <= 3 {
				example("%s: no alert", id)
			}
		}
	}
	return rep
}

func sameAlert(a, b record.Alert) bool {
	pa, pb := a.Price, b.Price
	a.Price, b.Price = nil, nil
	if a != b || (pa == nil) != (pb == nil) {
		return false
	}
	return pa == nil || *pa == *pb
}

func alertString(a record.Alert) string {
	p := "none"
	if a.Price != nil {
		p = fmt.Sprint(*a.Price)
	}
	return fmt.Sprintf("{result %s price %s from %d by %s}", a.Result, p, a.PriceTsMs, a.Worker)
}

// AlertReader reads a topic from its start, every partition, accumulating
// the record values (demo's TopicReader does the reading).
type AlertReader struct {
	r      *demo.TopicReader
	values [][]byte
}

// NewAlertReader reads topic, which has partitions partitions, with client.
func NewAlertReader(client *kafka.Client, topic string, partitions int) *AlertReader {
	return &AlertReader{r: demo.NewTopicReader(client, topic, partitions)}
}

// Poll reads what is new in every partition, without waiting for more.
func (r *AlertReader) Poll(ctx context.Context) error {
	for {
		n, err := r.r.Poll(ctx, func(_ kafka.Record, v []byte) { r.values = append(r.values, v) })
		if err != nil || n == 0 {
			return err
		}
	}
}

// Values returns the values read so far.
func (r *AlertReader) Values() [][]byte { return r.values }

// WaitComplete polls until every id in ids has an alert, or timeout, and
// returns the oracle's report either way.
func (w *Workload) WaitComplete(ctx context.Context, r *AlertReader, ids []string, timeout time.Duration) (Report, error) {
	deadline := time.Now().Add(timeout)
	for {
		if err := r.Poll(ctx); err != nil {
			return Report{}, err
		}
		rep := w.Check(ids, r.Values())
		if rep.Lost == 0 || time.Now().After(deadline) {
			return rep, nil
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
