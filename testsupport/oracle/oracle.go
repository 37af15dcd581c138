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
	"bytes"
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
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
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

	// Fields names the symbol and price members of what is produced (and
	// read back). Default: symbol, price.
	Fields record.Fields
	// Shapes writes the notifications in loadgen's shapes in turn
	// (loadgen.ShapedNotification: members of their own, nested values,
	// long integers, escapes, members named like the join's), every
	// seventh without an id; each has a "ref" member with its id, which
	// the checker finds it by. Default: {"id","user","symbol","text"}.
	Shapes bool
	// Headers puts loadgen.NotificationHeaders on every notification (its
	// traceparent unique). The checker compares every alert's headers with
	// its notification's whenever the reader kept them.
	Headers bool
	// OutOfOrder holds about a third of the ticks back by a random delay
	// up to OutOfOrder: such a tick is written after the ticks (and the
	// notifications) up to that much newer than it, as producers with
	// retries write. Default: 0, every tick of a round is written before
	// its notifications.
	OutOfOrder time.Duration
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
	acked int64 // when Kafka acknowledged it, by the clock (Unix ms)
}

type notification struct {
	symbol  string
	ts      int64
	value   []byte
	headers []kafka.Header
}

// Workload is what was produced, the oracle's input.
type Workload struct {
	fields        record.Fields // of the notifications
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

// AckedAfter reports whether a tick of notification id's symbol at or
// before its time was acknowledged by Kafka more than grace after that
// time by the clock: then a join after the market was confirmed at its
// end the grace after the notification could not see it (the producer
// fell behind its schedule), and the grace guarantees nothing.
func (w *Workload) AckedAfter(id string, grace time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.notifications[id]
	for _, t := range w.ticks[n.symbol] {
		if t.ts <= n.ts && t.acked > n.ts+grace.Milliseconds() {
			return true
		}
	}
	return false
}

// MaxTickDelay is the longest a tick was acknowledged after its
// timestamp, by the clock.
func (w *Workload) MaxTickDelay() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d int64
	for _, ts := range w.ticks {
		for _, t := range ts {
			d = max(d, t.acked-t.ts)
		}
	}
	return time.Duration(d) * time.Millisecond
}

// NewWorkload returns an empty workload, for a test that writes the
// records itself and records each with AddTick and AddNotification.
func NewWorkload(fields record.Fields) *Workload {
	return &Workload{fields: fields, ticks: map[string][]tick{}, notifications: map[string]notification{}}
}

// AddTick records a tick of symbol that Kafka acknowledged, after the
// ticks of symbol acknowledged before it (their order in its partition).
func (w *Workload) AddTick(symbol string, tsMs int64, price float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ticks[symbol] = append(w.ticks[symbol], tick{ts: tsMs, seq: len(w.ticks[symbol]), price: price, acked: time.Now().UnixMilli()})
}

