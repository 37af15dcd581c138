package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/internal/buildinfo"
)

// Every subcommand parses with the one flag helper: -h and --help print the
// usage on stdout and exit 0 with nothing on stderr; a bad flag prints one
// line on stderr, without the usage, and exits 2 with nothing on stdout.
func TestHelpOnStdout(t *testing.T) {
	for name := range commands() {
		for _, h := range []string{"-h", "--help"} {
			var stdout, stderr bytes.Buffer
			code := dispatch([]string{name, h}, strings.NewReader(""), &stdout, &stderr)
			if code != 0 || stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "usage: joiner "+name) ||
				!strings.Contains(stdout.String(), "\nFlags:\n  --") {
				t.Errorf("joiner %s %s: exit %d, stdout %q, stderr %q; want 0, the usage with its flags, nothing", name, h, code, stdout.String(), stderr.String())
			}
		}
		var stdout, stderr bytes.Buffer
		code := dispatch([]string{name, "--no-such-flag"}, strings.NewReader(""), &stdout, &stderr)
		if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "no-such-flag") ||
			strings.Contains(stderr.String(), "usage:") {
			t.Errorf("joiner %s --no-such-flag: exit %d, stdout %q, stderr %q; want 2, nothing, the error without the usage", name, code, stdout.String(), stderr.String())
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(args, nil, &stdout, &stderr); code != 0 || stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "usage: joiner <command>") {
			t.Errorf("joiner %s: exit %d, stdout %q, stderr %q", args[0], code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch(nil, nil, &stdout, &stderr); code != 2 || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "usage: joiner <command>") {
		t.Errorf("joiner: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, stdout.String(), stderr.String())
	}
}

// Arguments besides the flags are a usage error for the commands that take
// none.
func TestUnexpectedArgument(t *testing.T) {
	for _, name := range []string{"run", "loadgen", "demo", "leave", "assign"} {
		var stdout, stderr bytes.Buffer
		code := dispatch([]string{name, "extra"}, strings.NewReader(""), &stdout, &stderr)
		if want := "joiner " + name + `: unexpected argument "extra"`; code != 2 || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("joiner %s extra: exit %d, stdout %q, stderr %q; want 2 and %q", name, code, stdout.String(), stderr.String(), want)
		}
	}
}

// A flag error of any subcommand is one line: "joiner <name>:", the flag
// as the help spells it (--name), the form a value takes, and where the
// help is; exit 2 and nothing on stdout.
func TestFlagErrorsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--brokerz", "x"}, "joiner run: unknown flag --brokerz (see joiner run -h)"},
		{[]string{"run", "--session-timeout", "10"}, `joiner run: invalid value "10" for --session-timeout: want a duration with its unit, such as 10s (see joiner run -h)`},
		{[]string{"run", "--partitions", "six"}, `joiner run: invalid value "six" for --partitions: want an integer, such as 6 (see joiner run -h)`},
		{[]string{"run", "--create-topics=maybe"}, `joiner run: invalid value "maybe" for --create-topics: want true or false (or the flag alone for true) (see joiner run -h)`},
		{[]string{"run", "--brokers"}, "joiner run: --brokers needs a value (see joiner run -h)"},
		{[]string{"run", "--startup-timeout"}, "joiner run: --startup-timeout needs a value: a duration with its unit, such as 5m0s (see joiner run -h)"},
		{[]string{"loadgen", "--brokerz", "x"}, "joiner loadgen: unknown flag --brokerz (see joiner loadgen -h)"},
		{[]string{"loadgen", "--retry-timeout", "30"}, `joiner loadgen: invalid value "30" for --retry-timeout: want a duration with its unit, such as`},
		{[]string{"loadgen", "--rate", "fast"}, `joiner loadgen: invalid value "fast" for --rate: want a number, such as`},
		{[]string{"loadgen", "---x"}, `joiner loadgen: bad flag syntax "---x": flags are --name value or --name=value (see joiner loadgen -h)`},
		{[]string{"demo", "--brokerz", "x"}, "joiner demo: unknown flag --brokerz (see joiner demo -h)"},
		{[]string{"demo", "--timeout", "60"}, `joiner demo: invalid value "60" for --timeout: want a duration with its unit, such as`},
		{[]string{"demo", "--workers", "1.5"}, `joiner demo: invalid value "1.5" for --workers: want an integer, such as 4 (see joiner demo -h)`},
		{[]string{"assign", "--brokerz", "x"}, "joiner assign: unknown flag --brokerz (see joiner assign -h)"},
		{[]string{"partition", "--brokerz", "x"}, "joiner partition: unknown flag --brokerz (see joiner partition -h)"},
		{[]string{"partition", "--partitions", "six", "AAPL"}, `joiner partition: invalid value "six" for --partitions: want an integer, such as 1 (see joiner partition -h)`},
		{[]string{"partition", "AAPL"}, "joiner partition: --partitions is required (see joiner partition -h)"},
		{[]string{"leave", "--brokerz", "x"}, "joiner leave: unknown flag --brokerz (see joiner leave -h)"},
		{[]string{"leave", "--timeout", "10"}, `joiner leave: invalid value "10" for --timeout: want a duration with its unit, such as`},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(tc.args, strings.NewReader(""), &stdout, &stderr)
		got := stderr.String()
		if code != 2 || stdout.Len() != 0 || strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("joiner %s: exit %d, stdout %q, stderr %q; want 2, nothing, one line starting %q", strings.Join(tc.args, " "), code, stdout.String(), got, tc.want)
		}
		if strings.Contains(got, " -"+strings.TrimLeft(tc.args[1], "-")) {
			t.Errorf("joiner %s: %q spells a flag with one dash", strings.Join(tc.args, " "), got)
		}
	}
}

