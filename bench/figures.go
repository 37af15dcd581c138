package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// drainRound is one contestant draining the backlog once.
type drainRound struct {
	Contestant string
	Round      int
	N          int64
	// Start is when the processes were started, Ready when the contestant
	// could process (joiner: the first task restored and processing, from
	// its log;
	// passthrough and kstreams: their "ready" line, Kafka Streams at
	// RUNNING). First and Last are the append times of its first and last
	// output record.
	Start, Ready, First, Last time.Time
	CPU                       time.Duration
	MaxRSSKiB                 int64
}

// Rate is notifications per second from ready to the last output.
func (r drainRound) Rate() float64 { return float64(r.N) / r.Last.Sub(r.Ready).Seconds() }

func (r drainRound) CPUPerRecordMicros() float64 {
	return float64(r.CPU.Microseconds()) / float64(r.N)
}

// drain produces one backlog and lets every contestant drain it, in
// interleaved rounds (A, B, C, A, B, C, ...), each with a fresh group and
// output topic.
func (b *bench) drain(ctx context.Context, contestants []string) error {
	c := b.cfg
	market, notifications := b.prefix+"-market", b.prefix+"-notifications"
	for _, t := range []string{market, notifications} {
		if err := b.createTopic(ctx, t, c.partitions, false); err != nil {
			return err
		}
	}
	if err := b.createTopic(ctx, b.prefix+"-dead-letters", c.partitions, false); err != nil {
		return err
	}
	say("drain: producing the backlog with joiner loadgen: %d symbols × %d ticks and × %d notifications", c.symbols, c.ticks, c.notifications)
	if err := b.backlog(ctx, market, notifications, c.symbols, c.ticks, c.notifications, c.notificationBytes); err != nil {
		return err
	}
	n := int64(c.symbols * c.notifications)
	b.res.backlog = fmt.Sprintf("%d symbols × %d ticks (%d ticks) and %d notifications, %d partitions", c.symbols, c.ticks, c.symbols*c.ticks, n, c.partitions)
	if c.notificationBytes > 0 {
		b.res.backlog += fmt.Sprintf(", notifications padded to %d bytes", c.notificationBytes)
	}
	if slices.Contains(contestants, "passthrough-alertsize") {
		s := backlogAlertSize(c.symbols, c.ticks, c.notifications, c.notificationBytes, time.Now().UnixMilli())
		b.res.alertSize = &s
		say("drain: passthrough-alertsize pads every value with %d bytes: mean alert %.1f bytes, mean notification %.1f bytes", s.Pad, s.Alert, s.Notification)
	}
	// Warm-up rounds first, not counted: a broker started for the run
	// (its JIT) and a cold page cache made the first rounds up to twice
	// as slow as the last ones.
	for w := 1; w <= c.warmupRounds; w++ {
		for _, name := range contestants {
			r, err := b.drainOnce(ctx, name, -w, market, notifications, n)
			if err != nil {
				return fmt.Errorf("%s warm-up round %d: %w", name, w, err)
			}
			say("drain: %s warm-up round %d (not counted): %.0f/s from ready", name, w, r.Rate())
		}
	}
	for round := 1; round <= c.rounds; round++ {
		for _, name := range contestants {
			r, err := b.drainOnce(ctx, name, round, market, notifications, n)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", name, round, err)
			}
			say("drain: %s round %d: %d notifications, %.0f/s from ready, first output %s after ready, %s CPU (%.2f µs/notification), peak RSS %d MiB",
				name, round, r.N, r.Rate(), r.First.Sub(r.Ready).Round(time.Millisecond), r.CPU.Round(time.Millisecond), r.CPUPerRecordMicros(), r.MaxRSSKiB>>10)
			b.res.drain = append(b.res.drain, r)
		}
	}
	return nil
}

