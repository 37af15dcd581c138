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

// parseFlags parses args, then fills every flag not given on the command
// line from its JOINER_* environment variable. It returns the exit status
// to use when parsing failed (0 for -h, 2 for a usage error) and ok=false.
func parseFlags(fs *flag.FlagSet, args []string, env bool) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if !env {
		return 0, true
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || bad != nil {
			return
		}
		if v, set := os.LookupEnv(envName(f.Name)); set {
			if err := fs.Set(f.Name, v); err != nil {
				bad = fmt.Errorf("invalid value %q for %s: %v", v, envName(f.Name), err)
			}
		}
	})
	if bad != nil {
		fmt.Fprintf(fs.Output(), "joiner %s: %v\n", fs.Name(), bad)
		return 2, false
	}
	return 0, true
}

// newFlagSet returns a flag set for a subcommand whose usage lists the
// env variable of each flag when env is true.
func newFlagSet(name, synopsis string, stderr io.Writer, env bool) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: joiner %s\n\nFlags:\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			line := "  --" + f.Name
			if name, _ := flag.UnquoteUsage(f); name != "" {
				line += " " + name
			}
			fmt.Fprintln(stderr, line)
			usage := f.Usage
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			if env {
				usage += " [$" + envName(f.Name) + "]"
			}
			fmt.Fprintf(stderr, "        %s\n", usage)
		})
	}
	return fs
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

// newLogger builds the process logger from --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format must be text or json, got %q", format)
	}
}
