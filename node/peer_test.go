package node

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// rejected reads joiner_http_unauthorized_total{reason} from reg.
func rejected(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "joiner_http_unauthorized_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no joiner_http_unauthorized_total{reason=%q}", reason)
	return 0
}

// tokenHandler is the peer token middleware with the token s3cret-token
// around a handler that answers "inner", and its metrics' registry.
func tokenHandler(t *testing.T) (http.Handler, *prometheus.Registry) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	p, err := newPeerAuth(Config{PeerTokenFile: tokenFile}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return p.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("inner")) })), reg
}

func TestPeerTokenMiddleware(t *testing.T) {
	h, reg := tokenHandler(t)
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", 200},
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/v1/prices/BBCA", "", 401},
		{"/v1/assignment", "", 401},
		{"/v1/assignment", "Bearer wrong", 401},
		{"/v1/assignment", "s3cret-token", 401}, // no "Bearer "
		{"/v1/assignment", "Basic s3cret-token", 401},
		{"/v1/assignment", "Bearer s3cret-token", 200},
		{"/v1/prices/BBCA", "Bearer s3cret-token", 200},
		{"/v1/../metrics", "", 401}, // not an open path as written; no bypass by dot segments
		{"/anything", "", 401},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s (Authorization %q): %d, want %d", tc.path, tc.auth, rec.Code, tc.want)
		}
		if rec.Code == 401 {
			if rec.Header().Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: 401 without WWW-Authenticate", tc.path)
			}
			if strings.Contains(rec.Body.String(), "s3cret") {
				t.Errorf("GET %s: the 401 body holds the token", tc.path)
			}
		}
	}
	// "missing": no header, the Basic one and the one without "Bearer "
	// (their scheme is not Bearer), /v1/../metrics and /anything.
	if got := rejected(t, reg, "missing"); got != 6 {
		t.Errorf("rejected{missing} = %v, want 6", got)
	}
	if got := rejected(t, reg, "invalid"); got != 1 {
		t.Errorf("rejected{invalid} = %v, want 1", got)
	}
}

func TestPeerAuthConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	spaced := filepath.Join(dir, "spaced")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	_ = os.WriteFile(spaced, []byte("two words"), 0o600)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{PeerTokenFile: filepath.Join(dir, "nope")}, "PeerTokenFile"},
		{Config{PeerTokenFile: empty}, "is empty"},
		{Config{PeerTokenFile: spaced}, "whitespace"},
		{Config{HTTPCertFile: "c.pem"}, "HTTPKeyFile"},
		{Config{HTTPCertFile: filepath.Join(dir, "c"), HTTPKeyFile: filepath.Join(dir, "k")}, "HTTPCertFile"},
	} {
		_, err := newPeerAuth(tc.cfg, prometheus.NewRegistry())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error mentioning %q", tc.cfg, err, tc.want)
		}
	}
	p, err := newPeerAuth(Config{}, prometheus.NewRegistry())
	if err != nil || p.client() != nil {
		t.Errorf("no token, no TLS: %v, client %v; want join's default client", err, p.client())
	}
}

// PeerTransport adds the token and turns join's http:// URLs into https://.
func TestPeerTransportUpgradesAndAuthenticates(t *testing.T) {
	var gotAuth, gotProto string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		if r.TLS != nil {
			gotProto = "https"
		}
	}))
	defer srv.Close()
	base := srv.Client().Transport
	c := &http.Client{Transport: &PeerTransport{Token: "tok", HTTPS: true, Base: base}}
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Listener.Addr().String()+"/v1/prices/X", nil)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if gotAuth != "Bearer tok" || gotProto != "https" {
		t.Errorf("server saw Authorization %q over %q; want Bearer tok over https", gotAuth, gotProto)
	}
	if req.URL.Scheme != "http" || req.Header.Get("Authorization") != "" {
		t.Error("PeerTransport modified the caller's request")
	}
}