// backlog produces a backlog with joiner loadgen: symbols × ticks ticks
// and symbols × notes notifications, each padded to at least padBytes (0:
// none).
func (b *bench) backlog(ctx context.Context, market, notifications string, symbols, ticks, notes, padBytes int) error {
	out, err := exec.CommandContext(ctx, b.cfg.joiner, "loadgen", "--brokers", b.cfg.brokers, "--market-topic", market, "--notifications-topic", notifications,
		"--symbols", strconv.Itoa(symbols), "--ticks-per-symbol", strconv.Itoa(ticks), "--notifications-per-symbol", strconv.Itoa(notes),
		"--run-id", backlogRunID, "--notification-bytes", strconv.Itoa(padBytes)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("joiner loadgen: %w: %s", err, out)
	}
	return nil
}

func (b *bench) drainOnce(ctx context.Context, name string, round int, market, notifications string, n int64) (drainRound, error) {
	c := b.cfg
	id := fmt.Sprintf("%s-%s-%d", b.prefix, name, round)
	output := id + "-out"
	if err := b.createTopic(ctx, output, c.partitions, true); err != nil {
		return drainRound{}, err
	}
	defer b.deleteTopics(output)
	r := drainRound{Contestant: name, Round: round, Start: time.Now()}
	var ps []*proc
	var err error
	switch name {
	case "joiner-1w", "joiner-2w", "joiner-1w-eos":
		workers := 1
		if name == "joiner-2w" {
			workers = 2
		}
		ps, r.Ready, err = b.startJoiners(ctx, workers, id, market, notifications, output, contestantGuarantee(name))
	case "passthrough", "passthrough-alertsize":
		args := []string{c.passthrough, "--brokers", c.brokers, "--input", notifications, "--output", output}
		if name == "passthrough-alertsize" {
			if b.res.alertSize == nil {
				return r, fmt.Errorf("%s: the alert size of the backlog is not computed", name)
			}
			args = append(args, "--pad-bytes", strconv.Itoa(b.res.alertSize.Pad))
		}
		var p *proc
		p, err = start(id, filepath.Join(b.workDir, id+".log"), nil, args...)
		if err == nil {
			ps = []*proc{p}
			r.Ready, err = p.waitReady(ctx, 2*time.Minute)
		}
	case "kstreams", "kstreams-eos":
		// The sixth argument is Kafka Streams' processing.guarantee.
		g := "at_least_once"
		if name == "kstreams-eos" {
			g = "exactly_once_v2"
		}
		var p *proc
		p, err = start(id, filepath.Join(b.workDir, id+".log"), nil, c.java, "-jar", c.kstreamsJar, c.brokers, id, market, notifications, output, g)
		if err == nil {
			ps = []*proc{p}
			r.Ready, err = p.waitReady(ctx, 3*time.Minute)
		}
		defer b.deleteInternalTopics(context.WithoutCancel(ctx), id)
	default:
		return r, fmt.Errorf("unknown contestant %q (%s)", name, strings.Join(order, ", "))
	}
	if err != nil {
		stopAll(ps)
		return r, err
	}
	var profiled chan error
	if name == "joiner-1w" && round == 1 && c.profileSeconds > 0 {
		profiled = make(chan error, 1)
		go func() { profiled <- b.saveProfile(ctx, c.profileSeconds) }()
	}
	err = b.waitRecords(ctx, output, c.partitions, n, 10*time.Minute)
	if profiled != nil {
		if perr := <-profiled; perr != nil {
			say("drain: CPU profile: %v", perr)
		}
	}
	r.CPU, r.MaxRSSKiB = stopAll(ps)
	if err != nil {
		return r, err
	}
	if strings.HasPrefix(name, "joiner") {
		// More exact than the first /readyz 200 seen by polling: when the
		// first task, restored, started on its notifications (its log).
		if t := taskStart(ps); !t.IsZero() {
			r.Ready = t
		}
	}
	r.First, r.Last, r.N, err = b.outputSpan(ctx, output, c.partitions)
	return r, err
}

// latencyRound is one steady-load run of one joiner worker.
type latencyRound struct {
	Guarantee            string // the worker's --processing-guarantee
	Round                int
	Notifications, Ticks int64
	Seconds              float64
	Samples              int
	P50, P90, P99, P999  float64 // ms
	Max                  float64
}

