package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/segmentio/kafka-go"
)

// runLeave is `joiner leave`: KIP-345's admin removal of a static member,
// for a worker stopped without --leave-on-shutdown that will not return.
func runLeave(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("leave", "leave --brokers B --group G --instance-id X [flags]", stderr, false)
	var brokers, groupID, instance string
	var timeout time.Duration
	fs.StringVar(&brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&groupID, "group", "joiner", "consumer group id")
	fs.StringVar(&instance, "instance-id", "", "instance id of the member to remove (required)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the coordinator")
	sec := kafkasec.AddFlags(fs)
	// No environment: inside a worker's pod JOINER_INSTANCE_ID names the
	// worker itself, and removing a member must be asked for explicitly.
	if status, ok := parseFlags(fs, args, false); !ok {
		return status
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "joiner leave: unexpected argument %q\n", fs.Arg(0))
		return 2
	case instance == "":
		fmt.Fprintln(stderr, "joiner leave: --instance-id is required (the instance id of the worker to remove)")
		return 2
	case len(splitList(brokers)) == 0:
		fmt.Fprintln(stderr, "joiner leave: --brokers is empty")
		return 2
	}
	if err := sec.Validate(); err != nil {
		fmt.Fprintf(stderr, "joiner leave: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := sec.Connect(ctx, splitList(brokers), slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintf(stderr, "joiner leave: %v\n", err)
		return 1
	}
	client := &kafka.Client{Addr: kafka.TCP(splitList(brokers)...), Timeout: timeout, Transport: tr}
	if err := group.RemoveMember(ctx, client, groupID, instance); err != nil {
		fmt.Fprintf(stderr, "joiner leave: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "removed instance %s from group %s; its tasks move to the other members now\n", instance, groupID)
	return 0
}
