package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type results struct {
	env     []string
	backlog string
	// alertSize sizes passthrough-alertsize, when it runs.
	alertSize *alertSize
	drain     []drainRound
	latency   []latencyRound
	restore   []restoreRound
	demo      *demoRun
	width     []widthRound
	profile   string // CPU profile file, if taken
}

// environment describes the machine and the run.
func environment(c config) []string {
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	nproc := strconv.Itoa(runtime.NumCPU())
	if out, err := exec.Command("nproc").Output(); err == nil {
		nproc = strings.TrimSpace(string(out))
	}
	commit := gitCommit()
	java := "not used"
	if c.kstreamsJar != "" {
		if out, err := exec.Command(c.java, "-version").CombinedOutput(); err == nil {
			java = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
		}
	}
	return []string{
		"command: `" + c.command + "`",
		"date: " + time.Now().UTC().Format(time.RFC3339),
		"nproc: " + nproc + ", memory: " + mem + ", " + runtime.GOOS + "/" + runtime.GOARCH,
		"broker: Apache Kafka " + c.brokerVersion + " at " + c.brokers + " (single node)",
		"joiner commit: " + commit + ", " + runtime.Version(),
		"java: " + java,
		"load average at the start: " + loadavg() + " (other processes on this machine share its cores: compare ratios, not absolute rates)",
		"drain warm-up rounds per contestant, not counted: " + strconv.Itoa(c.warmupRounds),
	}
}

// gitCommit is the short commit of the checkout, "(with uncommitted
// changes)" added when the tree differs from it; "unknown" outside git.
func gitCommit() string {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	return commit
}

// The chart titles; TestChartTextFits checks each fits the chart's width.
const (
	throughputTitle = "Drain throughput, median of rounds (whiskers: min–max)"
	latencyTitle    = "End-to-end latency percentiles, 1 worker"
	restoreTitle    = "Restore rate of one market partition"
	widthRateTitle  = "Drain rate of one worker by its task count"
	widthRSSTitle   = "Idle RSS per task of one worker by its task count"
)

// What the rounds of a chart are: per contestant or kind (roundsEach), or
// of the one contestant (roundsOnly).
const (
	roundsEach = " each; bar: median, whiskers: min–max"
	roundsOnly = "; bar: median, whiskers: min–max"
)