// `joiner help <command>` is `joiner <command> -h`; `joiner version` and
// `joiner --version` print the version, commit and Go version on stdout.
func TestHelpCommandAndVersion(t *testing.T) {
	for name := range commands() {
		var want, got, stderr bytes.Buffer
		dispatch([]string{name, "-h"}, strings.NewReader(""), &want, &stderr)
		code := dispatch([]string{"help", name}, strings.NewReader(""), &got, &stderr)
		if code != 0 || stderr.Len() != 0 || got.String() != want.String() {
			t.Errorf("joiner help %s: exit %d, stdout %q, stderr %q; want 0 and the usage of %s -h", name, code, got.String(), stderr.String(), name)
		}
	}
	bi := buildinfo.Get()
	want := "joiner " + bi.Version + "\ncommit " + bi.Revision + "\ngo     " + bi.GoVersion + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(args, nil, &stdout, &stderr); code != 0 || stderr.Len() != 0 || stdout.String() != want {
			t.Errorf("joiner %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], code, stdout.String(), stderr.String(), want)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string // stdout prefix, or stderr when code is 2
	}{
		{[]string{"version", "-h"}, 0, "usage: joiner version"},
		{[]string{"help", "version"}, 0, "usage: joiner version"},
		{[]string{"version", "extra"}, 2, `joiner version: unexpected argument "extra"`},
		{[]string{"help", "nope"}, 2, `joiner help: unknown command "nope"`},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(tc.args, nil, &stdout, &stderr)
		got := stdout.String()
		if tc.code == 2 {
			got = stderr.String()
		}
		if code != tc.code || !strings.HasPrefix(got, tc.out) {
			t.Errorf("joiner %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), tc.code, tc.out)
		}
	}
	var stdout bytes.Buffer
	dispatch([]string{"help"}, nil, &stdout, &stdout)
	if !strings.Contains(stdout.String(), "\n  version ") {
		t.Errorf("joiner help does not list version:\n%s", stdout.String())
	}
}

// A bad value from a JOINER_* variable is one line too, with the flag and
// the form its value takes.
func TestEnvValueErrorOneLine(t *testing.T) {
	t.Setenv("JOINER_SESSION_TIMEOUT", "10")
	var stdout, stderr bytes.Buffer
	code := dispatch([]string{"run"}, nil, &stdout, &stderr)
	want := `joiner run: invalid value "10" for JOINER_SESSION_TIMEOUT (--session-timeout): want a duration with its unit, such as 10s` + "\n"
	if code != 2 || stdout.Len() != 0 || stderr.String() != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout.String(), stderr.String(), want)
	}
}