// AddNotification records notification id of symbol, written at tsMs
// with value.
func (w *Workload) AddNotification(id, symbol string, tsMs int64, value []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notifications[id] = notification{symbol: symbol, ts: tsMs, value: value}
	w.ids = append(w.ids, id)
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
		wl: &Workload{fields: cfg.Fields, ticks: map[string][]tick{}, notifications: map[string]notification{}},
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

// heldTick is a tick of Run held back to be written out of order.
type heldTick struct {
	symbol string
	t      tick
	due    int64 // written in the round whose span holds due
}

// stamped is a symbol and a timestamp of a round: a tick's or a
// notification's.
type stamped struct {
	symbol string
	ts     int64
}

// run is the state of one Producer.Run: the symbols, the random source
// and the counters every round continues, and the ticks held back.
type run struct {
	p                  *Producer
	c                  Config
	rng                *rand.Rand
	early, late, all   []string
	step               int64
	seq, nid           int
	held               []heldTick
	exact              int // notifications at a tick's exact time, this round
	roundIDs, roundCRC []string
}

// Run produces every round, paced by RoundInterval, and closes the writer.
func (p *Producer) Run(ctx context.Context) error {
	defer p.w.Close()
	c := p.cfg
	rn := &run{p: p, c: c, rng: rand.New(rand.NewPCG(c.Seed, 0x04ac1e)), step: max(c.RoundInterval.Milliseconds(), 2)}
	name := func(kind string, i int) string { return fmt.Sprintf("%s%s%03d", strings.ToUpper(c.IDPrefix), kind, i) }
	for i := range c.Symbols {
		rn.early = append(rn.early, name("S", i))
	}
	for i := range c.LateSymbols {
		rn.late = append(rn.late, name("L", i))
	}
	var never []string
	for i := range c.NoTickSymbols {
		never = append(never, name("Z", i))
	}
	rn.all = slices.Concat(rn.early, rn.late, never)
	start := time.Now().UnixMilli()
	last := start - rn.step // the previous round's base
	for r := range c.Rounds {
		base := start + int64(r)*rn.step
		if c.OutOfOrder > 0 {
			// The timestamps follow the clock when the writes fall behind
			// the schedule, so that a held tick is written about its delay
			// after its time, not later.
			base = max(last+rn.step, time.Now().UnixMilli())
		}
		last = base
		if err := rn.round(ctx, r, base); err != nil {
			return err
		}
		if err := pace(ctx, base+rn.step); err != nil {
			return err
		}
	}
	// The ticks still held, each in the span it is due in.
	for base := last + rn.step; len(rn.held) > 0; base += rn.step {
		if due := rn.dueBy(base + rn.step); len(due) > 0 {
			if err := p.w.WriteMessages(ctx, rn.tickMsgs(due)...); err != nil {
				return fmt.Errorf("oracle: write held ticks: %w", err)
			}
			rn.written(due)
		}
		if err := pace(ctx, base+rn.step); err != nil {
			return err
		}
	}
	return nil
}

// round writes round r, whose timestamps are in [base, base+step): its
// ticks (with the held ones due in its span), then its notifications, and
// adds them to the workload.
func (rn *run) round(ctx context.Context, r int, base int64) error {
	ticks, newTicks := rn.ticks(r, base)
	notes, nmsgs := rn.notifications(r, base, ticks)
	if msgs := rn.tickMsgs(newTicks); len(msgs) > 0 {
		if err := rn.p.w.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("oracle: round %d: write ticks: %w", r, err)
		}
	}
	rn.written(newTicks)
	if err := rn.p.w.WriteMessages(ctx, nmsgs...); err != nil {
		return fmt.Errorf("oracle: round %d: write notifications: %w", r, err)
	}
	wl := rn.p.wl
	wl.mu.Lock()
	for i, id := range rn.roundIDs {
		wl.notifications[id] = notification{notes[i].symbol, notes[i].ts, nmsgs[i].Value, nmsgs[i].Headers}
	}
	wl.ids = append(wl.ids, rn.roundIDs...)
	wl.misrouted = append(wl.misrouted, rn.roundCRC...)
	wl.exactTs += rn.exact
	wl.mu.Unlock()
	rn.p.mu.Lock()
	rn.p.done++
	rn.p.mu.Unlock()
	return nil
}

// ticks draws round r's ticks, in timestamp order, and returns them with
// the ones to write now: the held ticks due in this round's span first
// (each written after the ticks older than the round, at most OutOfOrder
// newer), then the round's that are not held back.
func (rn *run) ticks(r int, base int64) ([]stamped, []heldTick) {
	c := rn.c
	tickable := rn.early
	if r >= c.Rounds/2 {
		tickable = slices.Concat(rn.early, rn.late)
	}
	ticks := make([]stamped, c.TicksPerRound)
	for i := range ticks {
		ticks[i] = stamped{tickable[rn.rng.IntN(len(tickable))], base + rn.rng.Int64N(rn.step)}
	}
	sort.SliceStable(ticks, func(i, j int) bool { return ticks[i].ts < ticks[j].ts })
	var newTicks []heldTick
	for _, t := range ticks {
		rn.seq++
		h := heldTick{t.symbol, tick{ts: t.ts, seq: rn.seq, price: float64(rn.seq) + 0.25}, t.ts}
		if c.OutOfOrder > 0 && rn.rng.IntN(3) == 0 {
			h.due = t.ts + 1 + rn.rng.Int64N(c.OutOfOrder.Milliseconds())
			rn.held = append(rn.held, h)
			continue
		}
		newTicks = append(newTicks, h)
	}
	return ticks, append(rn.dueBy(base+rn.step), newTicks...)
}

