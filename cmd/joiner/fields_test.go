package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/demo"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/kafkasec/kafkasectest"
	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/node"
	"github.com/joiner-dev/joiner/statestore"
)

// The libraries' errors name Config fields; the CLI prints the flags.
func TestLibraryErrorsNameFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--tls-cert-file", "c.pem"}, "joiner run: --tls-cert-file and --tls-key-file go together"},
		{[]string{"loadgen", "--sasl-mechanism", "PLAIN"}, "joiner loadgen: --sasl-mechanism PLAIN needs --sasl-username\n"},
		{[]string{"demo", "--sasl-username", "u"}, "joiner demo: --sasl-username and --sasl-password-file need --sasl-mechanism"},
		{[]string{"demo", "--workers", "0"}, "joiner demo: --workers must be at least 1, got 0\n"},
		{[]string{"demo", "--ticks-per-symbol", "-1"}, "joiner demo: --ticks-per-symbol and --notifications-per-symbol must not be negative\n"},
		{[]string{"leave", "--instance-id", "x", "--brokers", "127.0.0.1:1", "--timeout", "5s"}, "(check --brokers and that the broker is up)\n"},
	} {
		var stdout, stderr bytes.Buffer
		dispatch(tt.args, nil, &stdout, &stderr)
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("joiner %s: stderr %q, want %q", strings.Join(tt.args, " "), stderr.String(), tt.want)
		}
	}
}

// Every field in fieldFlags is a field of node.Config, loadgen.Config,
// demo.Config or statestore.Options, and every flag it names is a flag of
// joiner run, loadgen or demo; a field set by two flags is named by both.
func TestFieldFlags(t *testing.T) {
	fields := map[string]bool{}
	for _, c := range []any{node.Config{}, loadgen.Config{}, demo.Config{}, statestore.Options{}} {
		for _, f := range reflect.VisibleFields(reflect.TypeOf(c)) {
			fields[f.Name] = true
		}
	}
	var help bytes.Buffer
	dispatch([]string{"run", "-h"}, nil, &help, &help)
	dispatch([]string{"loadgen", "-h"}, nil, &help, &help)
	dispatch([]string{"demo", "-h"}, nil, &help, &help)
	for field, flags := range fieldFlags {
		if !fields[field] {
			t.Errorf("fieldFlags[%q]: no such field in node.Config, loadgen.Config, demo.Config or statestore.Options", field)
		}
		for _, f := range flags {
			if !strings.Contains(help.String(), "\n  --"+f+" ") && !strings.Contains(help.String(), "\n  --"+f+"\n") {
				t.Errorf("fieldFlags[%q]: --%s is no flag of run, loadgen or demo", field, f)
			}
		}
	}
	run := newFlags("run", "run", &help, &help)
	run.String("http-tls-ca-file", "", "")
	run.String("tls-ca-file", "", "")
	if got, want := run.flagsOf("PeerCAFile"), "--http-tls-ca-file or --tls-ca-file"; got != want {
		t.Errorf("flagsOf(PeerCAFile) = %q, want %q", got, want)
	}
	if got, want := run.flagsOf("CAFile"), "--tls-ca-file"; got != want {
		t.Errorf("flagsOf(CAFile) = %q, want %q", got, want)
	}
	if got := run.flagsOf("RetryTimeout"); got != "" {
		t.Errorf("flagsOf(RetryTimeout) = %q on a command without --retry-timeout, want \"\"", got)
	}
}

// hintRE finds the hints of a line: a verb and the flag it tells to
// check, set, raise, give or add.
var hintRE = regexp.MustCompile(`\b(?:check|set|raise|give|add) (--[a-z-]+)`)

// checkUserOutput fails when out names a Config field that has a flag
// (fieldFlags, kafkasec's fields) instead of the flag, or when a line
// gives the same flag hint twice.
func checkUserOutput(t *testing.T, what, out string) {
	t.Helper()
	var fields []string
	for f := range fieldFlags {
		fields = append(fields, f)
	}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(kafkasec.Config{})) {
		if kafkasec.FlagName(f.Name) != "" && f.Name != "TLS" { // TLS is also the word
			fields = append(fields, f.Name)
		}
	}
	bare := regexp.MustCompile(`\b(?:` + strings.Join(fields, "|") + `)\b`)
	for _, line := range strings.Split(out, "\n") {
		if m := bare.FindString(line); m != "" {
			t.Errorf("%s: names the field %s, not its flag: %s", what, m, line)
		}
		seen := map[string]bool{}
		for _, m := range hintRE.FindAllStringSubmatch(line, -1) {
			if seen[m[1]] {
				t.Errorf("%s: the hint about %s is given twice: %s", what, m[1], line)
			}
			seen[m[1]] = true
		}
	}
}

// No user-facing output of the commands that reach Kafka names a Config
// field, in the final error or in the log lines before it (a retry's WARN),
// and no hint is repeated: brokers that do not answer, at start of run
// (retried until --startup-timeout), loadgen, demo and leave, over
// plaintext and TLS + SASL, and a rejected password.
func TestOutputNamesFlagsNotFields(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := dead.Addr().String()
	dead.Close()
	b := kafkasectest.Start(t)
	wrongPW := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrongPW, []byte("not-"+b.Password), 0o600); err != nil {
		t.Fatal(err)
	}
	secure := []string{"--tls-ca-file", b.CA.File, "--sasl-mechanism", b.Mechanism, "--sasl-username", b.User, "--sasl-password-file", b.PasswordFile}
	run := func(t *testing.T, brokers string, extra ...string) []string {
		// --state-dir is a comma-separated list, and t.TempDir's name
		// holds the subtest's ("run, no broker"): a dir of its own.
		dir, err := os.MkdirTemp("", "state")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return append([]string{"run", "--brokers", brokers, "--http-addr", "127.0.0.1:0", "--state-dir", dir,
			"--instance-id", "w1", "--startup-timeout", "1500ms"}, extra...)
	}
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"run, no broker", func(t *testing.T) []string { return run(t, closed) }, "check --brokers"},
		{"run, no broker, TLS + SASL", func(t *testing.T) []string { return run(t, closed, secure...) }, "check --brokers"},
		{"run, wrong password", func(t *testing.T) []string {
			return run(t, b.Addr, "--tls-ca-file", b.CA.File, "--sasl-mechanism", b.Mechanism, "--sasl-username", b.User, "--sasl-password-file", wrongPW)
		}, "check --sasl-username"},
		{"loadgen, no broker", func(*testing.T) []string { return []string{"loadgen", "--brokers", closed} }, "check --brokers"},
		{"demo, no broker", func(*testing.T) []string { return []string{"demo", "--brokers", closed} }, "check --brokers"},
		{"leave, no broker", func(*testing.T) []string {
			return []string{"leave", "--brokers", closed, "--instance-id", "w1", "--timeout", "2s"}
		}, "check --brokers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := dispatch(tc.args(t), nil, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 1 and output saying %q:\n%s", code, tc.want, out)
			}
			checkUserOutput(t, tc.name, out)
		})
	}
}
