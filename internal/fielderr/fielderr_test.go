package fielderr_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/internal/fielderr"
)

func flag(field string) string {
	return map[string]string{"StartupTimeout": "--startup-timeout", "Brokers": "--brokers", "Topics.Market": "--market-topic", "Pct": "100%"}[field]
}

func TestErrorAndRename(t *testing.T) {
	for _, tt := range []struct {
		format     string
		args       []any
		bare, cli  string
		wantFields []string
	}{
		{"no {Brokers} given", nil, "no Brokers given", "no --brokers given", []string{"Brokers"}},
		{"within {StartupTimeout} %s: %w; check {Brokers} or raise {StartupTimeout}", []any{"30s", io.EOF},
			"within StartupTimeout 30s: EOF; check Brokers or raise StartupTimeout",
			"within --startup-timeout 30s: EOF; check --brokers or raise --startup-timeout", []string{"StartupTimeout", "Brokers"}},
		{"{Topics.Market} is %q", []any{"{Brokers}"}, `Topics.Market is "{Brokers}"`, `--market-topic is "{Brokers}"`, []string{"Topics.Market"}},
		{"{Unknown} stays; {} {1x} {a.} { B} {", nil, "Unknown stays; {} {1x} {a.} { B} {", "Unknown stays; {} {1x} {a.} { B} {", []string{"Unknown"}},
		{"{Pct} of %d", []any{3}, "Pct of 3", "100% of 3", []string{"Pct"}},
	} {
		e := fielderr.Errorf(tt.format, tt.args...)
		if got := e.Error(); got != tt.bare {
			t.Errorf("Errorf(%q).Error() = %q, want %q", tt.format, got, tt.bare)
		}
		if got := e.Rename(flag); got != tt.cli {
			t.Errorf("Errorf(%q).Rename = %q, want %q", tt.format, got, tt.cli)
		}
		if !reflect.DeepEqual(e.Fields(), tt.wantFields) {
			t.Errorf("Errorf(%q).Fields() = %q, want %q", tt.format, e.Fields(), tt.wantFields)
		}
	}
}

// Wrapping works both ways: the field error wraps with %w, and Rename
// finds field errors anywhere in a wrapped tree.
func TestWrapped(t *testing.T) {
	inner := fielderr.Errorf("reading {PeerTokenFile}: %w", io.ErrUnexpectedEOF)
	if !errors.Is(inner, io.ErrUnexpectedEOF) {
		t.Error("the %w argument is not unwrapped")
	}
	outer := fmt.Errorf("node: %w", errors.Join(errors.New("first"), fmt.Errorf("starting: %w", inner)))
	name := func(f string) string { return map[string]string{"PeerTokenFile": "--peer-token-file"}[f] }
	if got, want := fielderr.Rename(outer, name), "node: first\nstarting: reading --peer-token-file: unexpected EOF"; got != want {
		t.Errorf("Rename = %q, want %q", got, want)
	}
	if got, want := fielderr.Rename(io.EOF, name), "EOF"; got != want {
		t.Errorf("Rename of a plain error = %q, want %q", got, want)
	}
	nested := fielderr.Errorf("{Brokers}: %w", fielderr.Errorf("raise {StartupTimeout}"))
	if got, want := fielderr.Rename(fmt.Errorf("x: %w", nested), flag), "x: --brokers: raise --startup-timeout"; got != want {
		t.Errorf("Rename of nested field errors = %q, want %q", got, want)
	}
}

// Names finds a field anywhere in a wrapped tree, and only there.
func TestNames(t *testing.T) {
	err := fmt.Errorf("starting: %w", fielderr.Errorf("x: %w (check {Brokers})", io.EOF))
	if !fielderr.Names(err, "Brokers") {
		t.Error("Names(Brokers) = false for a wrapped error that names it")
	}
	if fielderr.Names(err, "StartupTimeout") || fielderr.Names(io.EOF, "Brokers") || fielderr.Names(nil, "Brokers") {
		t.Error("Names reports a field no error names")
	}
}

// Handler names the fields of the errors a logger is given, in a record's
// attributes, in WithAttrs and inside groups; other values stay as they are.
func TestHandler(t *testing.T) {
	var out strings.Builder
	log := slog.New(fielderr.Handler(slog.NewTextHandler(&out, nil), flag))
	err := fmt.Errorf("dial: %w", fielderr.Errorf("refused (check {Brokers})"))
	log.With("setup", fielderr.Errorf("raise {StartupTimeout}")).Warn("retrying", "err", err, "n", 3,
		slog.Group("g", "cause", err))
	got := out.String()
	for _, want := range []string{`setup="raise --startup-timeout"`, `err="dial: refused (check --brokers)"`, "n=3", `g.cause="dial: refused (check --brokers)"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "Brokers") || strings.Contains(got, "StartupTimeout") {
		t.Errorf("log line names a field: %q", got)
	}
}
