package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/segmentio/kafka-go"
)

// ErrAuth marks an authentication failure; ErrTLS a failed TLS handshake;
// ErrPlaintextToTLS a plaintext client talking to a TLS listener. Explain
// and Check wrap them, so callers can test with errors.Is.
var (
	ErrAuth           = errors.New("authentication failed")
	ErrTLS            = errors.New("TLS handshake failed")
	ErrPlaintextToTLS = errors.New("plaintext client on a TLS listener")
)

// Check asks each broker in turn for metadata, over the security
// settings, until one answers; it gives up after CheckTimeout. The error
// is Explain's for the first broker that failed.
func (s *Security) Check(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return fielderr.Errorf("no brokers given (set {Brokers})")
	}
	ctx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	var first error
	for _, b := range brokers {
		err := s.probe(ctx, b)
		if err == nil {
			return nil
		}
		if first == nil {
			first = s.Explain(err, b)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return first
}

func (s *Security) probe(ctx context.Context, broker string) error {
	// A transport of its own, stopped when the probe ends, so that a failed
	// probe leaves no goroutine retrying in the background.
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	t := s.Transport()
	t.Context = tctx
	t.DialTimeout = 5 * time.Second
	defer t.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(broker), Transport: t}
	res, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return err
	}
	if len(res.Brokers) == 0 {
		return errors.New("the metadata answer lists no brokers")
	}
	return nil
}

// Explain turns err, from a request to broker, into an error that says
// what went wrong with the security settings and what to do. Errors that
// are not about security come back wrapped with the broker's address.
func (s *Security) Explain(err error, broker string) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA  x509.UnknownAuthorityError
		hostname   x509.HostnameError
		invalid    x509.CertificateInvalidError
		recordHdr  tls.RecordHeaderError
		verifyErr  *tls.CertificateVerificationError
		reason     string
		checkFlags = "check {CAFile} and {ServerName}"
	)
	switch {
	case errors.Is(err, ErrAuth), errors.Is(err, ErrTLS), errors.Is(err, ErrPlaintextToTLS):
		return err
	case errors.Is(err, kafka.SASLAuthenticationFailed):
		return fielderr.Errorf("%w at broker %s: SASL %s as user %q was rejected (%v); check {SASLUsername}, {SASLMechanism} and the password in {SASLPasswordFile} or %s",
			ErrAuth, broker, s.mechanism, s.user, err, PasswordEnv)
	case errors.Is(err, kafka.UnsupportedSASLMechanism):
		return fielderr.Errorf("%w at broker %s: its listener does not enable SASL %s (user %q); set {SASLMechanism} to one it enables, or use the listener meant for it",
			ErrAuth, broker, s.mechanism, s.user)
	case errors.Is(err, kafka.IllegalSASLState):
		return fmt.Errorf("%w at broker %s: the listener does not expect SASL %s (user %q) now; is it a SASL listener?", ErrAuth, broker, s.mechanism, s.user)
	case errors.As(err, &unknownCA):
		reason = "its certificate is signed by an unknown authority"
		checkFlags = "give the CA that signed the broker's certificate with {CAFile}"
	case errors.As(err, &hostname):
		reason = fmt.Sprintf("its certificate is not valid for the name %q", hostname.Host)
		if names := certNames(hostname.Certificate); names != "" {
			reason += " (it is valid for " + names + ")"
		}
		checkFlags = "connect with a name the certificate holds, or set {ServerName} to one"
	case errors.As(err, &invalid):
		reason = "its certificate is invalid: " + invalid.Error()
	case errors.As(err, &recordHdr):
		return fielderr.Errorf("%w with broker %s: it does not speak TLS on this port; drop {TLS} and the other TLS settings, or give the address of its TLS listener", ErrTLS, broker)
	case isAlert(err):
		reason = "the broker refused the handshake (" + alertText(err) + ")"
		checkFlags = "if the listener requires client certificates (mTLS), give {CertFile} and {KeyFile} with a certificate its CA signed"
	case errors.As(err, &verifyErr):
		reason = verifyErr.Error()
	case isRefused(err):
		return fielderr.Errorf("cannot connect to broker %s: %w (check {Brokers} and that the broker is up)", broker, err)
	case isClosed(err):
		// TLS first: a plaintext SASL handshake on a TLS listener is closed
		// too, and is no sign of a wrong password.
		if s.TLS == nil && speaksTLS(broker) {
			return fielderr.Errorf("%w: broker %s closed the connection and answers TLS on that port; joiner connected in plaintext: add {TLS} (and {CAFile} with its CA)", ErrPlaintextToTLS, broker)
		}
		if s.SASL != nil && s.saslRejected(broker) {
			return fielderr.Errorf("%w at broker %s: SASL %s as user %q was rejected (the broker closed the connection during authentication); check {SASLUsername}, {SASLMechanism} and the password in {SASLPasswordFile} or %s",
				ErrAuth, broker, s.mechanism, s.user, PasswordEnv)
		}
		hint := "check that {Brokers} names a listener for these settings"
		switch {
		case s.SASL == nil:
			hint = "if the listener requires SASL, set {SASLMechanism}, {SASLUsername} and the password"
		case s.TLS == nil:
			hint = "if the listener requires TLS, add {TLS}"
		}
		return fielderr.Errorf("broker %s closed the connection (%v); "+hint, broker, err)
	default:
		return fmt.Errorf("broker %s: %w", broker, err)
	}
	return fielderr.Errorf("%w with broker %s: %s; "+checkFlags, ErrTLS, broker, reason)
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// speaksTLS reports whether broker completes a TLS handshake (with any
// certificate): the sign that a plaintext client is on a TLS listener.
func speaksTLS(broker string) bool {
	d := &net.Dialer{Timeout: 3 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", broker, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only probes whether the port speaks TLS
	if err != nil {
		// A listener that requires a client certificate may refuse the
		// handshake with an alert: that is TLS too.
		return isAlert(err)
	}
	_ = conn.Close()
	return true
}

// remoteAlert is how crypto/tls words an alert the peer sent over TCP
// (its alert type is not exported; tls.AlertError is QUIC's).
const remoteAlert = "remote error: tls: "

func isAlert(err error) bool { return strings.Contains(err.Error(), remoteAlert) }

func alertText(err error) string {
	s := err.Error()
	return s[strings.Index(s, remoteAlert):]
}

// saslRejected reports whether broker accepts a connection with the TLS
// settings alone but not with SASL: some brokers answer bad credentials
// by closing the connection rather than with an error code.
func (s *Security) saslRejected(broker string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := s.Dialer()
	if c, err := d.DialContext(ctx, "tcp", broker); err == nil {
		_ = c.Close()
		return false
	}
	d.SASLMechanism = nil
	c, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
