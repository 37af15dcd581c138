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

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/prometheus/client_golang/prometheus"
)

// Price is the answer of GET /v1/prices/{symbol} (Processor.PriceAsOf): one version of the
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

// The errors of PriceAsOf, which the HTTP API maps to 421, 503 and 404.
var (
	ErrNotOwner  = errors.New("task not held by this member")
	ErrRestoring = errors.New("task is restoring")
	ErrNoPrice   = errors.New("no price")
)

// PriceAsOf is the local as-of lookup other members ask for (GET
// /v1/prices/{symbol}): the symbol's latest price, or with atMs the version
// as of *atMs, after first waiting up to MaxTaskIdle until the task has
// been read past *atMs or to its end. Its errors wrap ErrNotOwner,
// ErrRestoring or ErrNoPrice, or are ctx's error or a store error.
func (w *Processor) PriceAsOf(ctx context.Context, symbol string, atMs *int64) (Price, error) {
	q := SymbolTask(symbol, w.partitions())
	st := w.stateTask(q)
	if st == nil {
		return Price{}, fmt.Errorf("%w: task %d of %q is not held by %s", ErrNotOwner, q, symbol, w.cfg.InstanceID)
	}
	at := int64(math.MaxInt64)
	if atMs != nil {
		at = *atMs
		if err := st.waitFor(ctx, at, w.cfg.MaxTaskIdle); err != nil && ctx.Err() != nil {
			return Price{}, ctx.Err()
		}
	}
	if !st.isRestored() {
		return Price{}, fmt.Errorf("%w: task %d", ErrRestoring, q)
	}
	tick, match, err := st.getAsOf(symbol, at)
	switch {
	case errors.Is(err, errTaskStopped):
		return Price{}, fmt.Errorf("%w: %w", ErrNotOwner, err)
	case err != nil:
		return Price{}, err
	case match == statestore.Miss:
		return Price{}, fmt.Errorf("%w for %q", ErrNoPrice, symbol)
	}
	return Price{Symbol: symbol, Price: tick.Price, TsMs: tick.TimestampMs, Offset: tick.Offset,
		Task: q, AtMs: atMs, Late: match == statestore.Late}, nil
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

// errLookup marks a price lookup that failed (a local store fault, or the
// owner could not be asked): the batch is not written, and is retried.
// A fault never becomes a miss alert.
var errLookup = errors.New("price lookup failed")

// lookup sets a's result and price as of tsMs for symbol, whose task is q:
// from the local store when this member holds q, otherwise from q's owner.
func (w *Processor) lookup(ctx context.Context, a *record.Alert, q int, symbol string, tsMs int64) error {
	return w.lookupIn(ctx, a, w.stateTask(q), q, symbol, tsMs)
}

// lookupIn is lookup with q's state task (nil when not held here) already
// looked up.
func (w *Processor) lookupIn(ctx context.Context, a *record.Alert, st *stateTask, q int, symbol string, tsMs int64) error {
	if st != nil {
		// symbol may alias a fetched record (processTask.decode).
		tick, match, err := st.getAsOf(st.symbols.intern(symbol), tsMs)
		switch {
		case err == nil:
			setPrice(a, match, record.ResultLocal, tick.Price, tick.TimestampMs)
			return nil
		case !errors.Is(err, errTaskStopped):
			return fmt.Errorf("%w: task %d: %w", errLookup, q, err)
		}
		// The task left this member meanwhile: ask its new owner.
	}
	owner, ok := w.owner(q)
	if !ok || owner.InstanceID == w.cfg.InstanceID || owner.Addr == "" {
		return fmt.Errorf("%w: task %d of %q has no known owner to ask", errLookup, q, symbol)
	}
	p, found, err := w.remote.lookup(ctx, owner.Addr, symbol, tsMs)
	if err != nil {
		if ctx.Err() == nil {
			w.metrics.RemoteLookupErrs.Inc()
		}
		return fmt.Errorf("%w: task %d from %s: %w", errLookup, q, owner.InstanceID, err)
	}
	match := statestore.Miss
	switch {
	case found && p.Late:
		match = statestore.Late
	case found:
		match = statestore.AsOf
	}
	setPrice(a, match, record.ResultRemote, p.Price, p.TsMs)
	return nil
}

// setPrice fills the join result of a: found is the result of a price
// as of the notification (local or remote). The price goes where a.Price
// points when it is set (joinAll gives every alert of a chunk its slot in
// one slice: one allocation per chunk, not one per alert).
func setPrice(a *record.Alert, m statestore.Match, found record.Result, price float64, tsMs int64) {
	switch m {
	case statestore.AsOf, statestore.Late:
		if m == statestore.Late {
			found = record.ResultLate
		}
		if a.Price == nil {
			a.Price = new(float64)
		}
		*a.Price = price
		a.Result, a.PriceTsMs = found, tsMs
	default:
		a.Result, a.Price, a.PriceTsMs = record.ResultMiss, nil, 0
	}
}

func (w *Processor) owner(p int) (group.Owner, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if p < 0 || p >= len(w.assignment.Owners) {
		return group.Owner{}, false
	}
	o := w.assignment.Owners[p]
	return o, o.InstanceID != ""
}
