// Package httpapi serves a worker's HTTP API on one listener:
//
//	/metrics              Prometheus metrics of the gatherer
//	/healthz              200 while the process is up; 503 when the
//	                      Backend has a Healthy method that says not (a
//	                      task store open that hangs)
//	/readyz               200 once assigned and every state task restored, else 503
//	/v1/assignment        this member's assignment and join counts (JSON)
//	/v1/prices/{symbol}   the symbol's price from the local store: the
//	                      latest, or with ?at_ms=T the version as of T
//	                      (after first waiting, up to the worker's
//	                      MaxTaskIdle, until the task has been read past T or
//	                      to its end). 200, 400 for a bad symbol or at_ms,
//	                      404 when there was no price (then), 421 when this
//	                      member does not hold the symbol's task, 503 while
//	                      it is restoring. after_ms is an alias of at_ms.
//
// It only translates HTTP to the Backend (a *join.Processor) and errors to
// status codes; join's remote lookup client is the other side of
// /v1/prices. The same listener serves the status page (/ and /v1/status,
// package statuspage), mounted next to this handler by node.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Backend is what the API serves: *join.Processor.
type Backend interface {
	// PriceAsOf answers /v1/prices; atMs is nil for the latest price. Its
	// errors wrap join.ErrNotOwner, join.ErrRestoring or join.ErrNoPrice,
	// any other error is a 500.
	PriceAsOf(ctx context.Context, symbol string, atMs *int64) (join.Price, error)
	// View answers /v1/assignment.
	View() join.AssignmentView
	// Ready answers /readyz.
	Ready() (bool, string)
}

// Handler returns the API of b, with gatherer's metrics on /metrics.
func Handler(b Backend, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if h, ok := b.(interface{ Healthy() (bool, string) }); ok {
			if ok, why := h.Healthy(); !ok {
				rw.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(rw, why)
				return
			}
		}
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ok, why := b.Ready()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(rw, why)
	})
	mux.HandleFunc("GET /v1/prices/{symbol}", func(rw http.ResponseWriter, r *http.Request) { servePrice(b, rw, r) })
	mux.HandleFunc("GET /v1/assignment", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, b.View())
	})
	return mux
}

func servePrice(b Backend, rw http.ResponseWriter, r *http.Request) {
	symbol := r.PathValue("symbol")
	if err := record.CheckSymbol(symbol); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	var atMs *int64
	q := r.URL.Query()
	if v, name := q.Get("at_ms"), "at_ms"; v != "" || q.Get("after_ms") != "" {
		if v == "" {
			v, name = q.Get("after_ms"), "after_ms"
		}
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(rw, name+" must be Unix milliseconds", http.StatusBadRequest)
			return
		}
		atMs = &t
	}
	p, err := b.PriceAsOf(r.Context(), symbol, atMs)
	switch {
	case err == nil:
		writeJSON(rw, p)
	case r.Context().Err() != nil:
		// The caller is gone; nobody reads an answer.
	default:
		http.Error(rw, err.Error(), statusOf(err))
	}
}

// statusOf maps a PriceAsOf error to its status code.
func statusOf(err error) int {
	switch {
	case errors.Is(err, join.ErrNotOwner):
		return http.StatusMisdirectedRequest
	case errors.Is(err, join.ErrRestoring):
		return http.StatusServiceUnavailable
	case errors.Is(err, join.ErrNoPrice):
		return http.StatusNotFound
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}