// latency runs one worker under a steady interleaved load and measures,
// for every notification, the time its alert became visible minus the
// notification's own append time (both topics use LogAppendTime, so the
// latter is when Kafka acknowledged it): the alert's append time, or
// under exactly-once the append time of its transaction's commit marker.
// With more than one --latency-guarantees, their rounds are interleaved.
// The alerts are read read_committed, right for both guarantees.
func (b *bench) latency(ctx context.Context) error {
	c := b.cfg
	for round := 1; round <= c.latencyRounds; round++ {
		for _, g := range c.latencyGuarantees {
			r, err := b.latencyOnce(ctx, round, g)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", g, round, err)
			}
			say("latency: %s round %d: %d notifications and %d ticks in %.1fs; p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d alerts",
				g, round, r.Notifications, r.Ticks, r.Seconds, r.P50, r.P99, r.Max, r.Samples)
			b.res.latency = append(b.res.latency, r)
		}
	}
	return nil
}

func (b *bench) latencyOnce(ctx context.Context, round int, guarantee string) (latencyRound, error) {
	c := b.cfg
	id := fmt.Sprintf("%s-latency-%s-%d", b.prefix, guarantee, round)
	market, notifications, alerts := id+"-market", id+"-notifications", id+"-alerts"
	for _, t := range []string{market, notifications, alerts} {
		if err := b.createTopic(ctx, t, c.partitions, true); err != nil {
			return latencyRound{}, err
		}
	}
	defer b.deleteTopics(market, notifications, alerts)
	w := loadgen.NewWriter(strings.Split(c.brokers, ","))
	defer w.Close()
	syms := loadgen.Symbols(c.symbols)
	// One tick per symbol first, so that every notification finds a price.
	first := make([]kafka.Message, len(syms))
	for i, s := range syms {
		first[i] = kafka.Message{Topic: market, Key: []byte(s), Value: record.AppendTick(nil, record.Tick{Symbol: s, Price: float64(1000 + i)})}
	}
	if err := w.WriteMessages(ctx, first...); err != nil {
		return latencyRound{}, fmt.Errorf("producing the first ticks: %w", err)
	}
	ps, _, err := b.startJoiners(ctx, 1, id, market, notifications, alerts, guarantee)
	if err != nil {
		return latencyRound{}, err
	}
	r := latencyRound{Round: round, Guarantee: guarantee}
	// Steady load: every 5ms, send what is due, ticks interleaved with
	// notifications at the configured ratio.
	began := time.Now()
	total := c.latencyRate + c.latencyTickRate
	var sent int64
	tick := time.NewTicker(5 * time.Millisecond)
	var batch []kafka.Message
	for now := began; now.Sub(began).Seconds() < c.latencySeconds; now = <-tick.C {
		due := int64(now.Sub(began).Seconds() * total)
		batch = batch[:0]
		for ; sent < due; sent++ {
			s := syms[sent%int64(len(syms))]
			// Of every (rate+tickRate) records, tickRate are ticks, spread evenly.
			if int64(float64(sent+1)*c.latencyTickRate/total) > int64(float64(sent)*c.latencyTickRate/total) {
				batch = append(batch, kafka.Message{Topic: market, Key: []byte(s), Value: record.AppendTick(nil, record.Tick{Symbol: s, Price: float64(1000+sent%997) + 0.5})})
				r.Ticks++
				continue
			}
			batch = append(batch, kafka.Message{Topic: notifications, Key: []byte(s), Value: record.AppendNotification(nil, &record.Notification{ID: fmt.Sprintf("l%d-%d", round, sent), User: fmt.Sprintf("u%d", sent%97), Symbol: s, Text: s + " moved"})})
			r.Notifications++
		}
		if len(batch) > 0 {
			if err := w.WriteMessages(ctx, batch...); err != nil {
				tick.Stop()
				stopAll(ps)
				return r, fmt.Errorf("producing: %w", err)
			}
		}
	}
	tick.Stop()
	r.Seconds = time.Since(began).Seconds()
	err = b.waitRecords(ctx, alerts, c.partitions, r.Notifications, 2*time.Minute)
	stopAll(ps)
	if err != nil {
		return r, err
	}
	cutoff := began.Add(time.Duration(c.latencyWarmup * float64(time.Second))).UnixMilli()
	err = b.measureLatency(ctx, &r, notifications, alerts, cutoff, guarantee == exactlyOnce)
	return r, err
}

