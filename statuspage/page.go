package statuspage

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/joiner-dev/joiner/join"
)

//go:embed page.html login.html
var pages embed.FS

var funcs = template.FuncMap{
	"roleLabel":  roleLabel,
	"stateLabel": stateLabel,
	"dur":        func(secs float64) string { return (time.Duration(secs) * time.Second).String() },
	"stamp":      stamp,
	"bytes":      humanBytes,
	"lag": func(n int64) string {
		if n < 0 {
			return "—"
		}
		return strconv.FormatInt(n, 10)
	},
	"rate": func(r float64) string { return compact(r) },
	"eta": func(secs float64) string {
		if secs < 0 {
			return "unknown"
		}
		return (time.Duration(secs*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
	},
	"ints": func(ps []int) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.Itoa(p)
		}
		return strings.Join(s, ",")
	},
	"sparkLag": func(h []Sample) spark {
		return sparkOf(h, func(s Sample) float64 { return float64(s.NotificationLag) })
	},
	"sparkRate": func(h []Sample) spark { return sparkOf(h, func(s Sample) float64 { return s.JoinsPerSecond }) },
}

var (
	pageTmpl  = template.Must(template.New("page.html").Funcs(funcs).ParseFS(pages, "page.html"))
	loginTmpl = template.Must(template.New("login.html").ParseFS(pages, "login.html"))
)

// roleLabel is a role in words.
func roleLabel(role string) string {
	if role == join.RoleWarmup {
		return "warm-up"
	}
	return role
}

// stateLabel is a state in words.
func stateLabel(state string) string {
	switch state {
	case join.StateWaitingMarket:
		return "waiting for the market"
	case join.StatePaused:
		return "paused at a handover"
	}
	return state
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// pageOptions are the rendering options of one page.
type pageOptions struct {
	// Refresh reloads the page every Refresh seconds; 0: never.
	Refresh int
	// LayoutCheck adds a script that writes the page's scroll and client
	// widths into an <output id="layout-check"> (the browser test's
	// horizontal-scroll check); Nonce allows it under the CSP.
	LayoutCheck bool
	Nonce       string
}

// Render writes the page of s.
func Render(w io.Writer, s Status) error { return render(w, s, pageOptions{}) }

func render(w io.Writer, s Status, o pageOptions) error {
	return pageTmpl.Execute(w, struct {
		S Status
		pageOptions
	}{s, o})
}

// writePage renders the page with security headers: no script but the
// layout check's (by nonce), no framing, no referrer, no caching.
func writePage(rw http.ResponseWriter, s Status, o pageOptions) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	o.Nonce = base64.RawStdEncoding.EncodeToString(b[:])
	var buf bytes.Buffer
	if err := render(&buf, s, o); err != nil {
		http.Error(rw, "rendering the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	setHeaders(rw, o.Nonce)
	_, _ = rw.Write(buf.Bytes())
}

func setHeaders(rw http.ResponseWriter, nonce string) {
	h := rw.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	csp := "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	if nonce != "" {
		csp += "; script-src 'nonce-" + nonce + "'"
	}
	h.Set("Content-Security-Policy", csp)
}

// WriteLogin answers a browser that has no valid token for the page:
// a form that POSTs the token to /login (never in a URL), with message
// (e.g. "wrong token") when not empty, and the status code.
func WriteLogin(rw http.ResponseWriter, status int, message string) {
	var buf bytes.Buffer
	if err := loginTmpl.Execute(&buf, struct{ Message string }{message}); err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	setHeaders(rw, "")
	rw.WriteHeader(status)
	_, _ = rw.Write(buf.Bytes())
}
