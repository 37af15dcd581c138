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
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/segmentio/kafka-go"
)

// runLeave is `joiner leave`: KIP-345's admin removal of a static member,
// for a worker stopped without --leave-on-shutdown that will not return.
func runLeave(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("leave", "leave --brokers B --group G --instance-id X [flags]", stdout, stderr)
	var brokers, groupID, instance string
	var timeout time.Duration
	fs.StringVar(&brokers, "brokers", "localhost:9092", "Kafka bootstrap brokers, comma-separated")
	fs.StringVar(&groupID, "group", "joiner", "consumer group id")
	fs.StringVar(&instance, "instance-id", "", "instance id of the member to remove (required)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the coordinator")
	sec := kafkasec.AddFlags(fs.FlagSet)
	// No environment: inside a worker's pod JOINER_INSTANCE_ID names the
	// worker itself, and removing a member must be asked for explicitly.
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	switch {
	case instance == "":
		return fs.fail(2, errors.New("--instance-id is required (the instance id of the worker to remove)"))
	case len(splitList(brokers)) == 0:
		return fs.fail(2, errors.New("--brokers is empty"))
	}
	if err := sec.Validate(); err != nil {
		return fs.fail(2, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr, err := sec.Connect(ctx, splitList(brokers), fs.logger(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return fs.fail(1, err)
	}
	client := &kafka.Client{Addr: kafka.TCP(splitList(brokers)...), Timeout: timeout, Transport: tr}
	if err := group.RemoveMember(ctx, client, groupID, instance); err != nil {
		return fs.fail(1, err)
	}
	fmt.Fprintf(stdout, "removed instance %s from group %s; its tasks move to the other members now\n", instance, groupID)
	return 0
}