// measureLatency sets r's percentiles: for every alert of a notification
// appended at or after cutoff (Unix ms), its visible time minus its
// notification's append time (Kafka's acknowledgement), read from the
// topics.
func (b *bench) measureLatency(ctx context.Context, r *latencyRound, notifications, alerts string, cutoff int64, eos bool) error {
	c := b.cfg
	// The notifications' append times (Kafka's acknowledgement), by id;
	// then each alert's append time minus its notification's.
	acked := make(map[string]int64, r.Notifications)
	err := b.readAll(ctx, notifications, c.partitions, func(_ int, ts time.Time, v []byte) {
		if n, err := record.DecodeNotification(v, 0); err == nil {
			acked[n.ID] = ts.UnixMilli()
		}
	})
	if err != nil {
		return err
	}
	var lat []float64
	// Under exactly-once an alert becomes visible (to read_committed
	// consumers) when its transaction commits: its latency ends at the
	// append time of the commit marker that follows it in its partition,
	// not at its own.
	pending := make([][]int64, c.partitions) // notifications' acks of the alerts before the next marker
	err = b.readAllMarked(ctx, alerts, c.partitions, func(p int, ts time.Time, v []byte) {
		n, err := record.DecodeNotification(v, 0)
		if err != nil {
			return
		}
		if at, ok := acked[n.ID]; ok && at >= cutoff {
			if eos {
				pending[p] = append(pending[p], at)
				return
			}
			lat = append(lat, float64(ts.UnixMilli()-at))
		}
	}, func(p int, ts time.Time) {
		for _, at := range pending[p] {
			lat = append(lat, float64(ts.UnixMilli()-at))
		}
		pending[p] = pending[p][:0]
	})
	if err != nil {
		return err
	}
	for p, left := range pending {
		if len(left) > 0 {
			return fmt.Errorf("%s-%d: %d alerts read read_committed with no commit marker after them", alerts, p, len(left))
		}
	}
	slices.Sort(lat)
	r.Samples = len(lat)
	r.P50, r.P90, r.P99, r.P999 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), percentile(lat, 99.9)
	if len(lat) > 0 {
		r.Max = lat[len(lat)-1]
	}
	return nil
}

// restoreRound is one restore of the market partition into Pebble, or one
// raw consume of it.
type restoreRound struct {
	Kind    string // "joiner" or "raw consume"
	Round   int
	Records float64
	Seconds float64
	// StoreSeconds is the part of a joiner restore's Seconds its bulk
	// load's commits took after the last fetches (store_seconds in its
	// log), -1 when unknown; 0 for the raw consume.
	StoreSeconds float64
}

func (r restoreRound) Rate() float64 { return r.Records / r.Seconds }

var consumedRE = regexp.MustCompile(`consumed (\d+) records in \S+ \((\d+) records/s\)`)

