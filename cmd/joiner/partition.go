package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/joiner-dev/joiner/murmur2"
)

const partitionUsage = `usage: joiner partition --partitions N [--hash] [--] KEY...

Prints one line per KEY, in input order: KEY<TAB>PARTITION, where PARTITION
is Kafka's default partition for the key, (murmur2(KEY) & 0x7fffffff) % N,
the same as the Java client and kafka-go's Murmur2Balancer choose. Keys are
the raw argument bytes. Flags may come before or after the keys; "--" ends
the flags, so keys that start with '-' can follow it.

Flags:
  --partitions N   number of partitions of the topic (>= 1, required)
  --hash           add a third column: the signed 32-bit murmur2 hash
`

// runPartition implements "joiner partition".
func runPartition(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("joiner partition", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, partitionUsage) }
	n := fs.Int("partitions", 0, "number of partitions (>= 1, required)")
	withHash := fs.Bool("hash", false, "print the signed 32-bit hash as a third column")

	keys, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2 // the flag package already printed the error and usage
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "joiner partition: %s\n\n%s", msg, partitionUsage)
		return 2
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "partitions" })
	if !set {
		return usageErr("--partitions is required")
	}
	if *n < 1 {
		return usageErr(fmt.Sprintf("--partitions must be at least 1, got %d", *n))
	}
	if len(keys) == 0 {
		return usageErr("no keys given")
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
		fmt.Fprintf(stderr, "joiner partition: writing output: %v\n", err)
		return 1
	}
	return 0
}

// parseInterspersed parses flags that may appear before, between or after
// the positional arguments, which it returns in order. Everything after a
// "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			// The flag package stopped at the terminator (a flag value of
			// "--" cannot occur: --partitions would reject it).
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
