package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// envName is the environment variable that sets a flag: JOINER_ and the
// flag name in upper case with '-' as '_' (--state-dir: JOINER_STATE_DIR).
func envName(flag string) string {
	return "JOINER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// cmdFlags is the flag set of one subcommand, the one flag helper every
// subcommand uses. -h prints the usage on stdout and exits 0; a bad flag
// prints one line on stderr, naming the flag (--name) and the form its
// value takes, and exits 2.
type cmdFlags struct {
	*flag.FlagSet
	synopsis string // after "usage: joiner "
	// about is printed between the usage line and the flags, ending in a
	// blank line when not empty.
	about string
	// env fills every flag not given on the command line from its JOINER_*
	// variable, and the usage names the variables.
	env bool
	// positional allows arguments besides the flags, before, between or
	// after them ("--" ends the flags); without it an argument is a usage
	// error, and argHint is added to its message.
	positional bool
	argHint    string

	stdout, stderr io.Writer
}

func newFlags(name, synopsis string, stdout, stderr io.Writer) *cmdFlags {
	f := &cmdFlags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis, stdout: stdout, stderr: stderr}
	f.SetOutput(io.Discard) // parse prints the error, in one line of its own
	f.Usage = func() {}     // and the usage only for -h
	return f
}

// parse parses args and returns the positional arguments. When it fails,
// it has printed what to print and returns ok=false and the exit status:
// 0 for -h, 2 for a usage error.
func (f *cmdFlags) parse(args []string) (positional []string, status int, ok bool) {
	var err error
	if f.positional {
		positional, err = parseInterspersed(f.FlagSet, args)
	} else if err = f.Parse(args); err == nil && f.NArg() > 0 {
		return nil, f.fail(2, fmt.Errorf("unexpected argument %q%s", f.Arg(0), f.argHint)), false
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.printUsage(f.stdout)
		return nil, 0, false
	case err != nil:
		return nil, f.usageError(f.flagError(err)), false
	}
	if f.env {
		if err := f.fillFromEnv(); err != nil {
			return nil, f.fail(2, err), false
		}
	}
	return positional, 0, true
}

// fillFromEnv sets every flag not given on the command line from its
// JOINER_* variable.
func (f *cmdFlags) fillFromEnv() error {
	given := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var bad error
	f.VisitAll(func(fl *flag.Flag) {
		if given[fl.Name] || bad != nil {
			return
		}
		if v, set := os.LookupEnv(envName(fl.Name)); set {
			if err := f.Set(fl.Name, v); err != nil {
				bad = fmt.Errorf("invalid value %q for %s: %v", v, envName(fl.Name), err)
				if form := valueForm(fl); form != "" {
					bad = fmt.Errorf("invalid value %q for %s (--%s): want %s", v, envName(fl.Name), fl.Name, form)
				}
			}
		}
	})
	return bad
}

// fail prints "joiner <name>: err" on stderr and returns status. The
// Config fields named by library errors are named by their flags.
func (f *cmdFlags) fail(status int, err error) int {
	fmt.Fprintf(f.stderr, "joiner %s: %s\n", f.Name(), f.message(err))
	return status
}

// usageError prints "joiner <name>: msg (see joiner <name> -h)", one
// line on stderr, and returns 2.
func (f *cmdFlags) usageError(msg string) int {
	fmt.Fprintf(f.stderr, "joiner %s: %s (see joiner %s -h)\n", f.Name(), msg, f.Name())
	return 2
}

// given reports whether the flag was set on the command line or by its
// JOINER_* variable.
func (f *cmdFlags) given(name string) bool { return flagGiven(f.FlagSet, name) }

func (f *cmdFlags) printUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: joiner %s\n\n%sFlags:\n", f.synopsis, f.about)
	f.VisitAll(func(fl *flag.Flag) {
		line := "  --" + fl.Name
		if name, _ := flag.UnquoteUsage(fl); name != "" {
			line += " " + name
		}
		fmt.Fprintln(w, line)
		_, usage := flag.UnquoteUsage(fl)
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" && fl.DefValue != "0s" {
			usage += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		if f.env {
			usage += " [$" + envName(fl.Name) + "]"
		}
		fmt.Fprintf(w, "        %s\n", usage)
	})
}

// parseInterspersed parses flags that may appear before, between or after
// the positional arguments, which it returns in order. Everything after a
// "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	pos := []string{}
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

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newLogger builds the process logger from --log-format and --log-level;
// it names the fields of the library errors it logs by f's flags.
func (f *cmdFlags) newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return f.logger(slog.NewTextHandler(w, opts)), nil
	case "json":
		return f.logger(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
	}
}
