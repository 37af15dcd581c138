// Command kafkawait waits until a Kafka broker answers a Metadata request
// that lists at least one broker. scripts/kafka uses it after starting the
// broker; it is not part of the joiner binary. It takes joiner's broker
// security flags (--tls-*, --sasl-*), for scripts/kafka-secure.
//
// Exit status: 0 when the broker answered, 1 on timeout, 2 when the process
// named by -pid exited first (the broker died during startup).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/segmentio/kafka-go"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9092", "broker `host:port`")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	pid := flag.Int("pid", 0, "stop waiting when this process exits (0: do not watch)")
	sec := kafkasec.AddFlags(flag.CommandLine)
	flag.Parse()
	s, err := sec.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkawait: %v\n", err)
		os.Exit(1)
	}
	os.Exit(wait(*addr, *timeout, *pid, s.Transport()))
}

func wait(addr string, timeout time.Duration, pid int, transport *kafka.Transport) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 2 * time.Second, Transport: transport}
	var last error
	for {
		if pid > 0 && !alive(pid) {
			fmt.Fprintf(os.Stderr, "kafkawait: process %d exited before %s answered\n", pid, addr)
			return 2
		}
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		res, err := client.Metadata(attempt, &kafka.MetadataRequest{})
		cancelAttempt()
		switch {
		case err == nil && len(res.Brokers) > 0:
			return 0
		case err == nil:
			last = errors.New("metadata lists no brokers yet")
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "kafkawait: %s did not answer Metadata within %s: %v\n", addr, timeout, last)
			return 1
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	for i := len(stat) - 1; i > 0; i-- {
		if stat[i] == ')' {
			return i+2 >= len(stat) || stat[i+2] != 'Z'
		}
	}
	return true
}
