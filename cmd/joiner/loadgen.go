package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/record"
)

// runLoadgen is `joiner loadgen`: produce ticks, then notifications.
func runLoadgen(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := newFlagSet("loadgen", "loadgen [flags]", stderr, true)
	var (
		cfg     loadgen.Config
		brokers string
	)
	fs.StringVar(&brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&cfg.MarketTopic, "market-topic", record.DefaultMarketTopic, "topic of price ticks")
	fs.StringVar(&cfg.NotificationsTopic, "notifications-topic", record.DefaultNotificationsTopic, "topic of notifications")
	fs.IntVar(&cfg.Symbols, "symbols", 10, "number of symbols")
	fs.IntVar(&cfg.TicksPerSymbol, "ticks-per-symbol", 1, "price ticks per symbol")
	fs.IntVar(&cfg.NotificationsPerSymbol, "notifications-per-symbol", 3, "notifications per symbol")
	fs.IntVar(&cfg.Malformed, "malformed", 0, "malformed notifications to add (they go to the dead-letter topic)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "records per second; 0 is as fast as possible")
	fs.StringVar(&cfg.RunID, "run-id", "", "tag in notification ids, to keep several runs apart")
	sec := kafkasec.AddFlags(fs)
	fs.DurationVar(&cfg.RetryTimeout, "retry-timeout", loadgen.DefaultRetryTimeout, "how long failed writes are retried without progress before giving up")
	if status, ok := parseFlags(fs, args, true); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "joiner loadgen: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if cfg.Symbols < 1 || cfg.TicksPerSymbol < 0 || cfg.NotificationsPerSymbol < 0 || cfg.Malformed < 0 || cfg.Rate < 0 {
		fmt.Fprintln(stderr, "joiner loadgen: --symbols must be at least 1; counts and --rate must not be negative")
		return 2
	}
	err := validateLoadgen(fs, &cfg, splitList(brokers))
	if err == nil {
		err = sec.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "joiner loadgen: %v\n", err)
		return 2
	}
	cfg.Brokers = splitList(brokers)
	cfg.Progress = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Transport, err = sec.Connect(ctx, cfg.Brokers, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
		fmt.Fprintf(stderr, "joiner loadgen: %v\n", err)
		return 1
	}
	if _, err := loadgen.Run(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "joiner loadgen: %v\n", err)
		return 1
	}
	return 0
}