// chartNote is the line at the bottom of every chart: when and on which
// commit it was measured, and over how many rounds.
func chartNote(date, commit string, rounds int, what string) string {
	return fmt.Sprintf("%s · joiner %s · %d rounds%s", date, commit, rounds, what)
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// order is every drain contestant, in the order of the summary and chart.
var order = []string{"joiner-1w", "joiner-2w", "joiner-1w-eos", "passthrough", "passthrough-alertsize", "kstreams", "kstreams-eos"}

func (r *results) byContestant() (names []string, m map[string][]drainRound) {
	m = map[string][]drainRound{}
	for _, d := range r.drain {
		m[d.Contestant] = append(m[d.Contestant], d)
	}
	for _, n := range order {
		if len(m[n]) > 0 {
			names = append(names, n)
		}
	}
	return names, m
}

func collect[T any](rs []T, f func(T) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// pairRatios is a/b for each round present in both.
func pairRatios(a, b []drainRound) []float64 {
	var out []float64
	for _, x := range a {
		for _, y := range b {
			if x.Round == y.Round {
				out = append(out, x.Rate()/y.Rate())
			}
		}
	}
	return out
}

func (r *results) ratioLines() []string {
	_, m := r.byContestant()
	var out []string
	add := func(a, b, what string) {
		if len(m[a]) == 0 || len(m[b]) == 0 {
			return
		}
		med := spreadOf(collect(m[a], drainRound.Rate)).Median / spreadOf(collect(m[b], drainRound.Rate)).Median
		out = append(out, fmt.Sprintf("%s: %s of medians; per round %s", what, ratio(med), spreadOf(pairRatios(m[a], m[b])).format(ratio)))
	}
	add("joiner-1w", "passthrough", "joiner 1 worker / kafka-go pass-through (target ≥ 0.8)")
	add("joiner-1w", "passthrough-alertsize", "joiner 1 worker / alert-sized pass-through")
	add("passthrough-alertsize", "passthrough", "alert-sized pass-through / kafka-go pass-through")
	add("joiner-1w", "kstreams", "joiner 1 worker / Kafka Streams (target ≥ 4)")
	add("joiner-2w", "joiner-1w", "joiner 2 workers / 1 worker")
	add("joiner-1w-eos", "joiner-1w", "exactly-once / at-least-once drain (1 worker, target ≥ 0.85×)")
	add("joiner-1w-eos", "kstreams-eos", "joiner exactly-once / Kafka Streams exactly_once_v2 (1 worker, 1 thread; target ≥ 8×)")
	return out
}

// line states the padding and the means it comes from.
func (a alertSize) line() string {
	return fmt.Sprintf("pass-through values padded with %d bytes = mean alert %.1f bytes − mean notification %.1f bytes (%.2f× the bytes)",
		a.Pad, a.Alert, a.Notification, a.Alert/a.Notification)
}

// summary is what the command prints at the end: every figure.
func (r *results) summary() string {
	var b strings.Builder
	names, m := r.byContestant()
	if len(names) > 0 {
		fmt.Fprintf(&b, "drain throughput (%s), median (min–max) of %d rounds:\n", r.backlog, len(m[names[0]]))
		width := 12 // the width of the default contestants' column
		for _, n := range names {
			width = max(width, len(n))
		}
		for _, n := range names {
			rs := m[n]
			fmt.Fprintf(&b, "  %-*s %s notifications/s; first output %s after ready; ready %s after start; CPU %s per notification\n", width, n,
				spreadOf(collect(rs, drainRound.Rate)).format(rate),
				spreadOf(collect(rs, func(d drainRound) float64 { return d.First.Sub(d.Ready).Seconds() })).format(secs),
				spreadOf(collect(rs, func(d drainRound) float64 { return d.Ready.Sub(d.Start).Seconds() })).format(secs),
				spreadOf(collect(rs, drainRound.CPUPerRecordMicros)).format(micros))
		}
		if a := r.alertSize; a != nil && len(m["passthrough-alertsize"]) > 0 {
			fmt.Fprintf(&b, "  %s\n", a.line())
		}
		for _, l := range r.ratioLines() {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		for _, k := range []string{"kstreams", "kstreams-eos"} {
			if ks := m[k]; len(ks) > 0 {
				fmt.Fprintf(&b, "  %s: JVM start to first output %s, first to last output %s\n", k,
					spreadOf(collect(ks, func(d drainRound) float64 { return d.First.Sub(d.Start).Seconds() })).format(secs),
					spreadOf(collect(ks, func(d drainRound) float64 { return d.Last.Sub(d.First).Seconds() })).format(secs))
			}
		}
	}
	for _, g := range r.latencyGuarantees() {
		ls := r.latencyOf(g)
		fmt.Fprintf(&b, "end-to-end latency (1 worker, steady load, %s), median (min–max) of %d rounds: p50 %s, p90 %s, p99 %s (target ≤ %s), p99.9 %s, max %s\n", g, len(ls),
			spreadOf(collect(ls, func(l latencyRound) float64 { return l.P50 })).format(ms),
			spreadOf(collect(ls, func(l latencyRound) float64 { return l.P90 })).format(ms),
			spreadOf(collect(ls, func(l latencyRound) float64 { return l.P99 })).format(ms),
			latencyTarget(g),
			spreadOf(collect(ls, func(l latencyRound) float64 { return l.P999 })).format(ms),
			spreadOf(collect(ls, func(l latencyRound) float64 { return l.Max })).format(ms))
	}
	if len(r.restore) > 0 {
		j, raw := r.restoreKinds()
		fmt.Fprintf(&b, "restore (%.0f ticks, one partition): joiner into Pebble %s records/s; raw consume %s records/s; ratio %s (target ≥ 0.8)\n",
			j[0].Records, spreadOf(collect(j, restoreRound.Rate)).format(rate), spreadOf(collect(raw, restoreRound.Rate)).format(rate), r.restoreRatio().format(ratio))
		if st, rd, ok := r.restoreSplit(); ok {
			fmt.Fprintf(&b, "  joiner's restore: storing after the last fetch %s; reading (the rest) / raw consume time, per round: %s\n", st.format(secs), rd.format(ratio))
		}
	}
	r.widthSummary(&b)
	if d := r.demo; d != nil {
		fmt.Fprintf(&b, "joiner demo, %d notifications: peak RSS %s (target ≤ 300 MiB), %s, CPU %s, longest silence on stderr %s\n",
			d.Notifications, mib(float64(d.MaxRSSKiB)/1024), secs(d.Seconds), d.CPU.Round(time.Millisecond), d.MaxGap.Round(time.Millisecond))
	}
	return b.String()
}

// latencyGuarantees are the guarantees of the latency rounds, in the
// order of their first round.
func (r *results) latencyGuarantees() []string {
	var gs []string
	for _, l := range r.latency {
		if !slices.Contains(gs, l.Guarantee) {
			gs = append(gs, l.Guarantee)
		}
	}
	return gs
}

// guaranteeShort labels a guarantee's bars: alo or eos (lower case, so
// that ten labels fit their slots).
func guaranteeShort(g string) string {
	if g == exactlyOnce {
		return "eos"
	}
	return "alo"
}

// latencyOf is the latency rounds under guarantee g.
func (r *results) latencyOf(g string) []latencyRound {
	var out []latencyRound
	for _, l := range r.latency {
		if l.Guarantee == g {
			out = append(out, l)
		}
	}
	return out
}

// latencyTarget is the p99 target under guarantee g: 50 ms
// at-least-once, 150 ms exactly-once (its 100 ms commit interval).
func latencyTarget(g string) string {
	if g == exactlyOnce {
		return "150 ms"
	}
	return "50 ms"
}

func (r *results) restoreKinds() (j, raw []restoreRound) {
	for _, x := range r.restore {
		if x.Kind == "joiner" {
			j = append(j, x)
		} else {
			raw = append(raw, x)
		}
	}
	return j, raw
}

func (r *results) restoreRatio() spread {
	j, raw := r.restoreKinds()
	var rs []float64
	for i := range min(len(j), len(raw)) {
		rs = append(rs, j[i].Rate()/raw[i].Rate())
	}
	return spreadOf(rs)
}

// restoreSplit is how joiner's restores divide, when every round logged
// it: the seconds of storing after the last fetch, and per round the time
// of the rest (reading, decoding, grouping) over the raw consume's.
func (r *results) restoreSplit() (store, read spread, ok bool) {
	j, raw := r.restoreKinds()
	var st, rd []float64
	for i := range min(len(j), len(raw)) {
		if j[i].StoreSeconds < 0 {
			return spread{}, spread{}, false
		}
		st = append(st, j[i].StoreSeconds)
		rd = append(rd, (j[i].Seconds-j[i].StoreSeconds)/raw[i].Seconds)
	}
	return spreadOf(st), spreadOf(rd), len(st) > 0
}

// write writes the results file and its charts; it returns the file's path.
func (r *results) write(c config) (string, error) {
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return "", err
	}
	date := time.Now().UTC().Format("2006-01-02")
	base := date + "-" + c.name
	commit := gitCommit()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Benchmark %s\n\n", base)
	for _, e := range r.env {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	fmt.Fprintf(&b, "- load average at the end: %s\n", loadavg())
	fmt.Fprintf(&b, "\n## Summary\n\n```\n%s```\n", r.summary())
	names, m := r.byContestant()
	if len(names) > 0 {
		chart := base + "-throughput.svg"
		var bars []bar
		for _, n := range names {
			s := spreadOf(collect(m[n], drainRound.Rate))
			bars = append(bars, bar{Label: n, Value: s.Median, Low: s.Min, Hi: s.Max, Sublabel: rate(s.Median) + "/s"})
		}
		if err := os.WriteFile(filepath.Join(c.outDir, chart), barChart(throughputTitle, "notifications/s", chartNote(date, commit, len(m[names[0]]), roundsEach), bars), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n## Drain throughput\n\nBacklog: %s. Each round starts the contestant with a fresh group and output topic (LogAppendTime) and ends when the output holds one record per notification, read read_committed (markers and aborted records not counted). Ready: joiner's first task has restored its state and starts on its notifications (its log line); the pass-through and Kafka Streams print it (Kafka Streams at RUNNING). Rate = notifications / (last output append time − ready). CPU = user + system time of the contestant's processes (rusage), start to stop, per notification.\n\n![throughput](%s)\n\n", r.backlog, chart)
		b.WriteString("| contestant | round | notifications | ready after start | first output after ready | ready → last output | notifications/s | CPU | CPU/notification | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, d := range r.drain {
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %.0f | %s | %.2f µs | %d MiB |\n", d.Contestant, d.Round, d.N,
				secs(d.Ready.Sub(d.Start).Seconds()), secs(d.First.Sub(d.Ready).Seconds()), secs(d.Last.Sub(d.Ready).Seconds()), d.Rate(),
				d.CPU.Round(time.Millisecond), d.CPUPerRecordMicros(), d.MaxRSSKiB>>10)
		}
		if a := r.alertSize; a != nil && len(m["passthrough-alertsize"]) > 0 {
			fmt.Fprintf(&b, "\npassthrough-alertsize: %s. The alerts are joiner-1w's for this backlog, encoded with record.AppendAlert: result local with each symbol's last price (miss, no price, when the backlog has no ticks), 13-digit notification_ts_ms and price_ts_ms, worker %q.\n", a.line(), workerID(0))
		}
		b.WriteString("\nRatios (within this run):\n\n")
		for _, l := range r.ratioLines() {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	if len(r.latency) > 0 {
		if err := r.writeLatency(&b, c, base, date, commit); err != nil {
			return "", err
		}
	}
	if len(r.restore) > 0 {
		if err := r.writeRestore(&b, c, base, date, commit); err != nil {
			return "", err
		}
	}
	if len(r.width) > 0 {
		if err := r.writeWidth(&b, c, base, date, commit); err != nil {
			return "", err
		}
	}
	if d := r.demo; d != nil {
		fmt.Fprintf(&b, "\n## `joiner demo`\n\n`joiner demo --symbols 1000 --ticks-per-symbol 10 --notifications-per-symbol %d` (embedded broker, 4 workers, 6 partitions, all in one process): peak RSS %d MiB (rusage), %.1f s, CPU %s, longest time without a progress line on stderr %s, exit ok %v.\n\nLast line: `%s`\n",
			d.Notifications/1000, d.MaxRSSKiB>>10, d.Seconds, d.CPU.Round(time.Millisecond), d.MaxGap.Round(time.Millisecond), d.Ok, d.Last)
	}
	if r.profile != "" {
		fmt.Fprintf(&b, "\n## CPU profile\n\n`%s`: %d s of joiner-1w's first drain round, from `--pprof`. Read it with `go tool pprof -top bin/joiner %s`.\n", filepath.Base(r.profile), c.profileSeconds, r.profile)
	}
	path := filepath.Join(c.outDir, base+".md")
	return path, os.WriteFile(path, b.Bytes(), 0o644)
}

// writeLatency writes the latency section of the results file and its chart.
func (r *results) writeLatency(b *bytes.Buffer, c config, base, date, commit string) error {
	chart := base + "-latency.svg"
	gs := r.latencyGuarantees()
	var bars []bar
	for _, g := range gs {
		ls := r.latencyOf(g)
		for _, q := range []struct {
			name string
			f    func(latencyRound) float64
		}{{"p50", func(l latencyRound) float64 { return l.P50 }}, {"p90", func(l latencyRound) float64 { return l.P90 }},
			{"p99", func(l latencyRound) float64 { return l.P99 }}, {"p99.9", func(l latencyRound) float64 { return l.P999 }},
			{"max", func(l latencyRound) float64 { return l.Max }}} {
			s := spreadOf(collect(ls, q.f))
			label := q.name
			if len(gs) > 1 || g != atLeastOnce {
				label = guaranteeShort(g) + " " + q.name
			}
			bars = append(bars, bar{Label: label, Value: s.Median, Low: s.Min, Hi: s.Max, Sublabel: fmt.Sprintf("%.0f ms", s.Median)})
		}
	}
	if err := os.WriteFile(filepath.Join(c.outDir, chart), barChart(latencyTitle, "ms", chartNote(date, commit, len(r.latencyOf(gs[0])), roundsOnly), bars), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b, "\n## End-to-end latency\n\nOne worker, %d partitions, a steady %.0f notifications/s and %.0f ticks/s interleaved for %.0f s per round (the first %.0f s left out), under %s (exactly-once: its default 100 ms commit interval). Market, notifications and alerts use LogAppendTime: latency = the alert's append time − the notification's append time (Kafka's acknowledgement of it). Alerts are read read_committed.\n\n![latency](%s)\n\n",
		c.partitions, c.latencyRate, c.latencyTickRate, c.latencySeconds, c.latencyWarmup, strings.Join(gs, " and "), chart)
	b.WriteString("| guarantee | round | notifications | ticks | seconds | alerts measured | p50 | p90 | p99 | p99.9 | max |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range r.latency {
		fmt.Fprintf(b, "| %s | %d | %d | %d | %.1f | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", l.Guarantee, l.Round, l.Notifications, l.Ticks, l.Seconds, l.Samples, l.P50, l.P90, l.P99, l.P999, l.Max)
	}
	return nil
}

// writeRestore writes the restore section of the results file and its chart.
func (r *results) writeRestore(b *bytes.Buffer, c config, base, date, commit string) error {
	chart := base + "-restore.svg"
	j, raw := r.restoreKinds()
	sj, sr := spreadOf(collect(j, restoreRound.Rate)), spreadOf(collect(raw, restoreRound.Rate))
	bars := []bar{
		{Label: "joiner restore into Pebble", Value: sj.Median, Low: sj.Min, Hi: sj.Max, Sublabel: rate(sj.Median) + "/s"},
		{Label: "raw consume", Value: sr.Median, Low: sr.Min, Hi: sr.Max, Sublabel: rate(sr.Median) + "/s"},
	}
	if err := os.WriteFile(filepath.Join(c.outDir, chart), barChart(restoreTitle, "records/s", chartNote(date, commit, len(j), roundsEach), bars), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(b, "\n## Restore\n\nOne market partition of %.0f ticks. joiner: a fresh worker (fresh group and state dir) restores it into Pebble; rate = joiner_restore_records_total / joiner_restore_seconds_sum. Raw consume: `passthrough --consume-only`, the same kafka-go Fetch loop as joiner's partition reader, from the first offset to the end offset, no decode and no store. Interleaved.\n\n![restore](%s)\n\n", j[0].Records, chart)
	b.WriteString("| round | kind | records | seconds | of which storing after the last fetch | records/s |\n|---|---|---|---|---|---|\n")
	for _, x := range r.restore {
		store := ""
		if x.Kind == "joiner" && x.StoreSeconds >= 0 {
			store = fmt.Sprintf("%.3f", x.StoreSeconds)
		}
		fmt.Fprintf(b, "| %d | %s | %.0f | %.3f | %s | %.0f |\n", x.Round, x.Kind, x.Records, x.Seconds, store, x.Rate())
	}
	fmt.Fprintf(b, "\nRatio joiner / raw consume, per round: %s\n", r.restoreRatio().format(ratio))
	if st, rd, ok := r.restoreSplit(); ok {
		fmt.Fprintf(b, "\njoiner's restores stored for %s after their last fetch (store_seconds in the \"restore complete\" log line: sorting, writing and ingesting the tables); the rest of each restore (reading, decoding, grouping) took %s the raw consume's time, per round.\n", st.format(secs), rd.format(ratio))
	}
	return nil
}
