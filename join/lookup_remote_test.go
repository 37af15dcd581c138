package join

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The remote lookup client: a found price, a clean miss (404), retries
// while the owner restores (503), an error for a 500 and for an owner that
// cannot be reached within the timeout.
func TestRemoteLookup(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/prices/GONE":
			http.Error(w, "no price", http.StatusNotFound)
		case r.URL.Path == "/v1/prices/BUSY" && n < 3:
			http.Error(w, "restoring", http.StatusServiceUnavailable)
		case r.URL.Path == "/v1/prices/BAD":
			http.Error(w, "boom", http.StatusInternalServerError)
		default:
			if r.URL.Query().Get("at_ms") != "42" {
				http.Error(w, "at_ms missing", http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, `{"symbol":%q,"price":12.5,"ts_ms":7,"task":1}`, strings.TrimPrefix(r.URL.Path, "/v1/prices/"))
		}
	}))
	defer srv.Close()
	c := &remoteClient{http: srv.Client(), timeout: 5 * time.Second, hist: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"})}
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	if p, found, err := c.lookup(ctx, addr, "BBCA", 0, 42); err != nil || !found || p.Price != 12.5 || p.TsMs != 7 {
		t.Errorf("BBCA: %+v %v %v", p, found, err)
	}
	if _, found, err := c.lookup(ctx, addr, "GONE", 0, 42); err != nil || found {
		t.Errorf("GONE: found=%v err=%v, want a clean miss", found, err)
	}
	calls.Store(0)
	if p, found, err := c.lookup(ctx, addr, "BUSY", 0, 42); err != nil || !found || p.Symbol != "BUSY" {
		t.Errorf("BUSY: %+v %v %v; want retried until answered", p, found, err)
	}
	if _, _, err := c.lookup(ctx, addr, "BAD", 0, 42); err == nil {
		t.Error("BAD: want an error for a 500")
	}
	short := &remoteClient{http: srv.Client(), timeout: 300 * time.Millisecond, hist: c.hist}
	if _, _, err := short.lookup(ctx, "127.0.0.1:1", "BBCA", 0, 42); err == nil {
		t.Error("unreachable owner: want an error within the timeout")
	}
}
