package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/kafkasec/kafkasectest"
	"github.com/joiner-dev/joiner/testsupport/testkit"
)

var securityFlags = []string{"tls", "tls-ca-file", "tls-cert-file", "tls-key-file", "tls-server-name",
	"tls-insecure-skip-verify", "sasl-mechanism", "sasl-username", "sasl-password-file"}

// Every Kafka subcommand takes the security flags, run and loadgen also
// as JOINER_* variables, and -h shows no password even when one is set.
func TestSecurityFlagsInHelp(t *testing.T) {
	const password = "hunter2-in-the-environment"
	t.Setenv(kafkasec.PasswordEnv, password)
	t.Setenv("JOINER_SASL_USERNAME", "alice")
	for _, cmd := range []string{"run", "loadgen", "demo"} {
		var stdout, stderr bytes.Buffer
		if code := dispatch([]string{cmd, "-h"}, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		help := stdout.String() + stderr.String()
		for _, f := range securityFlags {
			if !strings.Contains(help, "--"+f+" ") && !strings.Contains(help, "--"+f+"\n") {
				t.Errorf("%s -h does not list --%s", cmd, f)
			}
			if cmd != "demo" && !strings.Contains(help, "$"+envName(f)) {
				t.Errorf("%s -h does not name $%s", cmd, envName(f))
			}
		}
		if !strings.Contains(help, kafkasec.PasswordEnv) {
			t.Errorf("%s -h does not mention %s", cmd, kafkasec.PasswordEnv)
		}
		if strings.Contains(help, password) {
			t.Errorf("%s -h shows the password", cmd)
		}
	}
	var stderr bytes.Buffer
	dispatch([]string{"run", "-h"}, nil, &stderr, &stderr)
	for _, f := range []string{"peer-token-file", "http-tls-cert-file", "http-tls-key-file", "http-tls-ca-file"} {
		if !strings.Contains(stderr.String(), "--"+f) {
			t.Errorf("run -h does not list --%s", f)
		}
	}
}

func TestSecurityUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--sasl-mechanism", "GSSAPI", "--sasl-username", "u"},
		{"loadgen", "--sasl-mechanism", "PLAIN"},
		{"run", "--tls-cert-file", "c.pem"},
		{"demo", "--tls"},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(args, nil, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, stderr.String())
		}
	}
}

// A wrong password, a wrong CA and a plaintext client each stop run,
// loadgen and demo at once with exit 1 and an error that names the broker
// and the cause, and never the password.
func TestSecurityFailuresExit1Quickly(t *testing.T) {
	b := kafkasectest.Start(t)
	wrongPW := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrongPW, []byte("not-"+b.Password), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		flags []string
		want  []string
	}{
		{"wrong password", []string{"--tls-ca-file", b.CA.File, "--sasl-mechanism", b.Mechanism, "--sasl-username", b.User, "--sasl-password-file", wrongPW},
			[]string{"authentication failed", b.Mechanism, `"joiner"`, b.Addr}},
		{"wrong CA", []string{"--tls-ca-file", b.WrongCA.File, "--sasl-mechanism", b.Mechanism, "--sasl-username", b.User, "--sasl-password-file", b.PasswordFile},
			[]string{"TLS handshake failed", b.Addr, "unknown authority"}},
		{"plaintext", nil, []string{"plaintext", b.Addr, "--tls"}},
		{"SASL without TLS", []string{"--sasl-mechanism", b.Mechanism, "--sasl-username", b.User, "--sasl-password-file", b.PasswordFile},
			[]string{"plaintext", b.Addr, "add --tls"}},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"run", "loadgen", "demo"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				args := append([]string{cmd, "--brokers", b.Addr}, tc.flags...)
				if cmd == "run" {
					args = append(args, "--state-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--log-level", "debug")
				}
				var stdout, stderr bytes.Buffer
				began := time.Now()
				code := dispatch(args, nil, &stdout, &stderr)
				took := time.Since(began)
				out := stdout.String() + stderr.String()
				if code != 1 {
					t.Errorf("exit %d, want 1; output:\n%s", code, out)
				}
				if took > 10*time.Second {
					t.Errorf("took %s, want under 10s", took)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("output does not say %q:\n%s", w, out)
					}
				}
				if strings.Contains(out, b.Password) {
					t.Errorf("output holds the password:\n%s", out)
				}
			})
		}
	}
}

// `joiner demo --brokers` over TLS + SASL gives the four-worker demo's 30/30 local,
// with the password only in the environment and nowhere in the output.
func TestDemoOverSASLSSL(t *testing.T) {
	b := kafkasectest.Start(t)
	t.Setenv(kafkasec.PasswordEnv, b.Password)
	// --verbose: the workers log to stderr from their goroutines.
	var stdout, stderr testkit.LogBuffer
	args := []string{"demo", "--brokers", b.Addr, "--tls-ca-file", b.CA.File, "--sasl-mechanism", b.Mechanism,
		"--sasl-username", b.User, "--json", "--verbose", "--timeout", "60s"}
	if code := dispatch(args, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	var rep struct {
		Alerts int `json:"alerts"`
		Joins  struct{ Local, Remote, Miss int }
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Alerts != 30 || rep.Joins.Local != 30 {
		t.Errorf("alerts %d, local joins %d; want 30 and 30", rep.Alerts, rep.Joins.Local)
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, b.Password) {
		t.Errorf("output holds the password")
	}
	if !strings.Contains(stderr.String(), "SCRAM-SHA-512 as joiner") {
		t.Errorf("--verbose does not log the connection security:\n%s", stderr.String())
	}
}
