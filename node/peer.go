package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/kafkasec"
	"github.com/joiner-dev/joiner/statuspage"
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

// pagePaths are the status page's (package statuspage): besides the
// Authorization header they accept the session cookie that POST /login
// sets, so that a browser can open them.
var pagePaths = map[string]bool{"/": true, "/v1/status": true}

// sessionCookie is the name of the status page's cookie.
const sessionCookie = "joiner_session"

// session is the value of the session cookie: derived from the token, so
// that the cookie is not the token itself (it opens the page, not the
// peer API).
func (p *peerAuth) session() string {
	sum := sha256.Sum256(append([]byte("joiner status page session\x00"), p.token[:]...))
	return hex.EncodeToString(sum[:])
}

// handler requires the token on every path but the open ones: in the
// Authorization header, or for the status page in the session cookie
// that POST /login sets (a browser without it gets the login form).
func (p *peerAuth) handler(next http.Handler) http.Handler {
	if p.token == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/login" {
			p.login(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		reason := "missing"
		if ok && got != "" {
			if p.valid(got) {
				next.ServeHTTP(w, r)
				return
			}
			reason = "invalid"
		} else if c, err := r.Cookie(sessionCookie); err == nil && pagePaths[r.URL.Path] {
			if subtle.ConstantTimeCompare([]byte(c.Value), []byte(p.session())) == 1 {
				next.ServeHTTP(w, r)
				return
			}
			reason = "invalid"
		}
		p.rejected.WithLabelValues(reason).Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="joiner"`)
		if r.URL.Path == "/" && r.Method == http.MethodGet {
			msg := ""
			if reason == "invalid" {
				msg = "That token is not this worker's peer token."
			}
			statuspage.WriteLogin(w, http.StatusUnauthorized, msg)
			return
		}
		http.Error(w, "401 unauthorized: "+reason+" peer token; send Authorization: Bearer <the token of --peer-token-file>", http.StatusUnauthorized)
	})
}

func (p *peerAuth) valid(token string) bool {
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], p.token[:]) == 1
}

// login is POST /login, the status page's form: a right token sets the
// session cookie (HttpOnly, SameSite=Strict, Secure over TLS) and
// redirects to the page; a wrong one shows the form again.
func (p *peerAuth) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST the token as the form field token", http.StatusMethodNotAllowed)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !p.valid(r.PostForm.Get("token")) {
		reason := "invalid"
		if r.PostForm.Get("token") == "" {
			reason = "missing"
		}
		p.rejected.WithLabelValues(reason).Inc()
		statuspage.WriteLogin(w, http.StatusUnauthorized, "That token is not this worker's peer token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: p.session(), Path: "/", HttpOnly: true,
		Secure: p.serverTLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: 12 * 3600})
	http.Redirect(w, r, "/", http.StatusSeeOther)
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
