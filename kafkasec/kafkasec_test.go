package kafkasec_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/kafkasec/kafkasectest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func noEnv(string) (string, bool) { return "", false }

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  kafkasec.Config
		want string // "" for valid
	}{
		{"plaintext", kafkasec.Config{}, ""},
		{"tls only", kafkasec.Config{TLS: true}, ""},
		{"mtls", kafkasec.Config{CertFile: "c", KeyFile: "k"}, ""},
		{"cert without key", kafkasec.Config{CertFile: "c"}, "KeyFile"},
		{"key without cert", kafkasec.Config{KeyFile: "k"}, "CertFile"},
		{"scram", kafkasec.Config{SASLMechanism: "SCRAM-SHA-512", SASLUsername: "u"}, ""},
		{"lower-case mechanism", kafkasec.Config{SASLMechanism: "scram-sha-256", SASLUsername: "u"}, ""},
		{"plain", kafkasec.Config{SASLMechanism: "PLAIN", SASLUsername: "u"}, ""},
		{"unknown mechanism", kafkasec.Config{SASLMechanism: "GSSAPI", SASLUsername: "u"}, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"no user", kafkasec.Config{SASLMechanism: "PLAIN"}, "SASLUsername"},
		{"user without mechanism", kafkasec.Config{SASLUsername: "u"}, "SASLMechanism"},
		{"password file without mechanism", kafkasec.Config{SASLPasswordFile: "f"}, "SASLMechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestTLSImpliedByAnyTLSFlag(t *testing.T) {
	for _, c := range []kafkasec.Config{{TLS: true}, {CAFile: "x"}, {CertFile: "x", KeyFile: "y"}, {ServerName: "x"}, {InsecureSkipVerify: true}} {
		if !c.TLSEnabled() {
			t.Errorf("%+v: TLS not enabled", c)
		}
	}
	if (&kafkasec.Config{SASLMechanism: "PLAIN"}).TLSEnabled() {
		t.Error("SASL alone enabled TLS")
	}
}

func TestPasswordSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(string) (string, bool) { return "from-env", true }
	base := kafkasec.Config{SASLMechanism: "PLAIN", SASLUsername: "u"}
	for _, tc := range []struct {
		name    string
		file    string
		env     func(string) (string, bool)
		want    string
		wantErr string
	}{
		{"file, newline trimmed", file, noEnv, "from-file", ""},
		{"file wins over env", file, env, "from-file", ""},
		{"env", "", env, "from-env", ""},
		{"neither", "", noEnv, "", "JOINER_SASL_PASSWORD"},
		{"empty file", empty, env, "", "is empty"},
		{"missing file", filepath.Join(dir, "nope"), env, "", "SASLPasswordFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.SASLPasswordFile, c.LookupEnv = tc.file, tc.env
			s, err := c.Build()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Build = %v, want an error mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// PLAIN's first message is "\x00user\x00password".
			_, ir, err := s.SASL.Start(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := string(ir); got != "\x00u\x00"+tc.want {
				t.Errorf("PLAIN initial response %q, want password %q", got, tc.want)
			}
		})
	}
}

func TestBuildTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := kafkasectest.NewCA(t, dir, "ca")
	_, certFile, keyFile := ca.Issue(t, dir, "client")
	notPEM := filepath.Join(dir, "not.pem")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)

	s, err := (&kafkasec.Config{CAFile: ca.File, CertFile: certFile, KeyFile: keyFile, ServerName: "kafka.internal"}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if s.TLS == nil || s.TLS.RootCAs == nil || len(s.TLS.Certificates) != 1 || s.TLS.ServerName != "kafka.internal" || s.SASL != nil {
		t.Errorf("built %+v", s)
	}
	if _, err := (&kafkasec.Config{CAFile: notPEM}).Build(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("CA file without PEM: %v", err)
	}
	if _, err := (&kafkasec.Config{CertFile: certFile, KeyFile: ca.File}).Build(); err == nil || !strings.Contains(err.Error(), "KeyFile") || strings.Contains(err.Error(), "%!") {
		t.Errorf("mismatched key: %v", err)
	}
	plain, err := (&kafkasec.Config{}).Build()
	if err != nil || plain.TLS != nil || plain.SASL != nil {
		t.Errorf("plaintext Build = %+v, %v", plain, err)
	}
	tr := plain.Transport()
	if tr.TLS != nil || tr.SASL != nil {
		t.Error("plaintext transport has TLS or SASL")
	}
}

// secure is a TLS + SASL broker shared by the connection tests.
func connect(t *testing.T, c kafkasec.Config, addr string) (time.Duration, error, string) {
	t.Helper()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	began := time.Now()
	tr, err := c.Connect(context.Background(), []string{addr}, log)
	took := time.Since(began)
	if err == nil {
		// The transport works for real requests.
		client := &kafka.Client{Addr: kafka.TCP(addr), Transport: tr, Timeout: 5 * time.Second}
		if _, err := client.Metadata(context.Background(), &kafka.MetadataRequest{}); err != nil {
			t.Errorf("metadata over the returned transport: %v", err)
		}
		tr.CloseIdleConnections()
	}
	return took, err, logs.String()
}