// notifications draws round r's notifications, in timestamp order (every
// third takes the symbol and exact timestamp of one of the round's
// ticks), and their messages; it sets rn.roundIDs, rn.roundCRC (the ones
// misrouted) and rn.exact.
func (rn *run) notifications(r int, base int64, ticks []stamped) ([]stamped, []kafka.Message) {
	c := rn.c
	notes := make([]stamped, c.NotificationsPerRound)
	rn.exact = 0
	for i := range notes {
		if i%3 == 0 && len(ticks) > 0 {
			t := ticks[rn.rng.IntN(len(ticks))]
			notes[i] = stamped{t.symbol, t.ts}
			rn.exact++
			continue
		}
		notes[i] = stamped{rn.all[rn.rng.IntN(len(rn.all))], base + rn.rng.Int64N(rn.step)}
	}
	sort.SliceStable(notes, func(i, j int) bool { return notes[i].ts < notes[j].ts })
	nmsgs := make([]kafka.Message, 0, len(notes))
	rn.roundIDs, rn.roundCRC = nil, nil
	for _, n := range notes {
		rn.nid++
		nid := rn.nid
		id := fmt.Sprintf("%s-%d", c.IDPrefix, nid)
		rn.roundIDs = append(rn.roundIDs, id)
		note := record.Notification{ID: id, User: fmt.Sprintf("u-%d", nid%97), Symbol: n.symbol, Text: fmt.Sprintf("round %d", r)}
		m := kafka.Message{Topic: rn.p.topics.Notifications, Key: []byte(n.symbol), Time: time.UnixMilli(n.ts)}
		if c.Shapes {
			if nid%7 == 3 {
				note.ID = ""
			}
			m.Value = loadgen.ShapedNotification(nil, &note, c.Fields, nid, id)
		} else {
			m.Value = c.Fields.AppendNotification(nil, &note)
		}
		if c.Headers {
			m.Headers = loadgen.NotificationHeaders(nid)
		}
		if c.Misrouted > 0 && rn.rng.Float64() < c.Misrouted {
			m.Headers = append(m.Headers, kafka.Header{Key: misrouteHeader, Value: []byte("crc32")})
			rn.roundCRC = append(rn.roundCRC, id)
		}
		nmsgs = append(nmsgs, m)
	}
	return notes, nmsgs
}

// written records the ticks written to the workload, in their order.
func (rn *run) written(ticks []heldTick) {
	now := time.Now().UnixMilli()
	wl := rn.p.wl
	wl.mu.Lock()
	for _, t := range ticks {
		t.t.acked = now
		wl.ticks[t.symbol] = append(wl.ticks[t.symbol], t.t)
	}
	wl.mu.Unlock()
}

func (rn *run) tickMsgs(ticks []heldTick) []kafka.Message {
	msgs := make([]kafka.Message, 0, len(ticks))
	for _, t := range ticks {
		msgs = append(msgs, kafka.Message{Topic: rn.p.topics.Market, Key: []byte(t.symbol), Time: time.UnixMilli(t.t.ts),
			Value: rn.c.Fields.AppendTick(nil, record.Tick{Symbol: t.symbol, Price: t.t.price})})
	}
	return msgs
}

// dueBy takes the held ticks due before end, in the order held.
func (rn *run) dueBy(end int64) []heldTick {
	var out, keep []heldTick
	for _, t := range rn.held {
		if t.due < end {
			out = append(out, t)
		} else {
			keep = append(keep, t)
		}
	}
	rn.held = keep
	return out
}

