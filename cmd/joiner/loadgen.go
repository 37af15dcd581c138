package main

import (
	"context"
	"errors"
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
func runLoadgen(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("loadgen", "loadgen [flags]", stdout, stderr)
	fs.env = true
	var (
		cfg     loadgen.Config
		brokers string
	)
	fs.StringVar(&brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&cfg.MarketTopic, "market-topic", record.DefaultMarketTopic, "topic of price ticks")
	fs.StringVar(&cfg.NotificationsTopic, "notifications-topic", record.DefaultNotificationsTopic, "topic of notifications")
	fs.IntVar(&cfg.Symbols, "symbols", loadgen.DefaultSymbols, "number of symbols")
	fs.IntVar(&cfg.TicksPerSymbol, "ticks-per-symbol", 1, "price ticks per symbol")
	fs.IntVar(&cfg.NotificationsPerSymbol, "notifications-per-symbol", 3, "notifications per symbol")
	fs.IntVar(&cfg.Malformed, "malformed", 0, "malformed notifications to add (they go to the dead-letter topic)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "records per second; 0 is as fast as possible")
	fs.StringVar(&cfg.RunID, "run-id", "", "tag in notification ids, to keep several runs apart")
	fs.BoolVar(&cfg.Transactional, "transactional", false, "write each chunk of records in one Kafka transaction")
	fs.IntVar(&cfg.AbortEvery, "abort-every", 0, "with --transactional, before every Nth transaction write decoy ticks and notifications in one that is aborted; 0 for none")
	fs.StringVar(&cfg.Fields.Symbol, "symbol-field", record.DefaultSymbolField, "name of the symbol member of ticks and notifications")
	fs.StringVar(&cfg.Fields.Price, "price-field", record.DefaultPriceField, "name of the price member of ticks")
	fs.BoolVar(&cfg.ExtraFields, "extra-fields", false, "notifications in five shapes with members of their own: nested values, long integers, escapes, members named like the join's")
	fs.IntVar(&cfg.NotificationBytes, "notification-bytes", 0, "pad each notification to at least this many bytes with a \"meta\" object member (0: no padding)")
	fs.BoolVar(&cfg.Headers, "headers", false, "headers on every notification: traceparent, tracestate, tenant, a repeated and an empty one")
	fs.DurationVar(&cfg.OutOfOrder, "out-of-order", 0, "stamp each tick up to this long before it is written: ticks out of timestamp order")
	sec := kafkasec.AddFlags(fs.FlagSet)
	fs.DurationVar(&cfg.RetryTimeout, "retry-timeout", loadgen.DefaultRetryTimeout, "how long failed writes are retried without progress before giving up")
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	if cfg.Symbols < 1 || cfg.TicksPerSymbol < 0 || cfg.NotificationsPerSymbol < 0 || cfg.Malformed < 0 || cfg.Rate < 0 || cfg.NotificationBytes < 0 {
		return fs.fail(2, errors.New("--symbols must be at least 1; counts and --rate must not be negative"))
	}
	err := validateLoadgen(fs.FlagSet, &cfg, splitList(brokers))
	if err == nil {
		err = sec.Validate()
	}
	if err != nil {
		return fs.fail(2, err)
	}
	cfg.Brokers = splitList(brokers)
	cfg.Progress = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Transport, err = sec.Connect(ctx, cfg.Brokers, fs.logger(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
		return fs.fail(1, err)
	}
	if _, err := loadgen.Run(ctx, cfg); err != nil {
		return fs.fail(1, err)
	}
	return 0
}