func TestConnectErrors(t *testing.T) {
	b := kafkasectest.Start(t, kfake.SeedTopics(1, "t"))
	good := kafkasec.Config{CAFile: b.CA.File, SASLMechanism: b.Mechanism, SASLUsername: b.User, SASLPasswordFile: b.PasswordFile, LookupEnv: noEnv}
	wrongPassword := "not-" + b.Password
	for _, tc := range []struct {
		name   string
		mod    func(*kafkasec.Config)
		is     error
		want   []string
		logged string
	}{
		{name: "good", mod: func(*kafkasec.Config) {}},
		{name: "password from env", mod: func(c *kafkasec.Config) {
			c.SASLPasswordFile = ""
			c.LookupEnv = func(k string) (string, bool) { return b.Password, k == kafkasec.PasswordEnv }
		}},
		{name: "wrong password", mod: func(c *kafkasec.Config) {
			c.SASLPasswordFile = ""
			c.LookupEnv = func(string) (string, bool) { return wrongPassword, true }
		}, is: kafkasec.ErrAuth, want: []string{"authentication failed", "SCRAM-SHA-512", `user "joiner"`, b.Addr}},
		{name: "wrong user", mod: func(c *kafkasec.Config) { c.SASLUsername = "mallory" },
			is: kafkasec.ErrAuth, want: []string{"SCRAM-SHA-512", `user "mallory"`}},
		{name: "wrong CA", mod: func(c *kafkasec.Config) { c.CAFile = b.WrongCA.File },
			is: kafkasec.ErrTLS, want: []string{b.Addr, "unknown authority", "CAFile"}},
		{name: "system roots", mod: func(c *kafkasec.Config) { c.CAFile, c.TLS = "", true },
			is: kafkasec.ErrTLS, want: []string{b.Addr, "unknown authority"}},
		{name: "name mismatch", mod: func(c *kafkasec.Config) { c.ServerName = "kafka.example.com" },
			is: kafkasec.ErrTLS, want: []string{b.Addr, `not valid for the name "kafka.example.com"`, "127.0.0.1", "ServerName"}},
		{name: "plaintext client", mod: func(c *kafkasec.Config) { *c = kafkasec.Config{} },
			is: kafkasec.ErrPlaintextToTLS, want: []string{b.Addr, "plaintext", "add TLS"}},
		{name: "SASL without TLS", mod: func(c *kafkasec.Config) { c.CAFile = "" },
			is: kafkasec.ErrPlaintextToTLS, want: []string{b.Addr, "plaintext", "add TLS"}},
		{name: "insecure skip verify", mod: func(c *kafkasec.Config) { c.CAFile, c.InsecureSkipVerify = "", true },
			logged: "--tls-insecure-skip-verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			took, err, logs := connect(t, c, b.Addr)
			if took > 10*time.Second {
				t.Errorf("took %s, want under 10s", took)
			}
			if tc.is == nil && err != nil {
				t.Fatalf("Connect = %v", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Connect = %v, want %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tc.logged != "" && !strings.Contains(logs, tc.logged) {
				t.Errorf("logs %q do not mention %q", logs, tc.logged)
			}
			for _, secret := range []string{b.Password, wrongPassword} {
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("the error holds the password: %v", err)
				}
				if strings.Contains(logs, secret) {
					t.Errorf("the logs hold the password: %s", logs)
				}
			}
			t.Logf("%s in %s: %v", tc.name, took.Round(time.Millisecond), err)
		})
	}
}

func TestConnectRefusedNamesBroker(t *testing.T) {
	_, err, _ := connect(t, kafkasec.Config{}, "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "check Brokers") {
		t.Errorf("Connect to a closed port = %v", err)
	}
}

func TestExplainUnknownErrorsKeepBrokerAndCause(t *testing.T) {
	s, err := (&kafkasec.Config{}).Build()
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("boom")
	got := s.Explain(fmt.Errorf("wrapped: %w", cause), "b:9092")
	if !errors.Is(got, cause) || !strings.Contains(got.Error(), "b:9092") {
		t.Errorf("Explain = %v", got)
	}
	if s.Explain(nil, "b") != nil {
		t.Error("Explain(nil) != nil")
	}
	// Already explained errors are returned as they are.
	e := fmt.Errorf("%w: x", kafkasec.ErrTLS)
	if s.Explain(e, "b") != e {
		t.Error("Explain re-wrapped an explained error")
	}
	var u x509.UnknownAuthorityError
	if !strings.Contains(s.Explain(u, "b:1").Error(), "unknown authority") {
		t.Error("unknown authority not recognised")
	}
}

// FlagName names, for every Config field a user sets, the flag AddFlags
// registers for it.
func TestFlagName(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	kafkasec.AddFlags(fs)
	registered := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { registered[f.Name] = true })
	named := map[string]bool{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[kafkasec.Config]()) {
		if f.Name == "LookupEnv" {
			continue
		}
		name := kafkasec.FlagName(f.Name)
		if !registered[name] {
			t.Errorf("FlagName(%q) = %q, which AddFlags does not register", f.Name, name)
		}
		named[name] = true
	}
	for name := range registered {
		if !named[name] {
			t.Errorf("flag --%s is the FlagName of no Config field", name)
		}
	}
}