// pace waits until the wall clock reaches until (Unix ms), or ctx ends.
func pace(ctx context.Context, until int64) error {
	if wait := time.Until(time.UnixMilli(until)); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
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
	// Mismatched are alerts whose members are not their notification's
	// object followed by the join's (renamed as the README's conflict rule
	// says), or whose headers (when read) are not their notification's.
	Mismatched int
	Duplicates int // alert records beyond the first per notification
	// DuplicatesDiffering are duplicates that differ from the first copy in
	// a field other than the worker.
	DuplicatesDiffering int
	Results             map[record.Result]int // of first copies
	// WrongIDs are the notifications of the wrong alerts.
	WrongIDs []string
	// Examples of wrong or differing alerts, a few at most.
	Examples []string
	// CompletedAt is when WaitComplete read the last missing alert (zero
	// if it did not: some are lost).
	CompletedAt time.Time
}

func (r Report) String() string {
	return fmt.Sprintf("notifications=%d alerts=%d lost=%d wrong=%d mismatched=%d duplicates=%d duplicates_differing=%d results=%v",
		r.Notifications, r.Alerts, r.Lost, r.Wrong, r.Mismatched, r.Duplicates, r.DuplicatesDiffering, r.Results)
}

// Check compares alerts (alert record values, in the order read) with the
// workload's notifications ids, without their headers.
func (w *Workload) Check(ids []string, alerts [][]byte) Report {
	return w.CheckWith(ids, alerts, nil)
}

// member is one member of a JSON object as encoding/json reads it: its
// unescaped name and its value's bytes as written.
type member struct {
	name string
	raw  string
}

// members decodes the top-level object of b with encoding/json into its
// members, in order.
func members(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	var out []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{k.(string), string(raw)})
	}
	_, err := dec.Token()
	return out, err
}

// joinMembers are the names of the members the join adds.
var joinMembers = []string{"notification_ts_ms", "price", "price_ts_ms", "result", "worker"}

// renamed is the notification's members as its alert must carry them:
// one named like a join member gets "notification_" before its name
// until no member of the notification has it.
func renamed(ms []member) []member {
	names := map[string]bool{}
	for _, m := range ms {
		names[m.name] = true
	}
	out := slices.Clone(ms)
	for i := range out {
		if slices.Contains(joinMembers, out[i].name) {
			for names[out[i].name] || slices.Contains(joinMembers, out[i].name) {
				out[i].name = "notification_" + out[i].name
			}
		}
	}
	return out
}

// alertOf splits an alert's members into its notification's (every
// member before the join's) and the join's, decoded into a: its result,
// price, times and worker, with id and the symbol (the member named
// symbolField).
func alertOf(ms []member, symbolField string) (a record.Alert, notified []member, err error) {
	k := len(ms)
	for k > 0 && slices.Contains(joinMembers, ms[k-1].name) {
		k--
	}
	var names []string
	for _, m := range ms[k:] {
		names = append(names, m.name)
		var dst any
		switch m.name {
		case "notification_ts_ms":
			dst = &a.NotificationTsMs
		case "price":
			dst = &a.Price
		case "price_ts_ms":
			dst = &a.PriceTsMs
		case "result":
			dst = &a.Result
		case "worker":
			dst = &a.Worker
		}
		if err := json.Unmarshal([]byte(m.raw), dst); err != nil {
			return a, nil, fmt.Errorf("member %s: %w", m.name, err)
		}
	}
	want := []string{"notification_ts_ms", "price", "price_ts_ms", "result", "worker"}
	if a.Price == nil {
		want = []string{"notification_ts_ms", "result", "worker"}
	}
	if !slices.Equal(names, want) {
		return a, nil, fmt.Errorf("the join's members are %q, want %q", names, want)
	}
	for _, m := range ms[:k] {
		var str string
		switch {
		case m.name == "ref" || (m.name == "id" && a.ID == ""):
			if json.Unmarshal([]byte(m.raw), &str) == nil {
				a.ID = str
			}
		case m.name == symbolField:
			if json.Unmarshal([]byte(m.raw), &str) == nil {
				a.Symbol = str
			}
		}
	}
	return a, ms[:k], nil
}

