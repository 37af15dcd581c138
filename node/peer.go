package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/prometheus/client_golang/prometheus"
)

// openPaths are served without the peer token: probes and scraping.
var openPaths = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// peerAuth is the security of the HTTP API: the token it requires and
// sends, and the TLS it serves and dials with.
type peerAuth struct {
	token     *[sha256.Size]byte // nil: no token required or sent
	raw       string
	serverTLS *tls.Config // nil: plain http
	clientTLS *tls.Config // nil: plain http to peers
	rejected  *prometheus.CounterVec
}

func newPeerAuth(cfg Config, reg prometheus.Registerer) (*peerAuth, error) {
	p := &peerAuth{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "joiner_http_unauthorized_total",
			Help: "Requests to the HTTP API refused with 401 for a missing or wrong peer token, by reason (missing, invalid).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"missing", "invalid"} {
		p.rejected.WithLabelValues(r)
	}
	reg.MustRegister(p.rejected)
	if cfg.PeerTokenFile != "" {
		b, err := os.ReadFile(cfg.PeerTokenFile)
		if err != nil {
			return nil, fielderr.Errorf("reading the peer token: %w (check {PeerTokenFile})", err)
		}
		p.raw = strings.TrimRight(string(b), "\r\n")
		if p.raw == "" {
			return nil, fmt.Errorf("the peer token file %s is empty", cfg.PeerTokenFile)
		}
		if strings.ContainsAny(p.raw, "\r\n\t ") {
			return nil, fmt.Errorf("the peer token in %s has whitespace inside; use one line of printable characters", cfg.PeerTokenFile)
		}
		sum := sha256.Sum256([]byte(p.raw))
		p.token = &sum
	}
	if (cfg.HTTPCertFile == "") != (cfg.HTTPKeyFile == "") {
		return nil, fielderr.Errorf("{HTTPCertFile} and {HTTPKeyFile} go together: give both, or neither")
	}
	if cfg.HTTPCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.HTTPCertFile, cfg.HTTPKeyFile)
		if err != nil {
			return nil, fielderr.Errorf("loading the HTTP certificate ({HTTPCertFile} %s, {HTTPKeyFile} %s): %w", cfg.HTTPCertFile, cfg.HTTPKeyFile, err)
		}
		p.serverTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		p.clientTLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.PeerCAFile != "" {
			pool, err := kafkasec.LoadCAFile(cfg.PeerCAFile)
			if err != nil {
				return nil, fielderr.Errorf("the CA of the peers' HTTP certificates ({PeerCAFile}): %w", err)
			}
			p.clientTLS.RootCAs = pool
		}
	}
	return p, nil
}

// handler requires the token on every path but the open ones.
func (p *peerAuth) handler(next http.Handler) http.Handler {
	if p.token == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		reason := "missing"
		if ok && got != "" {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], p.token[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
			reason = "invalid"
		}
		p.rejected.WithLabelValues(reason).Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="joiner"`)
		http.Error(w, "401 unauthorized: "+reason+" peer token; send Authorization: Bearer <the token of --peer-token-file>", http.StatusUnauthorized)
	})
}

// client is the HTTP client of price lookups to other members, or nil for
// join's default when neither a token nor TLS is configured.
func (p *peerAuth) client() *http.Client {
	if p.token == nil && p.clientTLS == nil {
		return nil
	}
	base := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute, TLSClientConfig: p.clientTLS}
	return &http.Client{Transport: &PeerTransport{Token: p.raw, HTTPS: p.clientTLS != nil, Base: base}}
}

// PeerTransport is the http.RoundTripper of price lookups to other
// members. It adds the peer token and, with HTTPS, turns the http:// URLs
// the join package builds into https:// ones, so that join needs to know
// about neither.
type PeerTransport struct {
	// Token is sent as "Authorization: Bearer <Token>" when not empty.
	Token string
	// HTTPS upgrades http:// requests to https://.
	HTTPS bool
	// Base makes the requests. Default: http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *PeerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.HTTPS && r.URL.Scheme == "http" {
		r.URL.Scheme = "https"
	}
	if t.Token != "" {
		r.Header.Set("Authorization", "Bearer "+t.Token)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
