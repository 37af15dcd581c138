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
	"github.com/joiner-dev/joiner/internal/backoff"
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

// The errors of PriceAsOf, which the HTTP API maps to 421, 503, 503 and
// 404.
var (
	ErrNotOwner  = errors.New("task not held by this member")
	ErrRestoring = errors.New("task is restoring")
	// ErrNotReadPast: the task's market has not been read past the time
	// asked for within crossTaskWait; ask again later.
	ErrNotReadPast = errors.New("market not read past the time asked for yet")
	ErrNoPrice     = errors.New("no price")
)

// errNotReadPast is ErrNotReadPast, as join's own waits return it.
var errNotReadPast = ErrNotReadPast

// crossTaskWait bounds how long a lookup of another task's price waits
// for that task's market to be read past the notification's time: the
// owner's wait in PriceAsOf, and a merged task's wait for another task
// held on the same member. A merged task's merge loop does not read its
// own market while it waits, so the wait is short, and the merge goes on
// reading its market before it asks again (runMerged).
const crossTaskWait = 250 * time.Millisecond

// PriceAsOf is the local as-of lookup other members ask for (GET
// /v1/prices/{symbol}): the symbol's latest price, or with atMs the version
// as of *atMs, after first waiting up to crossTaskWait until the task has
// been read past *atMs or to its end. Its errors wrap ErrNotOwner,
// ErrRestoring, ErrNotReadPast (not read past *atMs in that time: the
// caller asks again) or ErrNoPrice, or are ctx's error or a store error.
func (w *Processor) PriceAsOf(ctx context.Context, symbol string, atMs *int64) (Price, error) {
	return w.PriceAsOfTask(ctx, symbol, SymbolTask(symbol, w.partitions()), atMs)
}

// PriceAsOfTask is PriceAsOf from the store of task q, which need not be
// symbol's task under the current partition count: after the count
// changed, the task that held a moved symbol before is asked for its
// history too (repartition.go). GET /v1/prices/{symbol}?task=q.
func (w *Processor) PriceAsOfTask(ctx context.Context, symbol string, q int, atMs *int64) (Price, error) {
	st := w.stateTask(q)
	if st == nil {
		return Price{}, fmt.Errorf("%w: task %d of %q is not held by %s", ErrNotOwner, q, symbol, w.cfg.InstanceID)
	}
	at := int64(math.MaxInt64)
	if atMs != nil {
		at = *atMs
		if err := st.waitFor(ctx, at, w.cfg.MaxTaskIdle, crossTaskWait); err != nil {
			switch {
			case ctx.Err() != nil:
				return Price{}, ctx.Err()
			case errors.Is(err, ErrNotReadPast):
				return Price{}, err
			}
			// The task stopped: getAsOf answers ErrNotOwner.
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
// restoring, not the owner yet, not read past tsMs yet) are retried until
// the timeout.
func (c *remoteClient) lookup(ctx context.Context, addr, symbol string, task int, tsMs int64) (p Price, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := priceURL(addr, symbol, task, tsMs)
	start := time.Now()
	defer func() { c.hist.Observe(time.Since(start).Seconds()) }()
	var last, final error // the last failure; one no retry fixes
	err = backoff.Do(ctx, remoteRetry, nil, func(ctx context.Context) error {
		var again bool
		p, found, again, last = c.get(ctx, u)
		if last != nil && !again {
			final = last
			return backoff.Permanent(last)
		}
		return last
	})
	switch {
	case final != nil:
		return p, found, final
	case err != nil:
		// The last failure is told, not wrapped: the lookup failed
		// because its time ran out.
		return Price{}, false, fmt.Errorf("price of %q from %s: %w (last: %v)", symbol, addr, ctx.Err(), last)
	}
	return p, found, nil
}

// remoteRetry spaces the retries of a remote lookup: half the default
// delays, within its RemoteTimeout.
var remoteRetry = backoff.Policy{Min: backoff.Default.Min / 2, Max: backoff.Default.Max / 2}

// lookupOnce is lookup without retries, for a merged task's merge loop,
// which must not stop reading its own market for long (the owner may be
// waiting for it): it asks once, bounded by crossTaskWait and a second
// for the network. A 503 (restoring, or not read past tsMs yet) returns an
// error wrapping ErrNotReadPast; the merge retries every failure later,
// reading its market meanwhile.
func (c *remoteClient) lookupOnce(ctx context.Context, addr, symbol string, task int, tsMs int64) (p Price, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, min(c.timeout, crossTaskWait+time.Second))
	defer cancel()
	start := time.Now()
	defer func() { c.hist.Observe(time.Since(start).Seconds()) }()
	p, found, _, err = c.get(ctx, priceURL(addr, symbol, task, tsMs))
	if err != nil {
		return Price{}, false, fmt.Errorf("price of %q from %s: %w", symbol, addr, err)
	}
	return p, found, nil
}

// priceURL asks addr for symbol's price as of tsMs from task's store.
func priceURL(addr, symbol string, task int, tsMs int64) string {
	return "http://" + addr + "/v1/prices/" + url.PathEscape(symbol) + "?at_ms=" + strconv.FormatInt(tsMs, 10) + "&task=" + strconv.Itoa(task)
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
	case http.StatusServiceUnavailable:
		// Restoring, or not read past the time asked for yet.
		return Price{}, false, true, fmt.Errorf("GET %s: %s: %w", u, res.Status, ErrNotReadPast)
	case http.StatusMisdirectedRequest, http.StatusBadGateway, http.StatusGatewayTimeout:
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
// from the local store when this member holds q, otherwise from q's owner
// (once, without retries, for a merge loop: see lookupOnce).
func (w *taskEnv) lookup(ctx context.Context, a *record.Alert, price *float64, q int, symbol string, tsMs int64, once bool) error {
	return w.lookupIn(ctx, a, price, w.peers.stateTask(q), q, symbol, tsMs, once)
}

// lookupIn is lookup with q's state task (nil when not held here) already
// looked up.
func (w *taskEnv) lookupIn(ctx context.Context, a *record.Alert, price *float64, st *stateTask, q int, symbol string, tsMs int64, once bool) error {
	if st != nil {
		tick, match, err := st.getAsOf(symbol, tsMs)
		switch {
		case err == nil:
			setPrice(a, price, match, record.ResultLocal, tick.Price, tick.TimestampMs)
			return nil
		case !errors.Is(err, errTaskStopped):
			return fmt.Errorf("%w: task %d: %w", errLookup, q, err)
		}
		// The task left this member meanwhile: ask its new owner.
	}
	owner, ok := w.peers.owner(q)
	if !ok || owner.InstanceID == w.instanceID || owner.Addr == "" {
		return fmt.Errorf("%w: task %d of %q has no known owner to ask", errLookup, q, symbol)
	}
	ask := w.remote.lookup
	if once {
		ask = w.remote.lookupOnce
	}
	p, found, err := ask(ctx, owner.Addr, symbol, q, tsMs)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNotReadPast) {
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
	setPrice(a, price, match, record.ResultRemote, p.Price, p.TsMs)
	return nil
}

// setPrice fills the join result of a: found is the result of a price
// as of the notification (local or remote). The price is stored in *slot,
// which a.Price then points to (a chunk's prices share one array).
func setPrice(a *record.Alert, slot *float64, m statestore.Match, found record.Result, price float64, tsMs int64) {
	switch m {
	case statestore.AsOf:
		*slot = price
		a.Result, a.Price, a.PriceTsMs = found, slot, tsMs
	case statestore.Late:
		*slot = price
		a.Result, a.Price, a.PriceTsMs = record.ResultLate, slot, tsMs
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