// restore fills one market partition with restoreTicks ticks, then times,
// interleaved, a joiner worker restoring it into Pebble (its
// joiner_restore_seconds and joiner_restore_records_total) and the
// pass-through's raw consume of the same partition with the same reader.
func (b *bench) restore(ctx context.Context) error {
	c := b.cfg
	market, notifications := b.prefix+"-restore-market", b.prefix+"-restore-notifications"
	for _, t := range []string{market, notifications} {
		if err := b.createTopic(ctx, t, 1, false); err != nil {
			return err
		}
	}
	symbols := max(c.restoreTicks/10, 1)
	say("restore: producing %d ticks into one partition", symbols*10)
	out, err := exec.CommandContext(ctx, c.joiner, "loadgen", "--brokers", c.brokers, "--market-topic", market, "--notifications-topic", notifications,
		"--symbols", strconv.Itoa(symbols), "--ticks-per-symbol", "10", "--notifications-per-symbol", "0").CombinedOutput()
	if err != nil {
		return fmt.Errorf("joiner loadgen: %w: %s", err, out)
	}
	for round := 1; round <= c.restoreRounds; round++ {
		id := fmt.Sprintf("%s-restore-%d", b.prefix, round)
		ps, _, err := b.startJoiners(ctx, 1, id, market, notifications, id+"-alerts", atLeastOnce)
		if err != nil {
			return err
		}
		m, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.httpPort))
		stopAll(ps)
		if err != nil {
			return err
		}
		jr := restoreRound{Kind: "joiner", Round: round, Records: m["joiner_restore_records_total"], Seconds: m["joiner_restore_seconds_sum"],
			StoreSeconds: restoreStoreSeconds(ps)}
		out, err := exec.CommandContext(ctx, c.passthrough, "--brokers", c.brokers, "--input", market, "--consume-only", "--partition", "0").CombinedOutput()
		if err != nil {
			return fmt.Errorf("raw consume: %w: %s", err, out)
		}
		mm := consumedRE.FindSubmatch(out)
		if mm == nil {
			return fmt.Errorf("raw consume printed %q", out)
		}
		recs, _ := strconv.ParseFloat(string(mm[1]), 64)
		rps, _ := strconv.ParseFloat(string(mm[2]), 64)
		rr := restoreRound{Kind: "raw consume", Round: round, Records: recs, Seconds: recs / rps}
		say("restore: round %d: joiner %.0f records in %.2fs (%.0f/s); raw consume %.0f records/s (ratio %.2f)",
			round, jr.Records, jr.Seconds, jr.Rate(), rr.Rate(), jr.Rate()/rr.Rate())
		b.res.restore = append(b.res.restore, jr, rr)
	}
	return nil
}

// scrape reads the Prometheus text exposition at url into name → value,
// the value of a labelled metric being the sum over its series.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		// A labelled series adds to its family's total (e.g.
		// joiner_restore_records_total over its reasons).
		name, _, _ := strings.Cut(line[:i], "{")
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64); err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// demoRun is `joiner demo` with many notifications.
type demoRun struct {
	Notifications int
	Seconds       float64
	MaxRSSKiB     int64
	CPU           time.Duration
	// MaxGap is the longest time without a line on stderr, from the
	// first line to the last (the last alert's progress line).
	MaxGap time.Duration
	Ok     bool
	Last   string
}

func (b *bench) demo(ctx context.Context) error {
	c := b.cfg
	per := max(c.demoNotifications/1000, 1)
	say("demo: joiner demo --symbols 1000 --ticks-per-symbol 10 --notifications-per-symbol %d", per)
	cmd := exec.CommandContext(ctx, c.joiner, "demo", "--symbols", "1000", "--ticks-per-symbol", "10", "--notifications-per-symbol", strconv.Itoa(per))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	var gap time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Time{}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			now := time.Now()
			if !last.IsZero() {
				gap = max(gap, now.Sub(last))
			}
			last = now
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	wg.Wait()
	err = cmd.Wait()
	r := demoRun{Notifications: 1000 * per, Seconds: time.Since(began).Seconds(), MaxGap: gap, Ok: err == nil}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.MaxRSSKiB = ru.Maxrss
		r.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	r.Last = lines[len(lines)-1]
	if err != nil {
		return fmt.Errorf("joiner demo: %w: %s", err, stdout.String())
	}
	say("demo: %d notifications in %.1fs, peak RSS %d MiB, longest silence on stderr %s: %s", r.Notifications, r.Seconds, r.MaxRSSKiB>>10, r.MaxGap.Round(time.Millisecond), r.Last)
	b.res.demo = &r
	return nil
}

// saveProfile saves a CPU profile of the first joiner worker, taken from
// its /debug/pprof/profile, as <out>/<date>-<name>-joiner-1w.cpu.pprof.
func (b *bench) saveProfile(ctx context.Context, seconds int) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", b.cfg.httpPort, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	if err := os.MkdirAll(b.cfg.outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(b.cfg.outDir, time.Now().UTC().Format("2006-01-02")+"-"+b.cfg.name+"-joiner-1w.cpu.pprof")
	b.res.profile = path
	return os.WriteFile(path, body, 0o644)
}
