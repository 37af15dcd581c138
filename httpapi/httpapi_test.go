package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/join"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeBackend answers from fields and records what it was asked.
type fakeBackend struct {
	price  join.Price
	err    error
	ready  bool
	why    string
	view   join.AssignmentView
	asked  []string
	atSeen []*int64
}

func (f *fakeBackend) PriceAsOf(_ context.Context, symbol string, atMs *int64) (join.Price, error) {
	f.asked = append(f.asked, symbol)
	f.atSeen = append(f.atSeen, atMs)
	return f.price, f.err
}
func (f *fakeBackend) View() join.AssignmentView { return f.view }
func (f *fakeBackend) Ready() (bool, string)     { return f.ready, f.why }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestServePrice(t *testing.T) {
	at := int64(2500)
	for _, c := range []struct {
		name   string
		path   string
		err    error
		code   int
		asks   bool   // the backend is asked
		atMs   *int64 // what it is asked
		inBody string
	}{
		{"latest", "/v1/prices/BBCA", nil, 200, true, nil, `"price":9125.5`},
		{"as of", "/v1/prices/BBCA?at_ms=2500", nil, 200, true, &at, `"ts_ms":2000`},
		{"after_ms alias", "/v1/prices/BBCA?after_ms=2500", nil, 200, true, &at, `"symbol":"BBCA"`},
		{"bad at_ms", "/v1/prices/BBCA?at_ms=x", nil, 400, false, nil, "at_ms must be Unix milliseconds"},
		{"bad after_ms", "/v1/prices/BBCA?after_ms=1.5", nil, 400, false, nil, "after_ms must be Unix milliseconds"},
		{"bad symbol", "/v1/prices/B%01C", nil, 400, false, nil, "invalid_value"},
		{"no price", "/v1/prices/BBCA?at_ms=2500", fmt.Errorf("%w for %q", join.ErrNoPrice, "BBCA"), 404, true, &at, "no price"},
		{"not the owner", "/v1/prices/BBCA", fmt.Errorf("%w: task 3", join.ErrNotOwner), 421, true, nil, "task 3"},
		{"restoring", "/v1/prices/BBCA", fmt.Errorf("%w: task 3", join.ErrRestoring), 503, true, nil, "restoring"},
		{"store error", "/v1/prices/BBCA", errors.New("pebble: closed"), 500, true, nil, "pebble: closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &fakeBackend{price: join.Price{Symbol: "BBCA", Price: 9125.5, TsMs: 2000, Offset: 1}, err: c.err}
			rec := get(t, Handler(b, prometheus.NewRegistry()), c.path)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.inBody) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", c.path, rec.Code, rec.Body, c.code, c.inBody)
			}
			if asked := len(b.asked) == 1; asked != c.asks {
				t.Fatalf("backend asked %v, want %v", b.asked, c.asks)
			}
			if c.asks && (b.asked[0] != "BBCA" || (b.atSeen[0] == nil) != (c.atMs == nil) || (c.atMs != nil && *b.atSeen[0] != *c.atMs)) {
				t.Fatalf("backend asked %q at %v, want BBCA at %v", b.asked[0], b.atSeen[0], c.atMs)
			}
			if c.code == 200 {
				var p join.Price
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p != b.price {
					t.Fatalf("body %s decodes to %+v (%v), want %+v", rec.Body, p, err, b.price)
				}
			}
		})
	}
}

// A caller that went away gets no answer written (the backend returned
// because the request's context ended).
func TestServePriceCallerGone(t *testing.T) {
	b := &fakeBackend{err: context.Canceled}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	Handler(b, prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/prices/BBCA?at_ms=1", nil).WithContext(ctx))
	if rec.Body.Len() != 0 {
		t.Fatalf("answer %d %q written to a caller that is gone", rec.Code, rec.Body)
	}
}

func TestServeAssignment(t *testing.T) {
	view := join.AssignmentView{Instance: "worker-1", Generation: 3, Leader: true, Partitions: 2,
		Tasks: []int{0}, StateTasks: []int{0, 1}, Owners: []string{"worker-1", "worker-1"}, Moved: 1, Ready: true,
		Stats: join.Stats{Local: 5, Remote: 2, Miss: 1}}
	rec := get(t, Handler(&fakeBackend{view: view}, prometheus.NewRegistry()), "/v1/assignment")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/assignment = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var got join.AssignmentView
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := view
	want.Stats.Tasks, want.Stats.StateTasks = nil, nil // json:"-"
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	for _, field := range []string{`"instance":"worker-1"`, `"owners":["worker-1","worker-1"]`, `"local":5`, `"ready":true`} {
		if !strings.Contains(rec.Body.String(), field) {
			t.Errorf("body %s lacks %s", rec.Body, field)
		}
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "joiner_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Add(3)
	b := &fakeBackend{why: "restoring tasks [1]"}
	h := Handler(b, reg)
	if rec := get(t, h, "/healthz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("/healthz = %d %q", rec.Code, rec.Body)
	}
	if rec := get(t, h, "/readyz"); rec.Code != 503 || rec.Body.String() != "restoring tasks [1]\n" {
		t.Errorf("/readyz while restoring = %d %q", rec.Code, rec.Body)
	}
	b.ready, b.why = true, "ok"
	if rec := get(t, h, "/readyz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("/readyz when ready = %d %q", rec.Code, rec.Body)
	}
	if rec := get(t, h, "/metrics"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "joiner_test_total 3") {
		t.Errorf("/metrics = %d %q", rec.Code, rec.Body)
	}
	if rec := get(t, h, "/v1/nothing"); rec.Code != 404 {
		t.Errorf("/v1/nothing = %d", rec.Code)
	}
}

type unhealthyBackend struct {
	fakeBackend
	healthy bool
}

func (u *unhealthyBackend) Healthy() (bool, string) { return u.healthy, "2 task store opens hang" }

// /healthz is 503 with the reason while the backend says it is not
// healthy (a task store open that hangs cannot be cleaned up but by a
// restart), 200 otherwise.
func TestHealthzFollowsHealthy(t *testing.T) {
	b := &unhealthyBackend{}
	h := Handler(b, prometheus.NewRegistry())
	if rec := get(t, h, "/healthz"); rec.Code != 503 || rec.Body.String() != "2 task store opens hang\n" {
		t.Errorf("/healthz of an unhealthy backend = %d %q", rec.Code, rec.Body)
	}
	b.healthy = true
	if rec := get(t, h, "/healthz"); rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("/healthz of a healthy backend = %d %q", rec.Code, rec.Body)
	}
}
