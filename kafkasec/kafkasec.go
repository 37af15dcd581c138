// Package kafkasec builds the security of joiner's Kafka connections from
// its --tls-* and --sasl-* flags: a *tls.Config, a SASL mechanism, and a
// kafka-go Transport and Dialer that use them. It also turns the failures
// of a secured connection (authentication, TLS handshake, a plaintext
// client on a TLS listener) into errors that say what to fix, and never
// puts the password in one.
//
// A subcommand wires it in with two calls:
//
//	sec := kafkasec.AddFlags(fs)                        // before fs.Parse
//	tr, err := sec.Connect(ctx, brokers, logger)        // after it; exit 1 on err
//
// and gives tr as the Transport of every kafka.Client and kafka.Writer it
// builds.
package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// PasswordEnv is the environment variable holding the SASL password when
// --sasl-password-file is not given. There is deliberately no flag that
// takes the password itself: command lines are visible to every user of
// the machine.
const PasswordEnv = "JOINER_SASL_PASSWORD"

// Mechanisms are the accepted values of --sasl-mechanism.
var Mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// CheckTimeout bounds Connect's first request to the brokers.
const CheckTimeout = 10 * time.Second

// Config is what the flags say. The zero value is a plaintext connection
// without authentication.
type Config struct {
	// TLS turns TLS on; any other TLS field implies it.
	TLS bool
	// CAFile is a PEM bundle of the CAs that may sign the brokers'
	// certificates. Default: the system roots.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key (mTLS).
	CertFile, KeyFile string
	// ServerName overrides the name the brokers' certificates are checked
	// against (and sent as SNI). Default: the host of each broker address.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. For tests only.
	InsecureSkipVerify bool

	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty for
	// no SASL.
	SASLMechanism string
	SASLUsername  string
	// SASLPasswordFile holds the password (trailing newline ignored).
	// Default: the JOINER_SASL_PASSWORD environment variable.
	SASLPasswordFile string

	// LookupEnv reads PasswordEnv. Default: os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// AddFlags registers the broker security flags on fs and returns the
// Config they fill.
func AddFlags(fs *flag.FlagSet) *Config {
	c := &Config{}
	fs.BoolVar(&c.TLS, "tls", false, "connect to the brokers over TLS; implied by any other --tls-* flag")
	fs.StringVar(&c.CAFile, "tls-ca-file", "", "PEM CA bundle that signs the brokers' certificates (default the system roots)")
	fs.StringVar(&c.CertFile, "tls-cert-file", "", "PEM client certificate, for brokers that require mTLS")
	fs.StringVar(&c.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&c.ServerName, "tls-server-name", "", "name to verify the brokers' certificates against (default the host of each broker address)")
	fs.BoolVar(&c.InsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate; for tests only, logs a warning")
	fs.StringVar(&c.SASLMechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default no SASL)")
	fs.StringVar(&c.SASLUsername, "sasl-username", "", "SASL user name")
	fs.StringVar(&c.SASLPasswordFile, "sasl-password-file", "", "file holding the SASL password (default the "+PasswordEnv+" environment variable)")
	return c
}

// flagOf names the flag AddFlags registers for each Config field.
var flagOf = map[string]string{
	"TLS":                "tls",
	"CAFile":             "tls-ca-file",
	"CertFile":           "tls-cert-file",
	"KeyFile":            "tls-key-file",
	"ServerName":         "tls-server-name",
	"InsecureSkipVerify": "tls-insecure-skip-verify",
	"SASLMechanism":      "sasl-mechanism",
	"SASLUsername":       "sasl-username",
	"SASLPasswordFile":   "sasl-password-file",
}

// FlagName returns the name (without dashes) of the flag AddFlags
// registers for the Config field, or "" when there is none. The errors of
// this package name Config fields (see internal/fielderr); a command line
// uses FlagName to name its flags instead.
func FlagName(field string) string { return flagOf[field] }

// TLSEnabled reports whether the connections use TLS.
func (c *Config) TLSEnabled() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// Validate reports flag combinations that cannot work, without reading
// any file.
func (c *Config) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fielderr.Errorf("{CertFile} and {KeyFile} go together: give both for mTLS, or neither")
	}
	if c.SASLMechanism == "" {
		if c.SASLUsername != "" || c.SASLPasswordFile != "" {
			return fielderr.Errorf("{SASLUsername} and {SASLPasswordFile} need {SASLMechanism} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
		return nil
	}
	if mechanism(c.SASLMechanism) == "" {
		return fielderr.Errorf("{SASLMechanism} must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.SASLMechanism)
	}
	if c.SASLUsername == "" {
		return fielderr.Errorf("{SASLMechanism} %s needs {SASLUsername}", mechanism(c.SASLMechanism))
	}
	return nil
}

func mechanism(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	for _, m := range Mechanisms {
		if s == m {
			return m
		}
	}
	return ""
}

// Security is a built Config: what every Kafka connection uses.
type Security struct {
	// TLS is nil for plaintext connections.
	TLS *tls.Config
	// SASL is nil without authentication.
	SASL sasl.Mechanism

	mechanism, user, caFile string
	insecure, clientCert    bool
	plainWarning            bool
}

// Build validates c, reads its files and builds the TLS configuration and
// the SASL mechanism.
func (c *Config) Build() (*Security, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Security{}
	if c.TLSEnabled() {
		t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in, warned about
		if c.CAFile != "" {
			pool, err := LoadCAFile(c.CAFile)
			if err != nil {
				return nil, fielderr.Errorf("{CAFile}: %w", err)
			}
			t.RootCAs = pool
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fielderr.Errorf("loading the client certificate ({CertFile} %s, {KeyFile} %s): %w", c.CertFile, c.KeyFile, err)
			}
			t.Certificates = []tls.Certificate{cert}
			s.clientCert = true
		}
		s.TLS, s.caFile, s.insecure = t, c.CAFile, c.InsecureSkipVerify
	}
	if c.SASLMechanism == "" {
		return s, nil
	}
	password, err := c.password()
	if err != nil {
		return nil, err
	}
	s.mechanism, s.user = mechanism(c.SASLMechanism), c.SASLUsername
	switch s.mechanism {
	case "PLAIN":
		s.SASL = plain.Mechanism{Username: c.SASLUsername, Password: password}
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if s.mechanism == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.SASLUsername, password)
		if err != nil {
			// SASLprep rejected the user name or the password: never
			// repeat the password.
			return nil, fmt.Errorf("SASL %s for user %q: the user name or the password has characters SCRAM does not allow", s.mechanism, c.SASLUsername)
		}
		s.SASL = m
	}
	if s.TLS == nil {
		// Not an error (a SASL_PLAINTEXT listener is legal), but the
		// password of PLAIN would cross the network in the clear.
		s.plainWarning = s.mechanism == "PLAIN"
	}
	return s, nil
}

func (c *Config) password() (string, error) {
	if c.SASLPasswordFile != "" {
		b, err := os.ReadFile(c.SASLPasswordFile)
		if err != nil {
			return "", fielderr.Errorf("reading the SASL password: %w (check {SASLPasswordFile})", err)
		}
		p := strings.TrimRight(string(b), "\r\n")
		if p == "" {
			return "", fmt.Errorf("the SASL password file %s is empty", c.SASLPasswordFile)
		}
		return p, nil
	}
	lookup := c.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if p, ok := lookup(PasswordEnv); ok && p != "" {
		return p, nil
	}
	return "", fielderr.Errorf("{SASLMechanism} %s needs a password: set {SASLPasswordFile} or %s", mechanism(c.SASLMechanism), PasswordEnv)
}

// LoadCAFile reads a PEM bundle of CA certificates.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// Transport returns a new kafka-go Transport with the TLS and SASL
// settings. Give the same one to every client and writer of a process.
func (s *Security) Transport() *kafka.Transport {
	return &kafka.Transport{TLS: s.TLS, SASL: s.SASL}
}

// Dialer returns a kafka-go Dialer with the TLS and SASL settings, for
// kafka.Conn users (kafka.Reader).
func (s *Security) Dialer() *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: s.TLS, SASLMechanism: s.SASL}
}

