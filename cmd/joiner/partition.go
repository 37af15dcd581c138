package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/joiner-dev/joiner/murmur2"
)

const partitionAbout = `Prints one line per KEY, in input order: KEY<TAB>PARTITION, where PARTITION
is Kafka's default partition for the key, (murmur2(KEY) & 0x7fffffff) % N,
the same as the Java client and kafka-go's Murmur2Balancer choose. Keys are
the raw argument bytes. Flags may come before or after the keys; "--" ends
the flags, so keys that start with '-' can follow it.

`

// runPartition implements "joiner partition".
func runPartition(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("partition", "partition --partitions N [--hash] [--] KEY...", stdout, stderr)
	fs.about, fs.positional = partitionAbout, true
	n := fs.Int("partitions", 0, "number `N` of partitions of the topic (>= 1, required)")
	withHash := fs.Bool("hash", false, "add a third column: the signed 32-bit murmur2 hash")
	keys, status, ok := fs.parse(args)
	if !ok {
		return status
	}
	switch {
	case !fs.given("partitions"):
		return fs.usageError("--partitions is required")
	case *n < 1:
		return fs.usageError(fmt.Sprintf("--partitions must be at least 1, got %d", *n))
	case len(keys) == 0:
		return fs.usageError("no keys given")
	}

	w := bufio.NewWriter(stdout)
	for _, k := range keys {
		key := []byte(k)
		line := k + "\t" + strconv.Itoa(murmur2.Partition(key, *n))
		if *withHash {
			line += "\t" + strconv.FormatInt(int64(murmur2.Hash(key)), 10)
		}
		w.WriteString(line + "\n")
	}
	if err := w.Flush(); err != nil {
		return fs.fail(1, fmt.Errorf("writing output: %w", err))
	}
	return 0
}
