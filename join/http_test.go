package join

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// GET /v1/prices/{symbol}?at_ms=T answers the version as of T, names the
// tick (ts_ms, offset) and says when T is older than the kept history.
func TestServePriceAsOf(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	st := pt.st
	ticks := []fetchedRecord{
		recAt(0, 1000, `{"symbol":"BBCA","price":1}`),
		recAt(1, 2000, `{"symbol":"BBCA","price":2}`),
		recAt(2, 3000, `{"symbol":"BBCA","price":3}`),
	}
	if err := st.applyRetrying(context.Background(), ticks, -1); err != nil {
		t.Fatal(err)
	}
	h := w.Handler(nil)
	get := func(query string) (int, Price) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/prices/BBCA"+query, nil))
		var p Price
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
		}
		return rec.Code, p
	}
	for _, c := range []struct {
		query         string
		code          int
		price         float64
		tsMs, offset  int64
		late, hasAtMs bool
	}{
		{"", 200, 3, 3000, 2, false, false},
		{"?at_ms=2500", 200, 2, 2000, 1, false, true},
		{"?after_ms=2000", 200, 2, 2000, 1, false, true},
		{"?at_ms=3000", 200, 3, 3000, 2, false, true},
		{"?at_ms=999", 404, 0, 0, 0, false, false},
		{"?at_ms=x", 400, 0, 0, 0, false, false},
	} {
		code, p := get(c.query)
		if code != c.code || p.Price != c.price || p.TsMs != c.tsMs || p.Offset != c.offset || p.Late != c.late || (p.AtMs != nil) != c.hasAtMs {
			t.Errorf("GET %s = %d %+v, want %d price %v from %d@%d late %v", c.query, code, p, c.code, c.price, c.tsMs, c.offset, c.late)
		}
	}
	// After pruning at 2500, 1500 is older than the kept history: the
	// oldest kept version, late.
	st.mu.RLock()
	_, err := st.store.Prune(2500)
	st.mu.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	if code, p := get("?at_ms=1500"); code != 200 || !p.Late || p.Price != 2 {
		t.Errorf("GET at_ms=1500 after pruning = %d %+v, want the version at 2000, late", code, p)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/prices/ZZZZ?at_ms=5000", nil))
	if rec.Code != http.StatusNotFound && rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("GET of an unknown symbol = %d", rec.Code)
	}
}
