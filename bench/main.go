// Command bench measures joiner against a kafka-go pass-through and Kafka
// Streams on a real broker, and writes bench/results/<date>-<name>.md with
// SVG charts. scripts/bench builds everything and runs it; see
// bench/README.md for the figures and how each is measured.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
)

type config struct {
	brokers       string
	brokerVersion string
	name          string
	outDir        string
	command       string

	joiner, passthrough, kstreamsJar, java string

	figures map[string]bool
	rounds  int
	// warmupRounds of each drain contestant run before the measured ones
	// and are not counted.
	warmupRounds int
	partitions   int

	symbols, ticks, notifications int // drain backlog, per symbol
	notificationBytes             int // drain backlog: loadgen --notification-bytes

	latencySeconds  float64
	latencyWarmup   float64
	latencyRate     float64 // notifications/s
	latencyTickRate float64 // ticks/s
	latencyRounds   int
	// latencyGuarantees are the workers' --processing-guarantee, each
	// measured latencyRounds times, interleaved.
	latencyGuarantees []string

	restoreTicks  int
	restoreRounds int

	demoNotifications int

	widths                    []int // width: the task counts of one worker
	widthSymbols, widthRounds int
	widthNotifications        int // width: per symbol

	httpPort int // first port for joiner's HTTP listeners

	profileSeconds int // CPU profile of joiner-1w's first drain round
}

type bench struct {
	cfg     config
	client  *kafka.Client
	prefix  string
	workDir string
	created []string
	res     results
}