// Describe lists the settings for a log line; it never holds the password.
func (s *Security) Describe() []any {
	tlsMode := "off"
	switch {
	case s.TLS == nil:
	case s.insecure:
		tlsMode = "on, certificates NOT verified"
	case s.caFile != "":
		tlsMode = "on, CA " + s.caFile
	default:
		tlsMode = "on, system roots"
	}
	if s.clientCert {
		tlsMode += ", client certificate"
	}
	saslMode := "off"
	if s.SASL != nil {
		saslMode = s.mechanism + " as " + s.user
	}
	return []any{"tls", tlsMode, "sasl", saslMode}
}

// Connect builds c, logs the settings (and a warning for
// --tls-insecure-skip-verify), then checks within CheckTimeout that one of
// brokers answers a Metadata request over them. It returns the Transport
// to give every Kafka client and writer, or an error that names the
// broker and what to fix.
func (c *Config) Connect(ctx context.Context, brokers []string, log *slog.Logger) (*kafka.Transport, error) {
	s, err := c.Build()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	log.Info("Kafka connection security", s.Describe()...)
	if s.insecure {
		log.Warn("--tls-insecure-skip-verify: the brokers' certificates are not verified; anyone on the path can read and change the traffic. Use it for tests only.")
	}
	if s.plainWarning {
		log.Warn("SASL PLAIN without TLS sends the password in the clear; add --tls")
	}
	if err := s.Check(ctx, brokers); err != nil {
		return nil, err
	}
	return s.Transport(), nil
}

// ConnectOrWait is Connect for a long-running worker: a security failure
// (authentication, TLS, a plaintext client on a TLS listener) is returned,
// since retrying cannot fix it, but unreachable brokers are only logged:
// the caller retries them until its own startup deadline.
func (c *Config) ConnectOrWait(ctx context.Context, brokers []string, log *slog.Logger) (*kafka.Transport, error) {
	tr, err := c.Connect(ctx, brokers, log)
	if err == nil || IsSecurityError(err) {
		return tr, err
	}
	s, berr := c.Build()
	if berr != nil {
		return nil, berr
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("cannot check the connection security yet: the brokers do not answer; retrying them at start", "err", err)
	return s.Transport(), nil
}

// IsSecurityError reports whether err is a failure that retrying cannot
// fix: authentication, TLS, or a plaintext client on a TLS listener.
func IsSecurityError(err error) bool {
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrTLS) || errors.Is(err, ErrPlaintextToTLS)
}
