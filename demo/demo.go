package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// Config configures a demo run. Start from DefaultConfig, which
// reproduces the four-worker experiment: 4 workers, 6 partitions, 10 symbols ×
// 3 notifications.
type Config struct {
	// Brokers, when set, run the demo on that cluster (with topics and a
	// group named for the run) instead of an embedded broker.
	Brokers           []string
	ReplicationFactor int
	// Transport carries the TLS and SASL settings for Brokers (kafkasec);
	// every client, writer and worker of the run uses them.
	Transport *kafka.Transport

	Workers                int
	Partitions             int
	Symbols                int
	TicksPerSymbol         int
	NotificationsPerSymbol int
	// Assignor is one of group.AssignorNames.
	Assignor string
	// Fields names the symbol and price members the load generator
	// writes and the workers read; ExtraFields and Headers are
	// loadgen.Config's; Grace is the workers' (join.Config.Grace).
	Fields      record.Fields
	ExtraFields bool
	Headers     bool
	Grace       time.Duration
	// ExactlyOnce runs the workers exactly-once (node.Config.ExactlyOnce)
	// and reads the alerts read_committed.
	ExactlyOnce bool
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Progress receives progress lines. Default: io.Discard.
	Progress io.Writer
	// Logger receives the workers' logs. Default: warnings to stderr.
	Logger *slog.Logger
	// Serve, when set, keeps the workers running after the report (the
	// Timeout then bounds the run up to the report only): Run calls
	// Serve with the report and each worker's status page, then waits
	// until ctx is done before it stops the workers and returns.
	Serve func(Report, []WorkerPage)
}

// WorkerPage is the status page of one worker of a demo run.
type WorkerPage struct {
	Instance string
	URL      string
}

// DefaultConfig returns the four-worker experiment.
func DefaultConfig() Config {
	return Config{
		Workers:                4,
		Partitions:             6,
		Symbols:                10,
		TicksPerSymbol:         1,
		NotificationsPerSymbol: 3,
		Assignor:               group.DefaultAssignor(),
		Timeout:                5 * time.Minute,
	}
}

// Joins counts join results.
type Joins struct {
	Local  int64 `json:"local"`
	Remote int64 `json:"remote"`
	Miss   int64 `json:"miss"`
}

// WorkerReport is one worker's line of the report.
type WorkerReport struct {
	Instance string `json:"instance"`
	Tasks    []int  `json:"tasks"`
	Local    int64  `json:"local"`
	Remote   int64  `json:"remote"`
	Miss     int64  `json:"miss"`
}

// Report is the outcome of a demo run; its JSON form is the contract of
// `joiner demo --json`.
type Report struct {
	Workers       int            `json:"workers"`
	Partitions    int            `json:"partitions"`
	Notifications int            `json:"notifications"`
	Alerts        int            `json:"alerts"`
	Joins         Joins          `json:"joins"`
	PerWorker     []WorkerReport `json:"per_worker"`
	// Elapsed runs from the first record produced to the last alert read.
	Elapsed time.Duration `json:"-"`
}

// withDefaults returns c with its nil Progress and Logger set to their
// defaults; the counts have none (DefaultConfig is the experiment, and
// Validate refuses zero counts).
func (c Config) withDefaults() Config {
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return c
}

// Validate reports a configuration the demo cannot run.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fielderr.Errorf("{Workers} must be at least 1, got %d", c.Workers)
	case c.Partitions < 1:
		return fielderr.Errorf("{Partitions} must be at least 1, got %d", c.Partitions)
	case c.Symbols < 1:
		return fielderr.Errorf("{Symbols} must be at least 1, got %d", c.Symbols)
	case c.TicksPerSymbol < 0 || c.NotificationsPerSymbol < 0:
		return fielderr.Errorf("{TicksPerSymbol} and {NotificationsPerSymbol} must not be negative")
	case c.Timeout <= 0:
		return fielderr.Errorf("{Timeout} must be positive, got %s", c.Timeout)
	case c.Grace < 0:
		return fielderr.Errorf("{Grace} must not be negative, got %s", c.Grace)
	}
	if !slices.Contains(group.AssignorNames(), c.Assignor) {
		return fielderr.Errorf("{Assignor} must be %s, got %q", group.AssignorList(), c.Assignor)
	}
	return nil
}