func main() {
	var cfg config
	var figures, contestants, latencyGuarantees, widths string
	flag.StringVar(&cfg.brokers, "brokers", "", "Kafka bootstrap brokers (required)")
	flag.StringVar(&cfg.brokerVersion, "broker-version", "unknown", "broker version, for the results file")
	flag.StringVar(&cfg.name, "name", "run", "name of the results file: <out>/<date>-<name>.md")
	flag.StringVar(&cfg.outDir, "out", "bench/results", "directory of the results")
	flag.StringVar(&cfg.command, "command", "", "the command line to record (default: this one)")
	flag.StringVar(&cfg.joiner, "joiner", "bin/joiner", "joiner binary")
	flag.StringVar(&cfg.passthrough, "passthrough", "bin/passthrough", "pass-through binary")
	flag.StringVar(&cfg.kstreamsJar, "kstreams-jar", "", "Kafka Streams contestant jar (empty: skip it)")
	flag.StringVar(&cfg.java, "java", "java", "java binary for the Kafka Streams contestant")
	flag.StringVar(&figures, "figures", "drain,latency,restore,demo", "figures to measure, comma-separated: drain, latency, restore, demo, width")
	flag.StringVar(&contestants, "contestants", "joiner-1w,joiner-2w,passthrough,kstreams", "drain contestants, in round order: joiner-1w, joiner-2w, joiner-1w-eos (one worker, --processing-guarantee exactly-once), passthrough, passthrough-alertsize (the pass-through with values padded to the mean alert size), kstreams, kstreams-eos (processing.guarantee=exactly_once_v2)")
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds of each drain contestant (at least 3 for a median)")
	flag.IntVar(&cfg.warmupRounds, "warmup-rounds", 1, "drain: rounds of each contestant run first and not counted (the broker's JIT, the page cache)")
	flag.IntVar(&cfg.partitions, "partitions", 6, "partitions of the drain and latency topics")
	flag.IntVar(&cfg.symbols, "symbols", 1000, "drain backlog: symbols")
	flag.IntVar(&cfg.ticks, "ticks-per-symbol", 10, "drain backlog: ticks per symbol")
	flag.IntVar(&cfg.notifications, "notifications-per-symbol", 300, "drain backlog: notifications per symbol")
	flag.IntVar(&cfg.notificationBytes, "notification-bytes", 0, "drain backlog: pad each notification to at least this many bytes (joiner loadgen --notification-bytes; 0: none)")
	flag.Float64Var(&cfg.latencySeconds, "latency-seconds", 12, "latency: seconds of steady load per round")
	flag.Float64Var(&cfg.latencyWarmup, "latency-warmup", 2, "latency: seconds at the start of a round left out of the percentiles")
	flag.Float64Var(&cfg.latencyRate, "latency-rate", 20000, "latency: notifications per second")
	flag.Float64Var(&cfg.latencyTickRate, "latency-tick-rate", 2000, "latency: ticks per second, interleaved")
	flag.IntVar(&cfg.latencyRounds, "latency-rounds", 3, "latency: rounds (of each guarantee)")
	flag.StringVar(&latencyGuarantees, "latency-guarantees", atLeastOnce, "latency: the worker's --processing-guarantee, comma-separated, rounds interleaved: at-least-once, exactly-once (100ms commit interval)")
	flag.IntVar(&cfg.restoreTicks, "restore-ticks", 1_000_000, "restore: ticks in the one market partition")
	flag.IntVar(&cfg.restoreRounds, "restore-rounds", 3, "restore: interleaved rounds of joiner and the raw consume")
	flag.IntVar(&cfg.demoNotifications, "demo-notifications", 1_000_000, "demo: notifications (1000 symbols × this/1000)")
	flag.StringVar(&widths, "widths", "6,256,1024", "width: the task counts (partitions of its topics) of the one worker, comma-separated")
	flag.IntVar(&cfg.widthSymbols, "width-symbols", 5000, "width: backlog symbols, one tick each")
	flag.IntVar(&cfg.widthNotifications, "width-notifications-per-symbol", 60, "width: backlog notifications per symbol")
	flag.IntVar(&cfg.widthRounds, "width-rounds", 1, "width: rounds at each task count")
	flag.IntVar(&cfg.profileSeconds, "profile-seconds", 0, "save a CPU profile of this many seconds of joiner-1w's first drain round, from its --pprof endpoint, next to the results (0: none)")
	flag.IntVar(&cfg.httpPort, "http-port", 39094, "first port of the joiner workers' HTTP listeners (two are used)")
	flag.Parse()
	if cfg.brokers == "" {
		fmt.Fprintln(os.Stderr, "bench: --brokers is required (scripts/bench starts a broker and passes it)")
		os.Exit(2)
	}
	if cfg.command == "" {
		cfg.command = strings.Join(os.Args, " ")
	}
	cfg.figures = map[string]bool{}
	fs, err := parseList("figure", figures, []string{"drain", "latency", "restore", "demo", "width"})
	if err == nil {
		for _, f := range fs {
			cfg.figures[f] = true
		}
		_, err = parseList("contestant", contestants, order)
	}
	if err == nil {
		cfg.latencyGuarantees, err = parseList("latency guarantee", latencyGuarantees, []string{atLeastOnce, exactlyOnce})
	}
	if err == nil {
		cfg.widths, err = parseCounts("width", widths)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{cfg: cfg, client: &kafka.Client{Addr: kafka.TCP(strings.Split(cfg.brokers, ",")...), Timeout: 30 * time.Second}}
	b.prefix = fmt.Sprintf("bench-%d", time.Now().Unix())
	b.workDir, err = os.MkdirTemp("", "joiner-bench-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	say("work dir (logs, state) %s; topics and groups prefixed %s", b.workDir, b.prefix)
	err = b.run(ctx, strings.Split(contestants, ","))
	if len(b.created) > 0 {
		b.deleteTopics(b.created...)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v (logs in %s)\n", err, b.workDir)
		os.Exit(1)
	}
	os.RemoveAll(b.workDir)
}

// parseList splits a comma-separated flag value into its items, trimmed,
// empty ones dropped; an item not in valid is an error naming them.
func parseList(what, s string, valid []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if !slices.Contains(valid, v) {
			return nil, fmt.Errorf("unknown %s %q (%s)", what, v, strings.Join(valid, ", "))
		}
		out = append(out, v)
	}
	return out, nil
}

// parseCounts parses a comma-separated list of positive counts.
func parseCounts(what, s string) ([]int, error) {
	var out []int
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q is not a positive count", what, v)
		}
		out = append(out, n)
	}
	return out, nil
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func (b *bench) run(ctx context.Context, contestants []string) error {
	b.res.env = environment(b.cfg)
	if b.cfg.figures["drain"] {
		var cs []string
		for _, c := range contestants {
			c = strings.TrimSpace(c)
			if strings.HasPrefix(c, "kstreams") && b.cfg.kstreamsJar == "" {
				say("no --kstreams-jar: Kafka Streams (%s) left out", c)
				continue
			}
			cs = append(cs, c)
		}
		if err := b.drain(ctx, cs); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if b.cfg.figures["latency"] {
		if err := b.latency(ctx); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if b.cfg.figures["restore"] {
		if err := b.restore(ctx); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	if b.cfg.figures["width"] {
		if err := b.width(ctx); err != nil {
			return fmt.Errorf("width: %w", err)
		}
	}
	if b.cfg.figures["demo"] && b.cfg.demoNotifications > 0 {
		if err := b.demo(ctx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	path, err := b.res.write(b.cfg)
	if err != nil {
		return err
	}
	fmt.Print(b.res.summary())
	say("results in %s", path)
	return nil
}

// stateDir returns a fresh directory under the work dir.
func (b *bench) stateDir(name string) string {
	d := filepath.Join(b.workDir, name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

// joinerArgs are the arguments of one `joiner run` worker.
func (b *bench) joinerArgs(group, instance string, port int, market, notifications, alerts string) []string {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return []string{b.cfg.joiner, "run", "--pprof",
		"--brokers", b.cfg.brokers, "--group", group, "--instance-id", instance,
		"--market-topic", market, "--notifications-topic", notifications, "--alerts-topic", alerts,
		"--dead-letter-topic", b.prefix + "-dead-letters",
		"--state-dir", b.stateDir(group + "-" + instance),
		"--http-addr", addr, "--advertise-addr", addr, "--log-format", "json", "--log-level", "info"}
}

// The values of joiner run's --processing-guarantee.
const (
	atLeastOnce = "at-least-once"
	exactlyOnce = "exactly-once"
)

// contestantGuarantee is the --processing-guarantee of a joiner drain
// contestant: exactly-once for the -eos ones.
func contestantGuarantee(name string) string {
	if strings.HasSuffix(name, "-eos") {
		return exactlyOnce
	}
	return atLeastOnce
}

// startJoiners starts n workers with --processing-guarantee guarantee
// (exactly-once: its default 100ms commit interval) and waits until one is ready (/readyz
// answers 200: assigned and restored).
func (b *bench) startJoiners(ctx context.Context, n int, group, market, notifications, alerts, guarantee string) ([]*proc, time.Time, error) {
	var ps []*proc
	for i := range n {
		inst := workerID(i)
		args := append(b.joinerArgs(group, inst, b.cfg.httpPort+i, market, notifications, alerts), "--processing-guarantee", guarantee)
		p, err := start(group+"-"+inst, filepath.Join(b.workDir, group+"-"+inst+".log"), nil, args...)
		if err != nil {
			stopAll(ps)
			return nil, time.Time{}, err
		}
		ps = append(ps, p)
	}
	// Ready when the first worker is: it processes from then on.
	var urls []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/readyz", b.cfg.httpPort+i))
	}
	ready, err := ps[0].waitReady(ctx, 2*time.Minute, urls...)
	if err != nil {
		stopAll(ps)
		return nil, time.Time{}, err
	}
	return ps, ready, nil
}

// taskStart is the earliest time a joiner task started processing
// notifications (its state restored), from the workers' JSON logs; zero
// when none did.
func taskStart(ps []*proc) time.Time {
	var first time.Time
	scanLogs(ps, func(line []byte) {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(line, &l) == nil && strings.HasPrefix(l.Msg, "processing notifications") {
			if first.IsZero() || l.Time.Before(first) {
				first = l.Time
			}
		}
	})
	return first
}

// restoreStoreSeconds is the store_seconds of the first bulk "restore
// complete" line in the workers' JSON logs: the time its load commits took
// after the last fetches. -1 when there is none.
func restoreStoreSeconds(ps []*proc) float64 {
	secs := -1.0
	scanLogs(ps, func(line []byte) {
		var l struct {
			Msg          string   `json:"msg"`
			StoreSeconds *float64 `json:"store_seconds"`
		}
		if secs < 0 && json.Unmarshal(line, &l) == nil && l.Msg == "restore complete" && l.StoreSeconds != nil {
			secs = *l.StoreSeconds
		}
	})
	return secs
}

// scanLogs calls f with every line of the logs of ps so far.
func scanLogs(ps []*proc, f func(line []byte)) {
	for _, p := range ps {
		file, err := os.Open(p.log.Name())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			f(sc.Bytes())
		}
		file.Close()
	}
}

// stopAll stops ps; it returns their summed CPU time and largest peak RSS.
func stopAll(ps []*proc) (cpu time.Duration, rssKiB int64) {
	for _, p := range ps {
		c, r := p.stop(45 * time.Second)
		cpu += c
		rssKiB = max(rssKiB, r)
	}
	return cpu, rssKiB
}

// deleteInternalTopics deletes the topics Kafka Streams created for
// application id app.
func (b *bench) deleteInternalTopics(ctx context.Context, app string) {
	md, err := b.client.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return
	}
	var ts []string
	for _, t := range md.Topics {
		if strings.HasPrefix(t.Name, app+"-") {
			ts = append(ts, t.Name)
		}
	}
	if len(ts) > 0 {
		b.deleteTopics(ts...)
	}
}
