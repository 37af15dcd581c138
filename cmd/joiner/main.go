// Command joiner joins two co-partitioned Kafka topics locally.
//
// Each subcommand lives in its own file and only parses flags and wires
// packages together; all parse with the one helper in flags.go (-h prints
// the usage on stdout and exits 0, a usage error prints one line on stderr
// and exits 2):
//
//	joiner run        one worker (group member, state, join, HTTP)
//	joiner loadgen    produce ticks and notifications keyed by symbol
//	joiner demo       embedded broker + workers + loadgen, with a report
//	joiner assign     the co-partition planner on JSON input
//	joiner partition  Kafka's murmur2 partition of keys
//	joiner leave      remove a stopped static member from the group
//	joiner version    the version, commit and Go version (also --version)
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/joiner-dev/joiner/internal/buildinfo"
	"github.com/joiner-dev/joiner/internal/gctune"
)

// command is one subcommand. It returns the process exit status:
// 0 on success, 1 on a runtime failure and 2 on a usage error.
type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"run":       {"run one worker of the consumer group", runWorker},
		"loadgen":   {"produce ticks and notifications keyed by symbol", runLoadgen},
		"demo":      {"run workers and the load generator on an embedded broker", runDemo},
		"assign":    {"compute a sticky co-partition assignment from JSON", runAssign},
		"leave":     {"remove a stopped worker from the group for good", runLeave},
		"partition": {"print Kafka's murmur2 partition of each key", runPartition},
	}
}

func main() {
	gctune.Apply() // the GC's target: 200% unless GOGC is set
	defer exitOnPanic(os.Stderr, os.Exit)
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitOnPanic makes a panic of the main goroutine a runtime failure, exit
// 1 with one line and the stack, instead of Go's exit 2, which joiner
// keeps for usage errors. A panic in another goroutine cannot be caught
// here: the faults known to panic there (Pebble on a failed WAL write) are
// caught where they happen (statestore's faultFS).
func exitOnPanic(stderr io.Writer, exit func(int)) {
	if r := recover(); r != nil {
		fmt.Fprintf(stderr, "joiner: internal error: %v\n%s", r, debug.Stack())
		exit(1)
	}
}

func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "-h", "--help":
		usage(stdout, cmds)
		return 0
	case "help": // joiner help [command]
		if len(args) == 1 {
			usage(stdout, cmds)
			return 0
		}
		if _, ok := cmds[args[1]]; ok {
			return cmds[args[1]].run([]string{"-h"}, stdin, stdout, stderr)
		}
		if args[1] != "version" {
			fmt.Fprintf(stderr, "joiner help: unknown command %q (try: joiner help)\n", args[1])
			return 2
		}
		args = []string{"version", "-h"}
	case "--version":
		args[0] = "version"
	}
	if args[0] == "version" {
		return runVersion(args[1:], stdout, stderr)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "joiner: unknown command %q (try: joiner help)\n", args[0])
		return 2
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: joiner <command> [flags]")
	fmt.Fprintln(w)
	for _, name := range []string{"demo", "run", "loadgen", "assign", "partition", "leave"} {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "version", "print the version, commit and Go version (also --version)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'joiner <command> -h' or 'joiner help <command>' for the flags of a command.")
}

// runVersion is `joiner version`: what scripts/build stamped in, else the
// binary's build info (internal/buildinfo).
func runVersion(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprintln(stdout, "usage: joiner version\n\nPrints the version, the git commit and the Go version of the binary.")
		return 0
	case len(args) > 0:
		fmt.Fprintf(stderr, "joiner version: unexpected argument %q (see joiner version -h)\n", args[0])
		return 2
	}
	bi := buildinfo.Get()
	fmt.Fprintf(stdout, "joiner %s\ncommit %s\ngo     %s\n", bi.Version, bi.Revision, bi.GoVersion)
	return 0
}
