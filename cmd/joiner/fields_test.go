package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/demo"
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