// Run starts the embedded broker and the workers, waits for a stable
// group, produces the load, waits until every notification has an alert,
// and reports.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	// With Serve, the workers outlive the timeout (fleetCtx).
	fleetCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.Serve == nil {
		fleetCtx = ctx
	}
	// Every progress line goes through hb, which adds a status line
	// whenever nothing was written for a second.
	hb := &heartbeat{out: cfg.Progress, last: time.Now()}
	defer hb.start()()
	cfg.Progress = hb
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "demo: "+format+"\n", args...) }
	began := time.Now()
	hb.setStatus(func() string {
		return fmt.Sprintf("starting the broker and %d workers (%s)", cfg.Workers, time.Since(began).Round(time.Second))
	})

	b, where, err := openBroker(ctx, cfg)
	if err != nil {
		return Report{}, err
	}
	defer b.Close()
	dir, err := os.MkdirTemp("", "joiner-demo-")
	if err != nil {
		return Report{}, fmt.Errorf("creating the state dir: %w", err)
	}
	defer os.RemoveAll(dir)
	say("%s at %s; topics %s, %s, %s, %s with %d partitions", where, strings.Join(b.Addrs, ","),
		b.Topics.Market, b.Topics.Notifications, b.Topics.Alerts, b.Topics.DeadLetter, cfg.Partitions)

	names := make([]string, cfg.Workers)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%d", i+1)
	}
	f, err := startFleet(fleetCtx, b, dir, node.Config{
		JoinConfig:   node.JoinConfig{Fields: cfg.Fields, Grace: cfg.Grace},
		MemberConfig: node.MemberConfig{Assignor: cfg.Assignor},
		Logger:       cfg.Logger,
		ExactlyOnce:  cfg.ExactlyOnce,
	}, names)
	b.ReadCommitted = b.ReadCommitted || cfg.ExactlyOnce
	if err != nil {
		return Report{}, err
	}
	defer f.stop()
	hb.setStatus(func() string {
		return fmt.Sprintf("waiting for %d workers to form a stable group (%s)", cfg.Workers, time.Since(began).Round(time.Second))
	})
	gen, err := WaitStable(ctx, cfg.Timeout, b.Partitions, func() map[string]*node.Node { return f.workers })
	if err != nil {
		return Report{}, err
	}
	say("%d workers joined the group (generation %d, assignor %s)", cfg.Workers, gen, cfg.Assignor)

	sum, alerts, elapsed, err := produceAndCollect(ctx, cfg, b, hb, say)
	if err != nil {
		return Report{}, err
	}
	// An alert is counted right after Kafka acknowledges it: wait for the
	// counters to catch up with what was read.
	rep := f.report(cfg, sum.Notifications, alerts.Records)
	// Not backoff.Do: a poll of the counters with a deadline, nothing fails and is retried.
	for deadline := time.Now().Add(5 * time.Second); rep.total() < int64(alerts.Distinct()) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		rep = f.report(cfg, sum.Notifications, alerts.Records)
	}
	rep.Elapsed = elapsed
	if cfg.Serve != nil {
		pages := make([]WorkerPage, 0, len(names))
		for _, name := range names {
			pages = append(pages, WorkerPage{Instance: name, URL: f.workers[name].StatusURL()})
		}
		cfg.Serve(rep, pages)
		<-fleetCtx.Done()
	}
	return rep, nil
}

// openBroker is the demo's broker: cfg.Brokers' cluster (topics and a
// group named for the run), or an embedded one; where names which.
func openBroker(ctx context.Context, cfg Config) (b *Broker, where string, err error) {
	if len(cfg.Brokers) > 0 {
		b, err = UseBrokers(ctx, cfg.Brokers, cfg.Partitions, cfg.ReplicationFactor, cfg.Transport)
		return b, "cluster", err
	}
	b, err = StartBroker(cfg.Partitions)
	return b, "embedded broker", err
}

// produceAndCollect runs the load generator on b while it reads the
// alerts back, until every notification has one; elapsed runs from the
// first record produced to the last alert read.
func produceAndCollect(ctx context.Context, cfg Config, b *Broker, hb *heartbeat, say func(string, ...any)) (sum loadgen.Summary, alerts *Alerts, elapsed time.Duration, err error) {
	// Alerts are read (and, on the embedded broker, deleted once read)
	// while the load generator runs, so that neither the broker nor this
	// process holds a million of them.
	want := cfg.Symbols * cfg.NotificationsPerSymbol
	alerts = NewAlerts()
	collectCtx, stopCollect := context.WithCancel(ctx)
	defer stopCollect()
	collected := make(chan error, 1)
	go func() {
		collected <- b.CollectAlertsInto(collectCtx, alerts, true, func(a *Alerts) bool { return a.Distinct() >= want })
	}()

	prog := newAlertProgress(cfg.Progress, want)
	hb.setStatus(func() string { return prog.line(alerts.Distinct()) })
	began := time.Now()
	sum, err = loadgen.Run(ctx, loadgen.Config{
		Brokers:                b.Addrs,
		Transport:              b.Transport,
		MarketTopic:            b.Topics.Market,
		NotificationsTopic:     b.Topics.Notifications,
		Symbols:                cfg.Symbols,
		TicksPerSymbol:         cfg.TicksPerSymbol,
		NotificationsPerSymbol: cfg.NotificationsPerSymbol,
		Progress:               cfg.Progress,
		DropIDs:                true,
		Fields:                 cfg.Fields,
		ExtraFields:            cfg.ExtraFields,
		Headers:                cfg.Headers,
	})
	if err != nil {
		stopCollect()
		<-collected
		return loadgen.Summary{}, nil, 0, err
	}
	// Until the last alert, hb prints prog's line every second.
	err = <-collected
	hb.setStatus(nil)
	if prog.lines > 0 {
		say("%s", prog.line(alerts.Distinct())) // the last one
	}
	if err != nil {
		return loadgen.Summary{}, nil, 0, fmt.Errorf("waiting for %d alerts (have %d): %w", want, alerts.Distinct(), err)
	}
	return sum, alerts, time.Since(began), nil
}

