package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every subcommand parses with the one flag helper: -h and --help print the
// usage on stdout and exit 0 with nothing on stderr; a bad flag prints the
// error and the usage on stderr and exits 2 with nothing on stdout.
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
			!strings.Contains(stderr.String(), "usage: joiner "+name) {
			t.Errorf("joiner %s --no-such-flag: exit %d, stdout %q, stderr %q; want 2, nothing, the error and the usage", name, code, stdout.String(), stderr.String())
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
