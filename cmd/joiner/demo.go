package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/record"
)

// runDemo is `joiner demo`: embedded broker, workers and load generator in
// one process, with a report.
func runDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "demo [flags]", stdout, stderr)
	df := addDemoFlags(fs)
	sec := kafkasec.AddFlags(fs.FlagSet)
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	cfg, asJSON, verbose, serve, guarantee, brokers := df.cfg, df.asJSON, df.verbose, df.serve, df.guarantee, df.brokers
	cfg.Brokers = splitList(brokers)
	eos, err := parseGuarantee(guarantee)
	if err != nil {
		return fs.fail(2, err)
	}
	cfg.ExactlyOnce = eos
	if err := cfg.Validate(); err != nil {
		return fs.fail(2, err)
	}
	if err := sec.Validate(); err != nil {
		return fs.fail(2, err)
	}
	if len(cfg.Brokers) == 0 && (sec.TLSEnabled() || sec.SASLMechanism != "") {
		return fs.fail(2, errors.New("the --tls-* and --sasl-* flags are for a cluster given with --brokers; the embedded broker is plaintext"))
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = fs.logger(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Progress = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(cfg.Brokers) > 0 {
		tr, err := sec.Connect(ctx, cfg.Brokers, cfg.Logger)
		if err != nil {
			return fs.fail(1, err)
		}
		cfg.Transport = tr
	}
	report := func(rep demo.Report) error {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		if asJSON {
			return rep.WriteJSON(stdout)
		}
		return nil
	}
	var reportErr error
	if serve {
		cfg.Serve = func(rep demo.Report, pages []demo.WorkerPage) {
			reportErr = report(rep)
			fmt.Fprintln(stdout, "status pages (the workers keep running; Ctrl-C stops them):")
			for _, p := range pages {
				fmt.Fprintf(stdout, "  %s  %s\n", p.Instance, p.URL)
			}
		}
	}
	rep, err := demo.Run(ctx, cfg)
	if err != nil {
		return fs.fail(1, err)
	}
	if serve {
		if reportErr != nil {
			return 1
		}
		return 0
	}
	if err := report(rep); err != nil {
		return 1
	}
	return 0
}

// demoFlags are the values of joiner demo's own flags.
type demoFlags struct {
	cfg                    demo.Config
	brokers                string
	asJSON, verbose, serve bool
	// guarantee is --processing-guarantee.
	guarantee string
}

// addDemoFlags defines joiner demo's flags (but the security ones) on fs,
// with demo.DefaultConfig's values as their defaults.
func addDemoFlags(fs *cmdFlags) *demoFlags {
	def := demo.DefaultConfig()
	df := &demoFlags{cfg: def}
	fs.StringVar(&df.brokers, "brokers", "", "run on this Kafka cluster (comma-separated bootstrap brokers) instead of the embedded broker; topics and group are created for the run and the topics deleted after it")
	fs.IntVar(&df.cfg.ReplicationFactor, "replication-factor", 1, "replication factor of the topics created with --brokers")
	fs.IntVar(&df.cfg.Workers, "workers", def.Workers, "workers to run; with more workers than partitions some sit idle")
	fs.IntVar(&df.cfg.Partitions, "partitions", def.Partitions, "partitions of every topic")
	fs.IntVar(&df.cfg.Symbols, "symbols", def.Symbols, "number of symbols")
	fs.IntVar(&df.cfg.TicksPerSymbol, "ticks-per-symbol", def.TicksPerSymbol, "price ticks per symbol")
	fs.IntVar(&df.cfg.NotificationsPerSymbol, "notifications-per-symbol", def.NotificationsPerSymbol, "notifications per symbol")
	fs.StringVar(&df.cfg.Assignor, "assignor", def.Assignor, "leader's plan: "+group.AssignorList())
	fs.DurationVar(&df.cfg.Timeout, "timeout", def.Timeout, "give up after this long")
	fs.StringVar(&df.cfg.Fields.Symbol, "symbol-field", record.DefaultSymbolField, "name of the symbol member of ticks and notifications")
	fs.StringVar(&df.cfg.Fields.Price, "price-field", record.DefaultPriceField, "name of the price member of ticks")
	fs.BoolVar(&df.cfg.ExtraFields, "extra-fields", false, "notifications in five shapes with members of their own (see joiner loadgen)")
	fs.BoolVar(&df.cfg.Headers, "headers", false, "headers on every notification (see joiner loadgen)")
	fs.DurationVar(&df.cfg.Grace, "grace", 0, "the workers' --grace")
	fs.StringVar(&df.guarantee, "processing-guarantee", atLeastOnce, "the workers' --processing-guarantee: at-least-once, or exactly-once (the report then reads the alerts read_committed)")
	fs.BoolVar(&df.asJSON, "json", false, "end with the report as one line of JSON")
	fs.BoolVar(&df.verbose, "verbose", false, "show the workers' logs")
	fs.BoolVar(&df.serve, "serve", false, "keep the workers running after the report and print each worker's status page URL; stop with Ctrl-C")
	return df
}