// alertProgress describes how many notifications have their alert, the
// rate since its previous line and how many remain.
type alertProgress struct {
	lines     int
	want      int
	start     time.Time
	last      time.Time
	lastCount int
}

func newAlertProgress(_ io.Writer, want int) *alertProgress {
	now := time.Now()
	return &alertProgress{want: want, start: now, last: now}
}

// line returns the progress line for have alerts (with its newline).
func (p *alertProgress) line(have int) string {
	now := time.Now()
	rate := float64(have-p.lastCount) / max(now.Sub(p.last).Seconds(), 1e-9)
	p.last, p.lastCount = now, have
	p.lines++
	return fmt.Sprintf("%d/%d notifications have their alert (%.1f%%), %.0f alerts/s, %d remaining, %s since the load began",
		have, p.want, 100*float64(have)/float64(max(p.want, 1)), rate, p.want-have, now.Sub(p.start).Round(100*time.Millisecond))
}

// heartbeat is the demo's progress writer: it passes lines through and,
// while a status is set, writes "demo: <status>" whenever nothing was
// written for a second.
type heartbeat struct {
	mu     sync.Mutex
	out    io.Writer
	last   time.Time
	status func() string
}

func (h *heartbeat) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = time.Now()
	return h.out.Write(p)
}

func (h *heartbeat) setStatus(f func() string) {
	h.mu.Lock()
	h.status = f
	h.mu.Unlock()
}

// start runs the heartbeat; the returned func stops it and waits for it.
func (h *heartbeat) start() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			h.mu.Lock()
			if h.status != nil && time.Since(h.last) >= 750*time.Millisecond {
				fmt.Fprintf(h.out, "demo: %s\n", h.status())
				h.last = time.Now()
			}
			h.mu.Unlock()
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (r Report) total() int64 { return r.Joins.Local + r.Joins.Remote + r.Joins.Miss }

func (f *fleet) report(cfg Config, notifications, alerts int) Report {
	rep := Report{Workers: cfg.Workers, Partitions: cfg.Partitions, Notifications: notifications, Alerts: alerts, PerWorker: []WorkerReport{}}
	for _, n := range f.workers {
		s := n.Processor().Stats()
		tasks := s.Tasks
		if tasks == nil {
			tasks = []int{}
		}
		rep.PerWorker = append(rep.PerWorker, WorkerReport{Instance: s.Instance, Tasks: tasks, Local: s.Local, Remote: s.Remote, Miss: s.Miss})
		rep.Joins.Local += s.Local
		rep.Joins.Remote += s.Remote
		rep.Joins.Miss += s.Miss
	}
	slices.SortFunc(rep.PerWorker, func(a, b WorkerReport) int { return strings.Compare(a.Instance, b.Instance) })
	return rep
}

// WriteTable prints the per-worker table and the total.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "worker\ttasks\tlocal\tremote\tmiss\t")
	for _, p := range r.PerWorker {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t\n", p.Instance, fmtTasks(p.Tasks), p.Local, p.Remote, p.Miss)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t\n", r.Partitions, r.Joins.Local, r.Joins.Remote, r.Joins.Miss)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d workers, %d partitions: %d notifications, %d alerts; %d/%d joined locally; %s from the first record produced to the last alert (%.0f notifications/s)\n",
		r.Workers, r.Partitions, r.Notifications, r.Alerts, r.Joins.Local, r.total(),
		r.Elapsed.Round(time.Millisecond), float64(r.Notifications)/max(r.Elapsed.Seconds(), 1e-9))
	return err
}

// WriteJSON writes the report as one line of JSON.
func (r Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func fmtTasks(ts []int) string {
	if len(ts) == 0 {
		return "-"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = fmt.Sprint(t)
	}
	return strings.Join(s, ",")
}