// CheckWith is Check with the headers of each alert (headers[i] those of
// alerts[i]; nil: not read, not checked).
func (w *Workload) CheckWith(ids []string, alerts [][]byte, headers [][]kafka.Header) Report {
	rep := Report{Notifications: len(ids), Results: map[record.Result]int{}}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	symbolField := w.fields.WithDefaults().Symbol
	first := map[string]record.Alert{}
	example := func(format string, args ...any) {
		if len(rep.Examples) < 5 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
	}
	for i, v := range alerts {
		ms, err := members(v)
		if err != nil {
			continue
		}
		a, notified, err := alertOf(ms, symbolField)
		if !want[a.ID] {
			continue
		}
		rep.Alerts++
		w.mu.Lock()
		n := w.notifications[a.ID]
		w.mu.Unlock()
		// Member by member, and header by header.
		nms, nerr := members(n.value)
		switch {
		case err != nil:
			rep.Mismatched++
			example("%s: %v: %s", a.ID, err, v)
		case nerr != nil || !slices.Equal(notified, renamed(nms)):
			rep.Mismatched++
			example("%s: the alert %s does not carry its notification %s", a.ID, v, n.value)
		case headers != nil && !slices.EqualFunc(headers[i], n.headers, func(x, y kafka.Header) bool { return x.Key == y.Key && bytes.Equal(x.Value, y.Value) }):
			rep.Mismatched++
			example("%s: alert headers %v, want its notification's %v", a.ID, headers[i], n.headers)
		}
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
		wrong := rep.Wrong
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
		if rep.Wrong > wrong {
			rep.WrongIDs = append(rep.WrongIDs, a.ID)
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
	r       *demo.TopicReader
	client  *kafka.Client
	topic   string
	values  [][]byte
	headers [][]kafka.Header
	// Under ReadCommitted: franz-go's reader (values and headers are
	// its), and what joiner's own fetch read (own), for CrossCheck.
	indep    *kgo.Client
	indepErr error
	origins  []string
	own      [][]byte
}

// NewAlertReader reads topic, which has partitions partitions, with client.
func NewAlertReader(client *kafka.Client, topic string, partitions int) *AlertReader {
	return &AlertReader{r: demo.NewTopicReader(client, topic, partitions), client: client, topic: topic}
}

// Poll reads what is new in every partition, without waiting for more.
func (r *AlertReader) Poll(ctx context.Context) error {
	if r.indep != nil || r.indepErr != nil {
		return r.pollIndependent(ctx)
	}
	for {
		n, err := r.r.Poll(ctx, func(rec kafka.Record, v []byte) {
			r.values = append(r.values, v)
			r.headers = append(r.headers, rec.Headers)
		})
		if err != nil || n == 0 {
			return err
		}
	}
}

// Values returns the values read so far.
func (r *AlertReader) Values() [][]byte { return r.values }

// WaitComplete polls until every id in ids has an alert, or timeout, and
// returns the oracle's report either way. Between polls it only reads the
// ids of the alerts new since the last one; the whole check runs once, at
// the end, so that how soon it returns does not depend on how fast the
// oracle re-checks every alert on a loaded machine. Report.CompletedAt is
// when the poll that read the last missing alert returned.
func (w *Workload) WaitComplete(ctx context.Context, r *AlertReader, ids []string, timeout time.Duration) (Report, error) {
	deadline := time.Now().Add(timeout)
	missing := make(map[string]bool, len(ids))
	for _, id := range ids {
		missing[id] = true
	}
	symbolField := w.fields.WithDefaults().Symbol
	read := 0
	for {
		if err := r.Poll(ctx); err != nil {
			return Report{}, err
		}
		polled := time.Now()
		for _, v := range r.Values()[read:] {
			if id, ok := alertID(v, symbolField); ok {
				delete(missing, id)
			}
		}
		read = len(r.Values())
		if len(missing) == 0 || time.Now().After(deadline) {
			rep := w.CheckWith(ids, r.Values(), r.headers)
			if len(missing) == 0 {
				rep.CompletedAt = polled
			}
			return rep, nil
		}
		select {
		case <-ctx.Done():
			return w.CheckWith(ids, r.Values(), r.headers), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// alertID is the notification id of an alert, as CheckWith reads it.
func alertID(v []byte, symbolField string) (string, bool) {
	ms, err := members(v)
	if err != nil {
		return "", false
	}
	a, _, _ := alertOf(ms, symbolField)
	return a.ID, a.ID != ""
}
