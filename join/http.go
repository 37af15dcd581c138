package join

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Price is the answer of GET /v1/prices/{symbol}: one version of the
// symbol's price, the tick at TsMs from market offset Offset.
type Price struct {
	Symbol string  `json:"symbol"`
	Price  float64 `json:"price"`
	TsMs   int64   `json:"ts_ms"`
	Offset int64   `json:"offset"`
	Task   int     `json:"task"`
	// AtMs is the time asked for (at_ms), absent without one.
	AtMs *int64 `json:"at_ms,omitempty"`
	// Late is true when at_ms is older than the retained history: the
	// answer is then the oldest version kept, newer than at_ms.
	Late bool `json:"late"`
}

// Handler serves the worker's HTTP API on one listener:
//
//	/metrics              Prometheus metrics of gatherer
//	/healthz              200 while the process is up
//	/readyz               200 once assigned and every state task restored, else 503
//	/v1/assignment        this member's assignment and join counts (JSON)
//	/v1/prices/{symbol}   the symbol's price from the local store: the
//	                      latest, or with ?at_ms=T the version as of T
//	                      (after first waiting, up to MaxTaskIdle, until the
//	                      task has been read past T or to its end). 200,
//	                      404 when there was no price (then), 421 when
//	                      this member does not hold the symbol's task, 503
//	                      while it is restoring. after_ms is an alias of
//	                      at_ms.
func (w *Worker) Handler(gatherer prometheus.Gatherer) http.Handler {
	if gatherer == nil {
		gatherer = w.reg
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ok, why := w.Ready()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(rw, why)
	})
	mux.HandleFunc("GET /v1/prices/{symbol}", w.servePrice)
	mux.HandleFunc("GET /v1/assignment", w.serveAssignment)
	return mux
}

func (w *Worker) servePrice(rw http.ResponseWriter, r *http.Request) {
	symbol := r.PathValue("symbol")
	if err := record.CheckSymbol(symbol); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	q := SymbolTask(symbol, w.partitions())
	st := w.stateTask(q)
	if st == nil {
		http.Error(rw, fmt.Sprintf("task %d of %q is not held by %s", q, symbol, w.cfg.InstanceID), http.StatusMisdirectedRequest)
		return
	}
	at := int64(math.MaxInt64)
	var atMs *int64
	q1 := r.URL.Query()
	if v, name := q1.Get("at_ms"), "at_ms"; v != "" || q1.Get("after_ms") != "" {
		if v == "" {
			v, name = q1.Get("after_ms"), "after_ms"
		}
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			http.Error(rw, name+" must be Unix milliseconds", http.StatusBadRequest)
			return
		}
		at, atMs = t, &t
		if err := st.waitFor(r.Context(), at, w.cfg.MaxTaskIdle); err != nil && r.Context().Err() != nil {
			return
		}
	}
	if !st.isRestored() {
		http.Error(rw, fmt.Sprintf("task %d is restoring", q), http.StatusServiceUnavailable)
		return
	}
	tick, match, err := st.getAsOf(symbol, at)
	switch {
	case errors.Is(err, errTaskStopped):
		http.Error(rw, err.Error(), http.StatusMisdirectedRequest)
		return
	case err != nil:
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	case match == statestore.Miss:
		http.Error(rw, fmt.Sprintf("no price for %q", symbol), http.StatusNotFound)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(Price{Symbol: symbol, Price: tick.Price, TsMs: tick.TimestampMs, Offset: tick.Offset,
		Task: q, AtMs: atMs, Late: match == statestore.Late})
}

// remoteClient looks prices up from their owners.
type remoteClient struct {
	http    *http.Client
	timeout time.Duration
	hist    prometheus.Histogram
}

// lookup asks the member at addr for symbol's price as of tsMs. found is
// false when the owner has no price. Transient failures (unreachable,
// restoring, not the owner yet) are retried until the timeout.
func (c *remoteClient) lookup(ctx context.Context, addr, symbol string, tsMs int64) (p Price, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := "http://" + addr + "/v1/prices/" + url.PathEscape(symbol) + "?at_ms=" + strconv.FormatInt(tsMs, 10)
	start := time.Now()
	defer func() { c.hist.Observe(time.Since(start).Seconds()) }()
	for attempt := 0; ; attempt++ {
		p, found, retry, err := c.get(ctx, u)
		if err == nil || !retry {
			return p, found, err
		}
		if serr := sleep(ctx, backoff(attempt)/2); serr != nil {
			return Price{}, false, fmt.Errorf("price of %q from %s: %w (last: %v)", symbol, addr, serr, err)
		}
	}
}

func (c *remoteClient) get(ctx context.Context, u string) (p Price, found, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Price{}, false, false, err
	}
	res, err := c.http.Do(req)
	if err != nil {
		return Price{}, false, true, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	if err != nil {
		return Price{}, false, true, err
	}
	switch res.StatusCode {
	case http.StatusOK:
		if err := json.Unmarshal(body, &p); err != nil {
			return Price{}, false, false, fmt.Errorf("GET %s: bad answer: %w", u, err)
		}
		return p, true, false, nil
	case http.StatusNotFound:
		return Price{}, false, false, nil
	case http.StatusServiceUnavailable, http.StatusMisdirectedRequest, http.StatusBadGateway, http.StatusGatewayTimeout:
		return Price{}, false, true, fmt.Errorf("GET %s: %s", u, res.Status)
	default:
		return Price{}, false, false, fmt.Errorf("GET %s: %s: %s", u, res.Status, body)
	}
}

// AssignmentView is the answer of GET /v1/assignment.
type AssignmentView struct {
	Instance   string `json:"instance"`
	Generation int32  `json:"generation"`
	Leader     bool   `json:"leader"`
	Partitions int    `json:"partitions"`
	// Tasks are the notification partitions processed here; StateTasks
	// the market partitions whose state is held here.
	Tasks      []int `json:"tasks"`
	StateTasks []int `json:"state_tasks"`
	// Owners[p] is the instance id owning task p's state.
	Owners []string `json:"owners"`
	// Moved is the moved count of this generation's plan.
	Moved int  `json:"moved"`
	Ready bool `json:"ready"`
	Stats
}

func (w *Worker) serveAssignment(rw http.ResponseWriter, _ *http.Request) {
	w.mu.RLock()
	a := w.assignment
	w.mu.RUnlock()
	v := AssignmentView{
		Instance: w.cfg.InstanceID, Generation: a.Generation, Leader: a.Leader, Partitions: a.Partitions,
		Moved: a.Moved, Stats: w.Stats(), Owners: make([]string, len(a.Owners)),
	}
	v.Tasks, v.StateTasks = v.Stats.Tasks, v.Stats.StateTasks
	if v.Tasks == nil {
		v.Tasks = []int{}
	}
	if v.StateTasks == nil {
		v.StateTasks = []int{}
	}
	for i, o := range a.Owners {
		v.Owners[i] = o.InstanceID
	}
	v.Ready, _ = w.Ready()
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}
