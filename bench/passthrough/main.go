// Command passthrough is the ceiling contestant of scripts/bench: joiner's
// own kafka-go read and write paths with no decode and no join.
// It copies every record of the input topic, from the first offset, to the
// output topic (same key and value), per partition as joiner's tasks: a
// reader goroutine fetches with kafka.Client.Fetch (the parameters of
// join's partitionReader, package fetch) one batch ahead, as join's prefetch does, while
// the previous batch is written with joiner's producer (package produce,
// kafka-go's Client.Produce, as node.New builds it), waiting for the
// acknowledgement. It prints "ready UNIX_MS" when the first fetches start and runs
// until SIGTERM or SIGINT.
//
// With --pad-bytes N every copied value gets N trailing ASCII spaces (a
// JSON value stays valid JSON): the same client work with an output as
// large as joiner's alerts, to tell the broker's cost of the bytes from
// the join's (scripts/bench's passthrough-alertsize contestant).
//
// With --consume-only it reads one partition (--partition) from its first
// offset to the end offset taken at start, as a restore does, and prints
// "consumed N records in D (R records/s)": the raw-consume baseline of the
// restore figure.
//
//	passthrough --brokers host:port --input notifications --output out
//	passthrough --brokers host:port --input market --consume-only --partition 0
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/fetch"
	"github.com/joiner-dev/joiner/internal/gctune"
	"github.com/joiner-dev/joiner/produce"
	"github.com/segmentio/kafka-go"
)

func main() {
	var (
		brokers, input, output string
		consumeOnly            bool
		partition              int
		maxWait                time.Duration
		padBytes               int
	)
	flag.StringVar(&brokers, "brokers", "localhost:9092", "bootstrap brokers, comma-separated")
	flag.StringVar(&input, "input", "notifications", "topic to read")
	flag.StringVar(&output, "output", "", "topic to copy to (required unless --consume-only)")
	flag.BoolVar(&consumeOnly, "consume-only", false, "read --partition to its end offset, print the rate and exit")
	flag.IntVar(&partition, "partition", 0, "partition read by --consume-only")
	flag.DurationVar(&maxWait, "fetch-max-wait", 250*time.Millisecond, "long-poll time of a fetch (joiner's default)")
	flag.IntVar(&padBytes, "pad-bytes", 0, "ASCII spaces appended to every copied value (0: values copied as they are)")
	flag.Parse()
	if padBytes < 0 {
		fmt.Fprintln(os.Stderr, "passthrough: --pad-bytes must not be negative")
		os.Exit(2)
	}
	gctune.Apply() // joiner's GC target: the ceiling runs as joiner does
	if !consumeOnly && output == "" {
		fmt.Fprintln(os.Stderr, "passthrough: --output is required (or --consume-only)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addrs := strings.Split(brokers, ",")
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}
	var err error
	if consumeOnly {
		err = consume(ctx, client, input, partition, maxWait)
	} else {
		err = copyAll(ctx, client, addrs, input, output, maxWait, padBytes)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "passthrough: %v\n", err)
		os.Exit(1)
	}
}

// copyAll copies every partition of input to output until ctx ends, each
// value followed by pad spaces.
func copyAll(ctx context.Context, client *kafka.Client, addrs []string, input, output string, maxWait time.Duration, pad int) error {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{input}})
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", input, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		return fmt.Errorf("topic %s: not found (%v)", input, md.Topics)
	}
	// node.New's producer for alerts (each message names its topic).
	w, err := produce.New(produce.Config{Addr: kafka.TCP(addrs...)})
	if err != nil {
		return err
	}
	defer w.Close()
	// join's read path: one Fetch per broker for every partition
	// (fetch.Mux), its records decoded by fetch.RawRecords.
	mux := fetch.NewMux(client)
	defer mux.Close()
	fmt.Printf("ready %d\n", time.Now().UnixMilli())
	var wg sync.WaitGroup
	errs := make(chan error, len(md.Topics[0].Partitions))
	for _, p := range md.Topics[0].Partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- copyPartition(ctx, mux, w, input, output, p.ID, maxWait, pad)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return ctx.Err()
}

func copyPartition(ctx context.Context, client fetch.Client, w *produce.Producer, topic, output string, p int, maxWait time.Duration, pad int) error {
	r := fetch.NewReader(client, topic, p, -1, maxWait, nil) // join's reader
	// As join's prefetch: one goroutine fetches ahead (one batch buffered)
	// while the previous batch is written.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // first: ends the fetcher
	batches := make(chan []fetch.Record, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(batches)
		for ctx.Err() == nil {
			recs, _, err := r.FetchRetrying(ctx, func(err error) {
				fmt.Fprintf(os.Stderr, "passthrough: %v; retrying\n", err)
			})
			if err != nil {
				return
			}
			if len(recs) == 0 {
				continue
			}
			select {
			case batches <- recs:
			case <-ctx.Done():
			}
		}
	}()
	var padded []byte // the padded values of one batch, reused: WriteMessages has copied them when it returns
	spaces := bytes.Repeat([]byte{' '}, pad)
	for recs := range batches {
		msgs := make([]kafka.Message, len(recs))
		for i, rec := range recs {
			msgs[i] = kafka.Message{Topic: output, Key: rec.Key, Value: rec.Value}
		}
		if pad > 0 {
			padded = padValues(padded, msgs, spaces)
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("writing %d records read from %s-%d: %w", len(msgs), topic, p, err)
		}
	}
	return ctx.Err()
}

// padValues replaces every message's value with the value followed by
// pad, all carved from buf (grown at most once, reused across batches),
// and returns buf for the next batch. The values must not alias buf.
func padValues(buf []byte, msgs []kafka.Message, pad []byte) []byte {
	n := 0
	for i := range msgs {
		n += len(msgs[i].Value) + len(pad)
	}
	buf = slices.Grow(buf[:0], n) // the slices taken below stay valid: no append reallocates
	for i := range msgs {
		start := len(buf)
		buf = append(append(buf, msgs[i].Value...), pad...)
		msgs[i].Value = buf[start:len(buf):len(buf)]
	}
	return buf
}

// consume reads partition p of topic from its first offset to the end
// offset taken now, and prints the rate.
func consume(ctx context.Context, client *kafka.Client, topic string, p int, maxWait time.Duration) error {
	r := fetch.NewReader(client, topic, p, -1, maxWait, nil) // join's reader
	end, err := listOffset(ctx, client, topic, p, kafka.LastOffset)
	if err != nil {
		return err
	}
	start := time.Now()
	n := 0
	for r.Next < end {
		recs, err := r.Fetch(ctx)
		if err != nil {
			return err
		}
		n += len(recs)
	}
	d := time.Since(start)
	fmt.Printf("consumed %d records in %s (%.0f records/s)\n", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	return nil
}

func listOffset(ctx context.Context, c *kafka.Client, topic string, partition int, which int64) (int64, error) {
	return fetch.ListOffset(ctx, c, topic, partition, which)
}
