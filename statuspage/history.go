package statuspage

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/join"
)

// Sample is one task's lags and join rate at one time.
type Sample struct {
	At time.Time `json:"at"`
	// NotificationLag and MarketLag are TaskStatus's (-1: unknown).
	NotificationLag int64 `json:"notification_lag"`
	MarketLag       int64 `json:"market_lag"`
	// JoinsPerSecond is the task's joins since the previous sample over
	// the time between them; -1 in a task's first sample.
	JoinsPerSecond float64 `json:"joins_per_second"`
}

// history keeps the last n samples of every task in a ring per task.
type history struct {
	mu    sync.Mutex
	n     int
	tasks map[int]*ring
}

type ring struct {
	samples []Sample // len n, next write at pos
	pos     int
	full    bool
	// the join count and time of the previous sample
	joins int64
	at    time.Time
	seen  time.Time
}

func newHistory(n int) *history {
	return &history{n: max(n, 2), tasks: map[int]*ring{}}
}

// record adds a sample of every task at now; tasks not seen for a whole
// window are forgotten.
func (h *history) record(now time.Time, tasks []join.TaskStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range tasks {
		r := h.tasks[t.Task]
		if r == nil {
			r = &ring{samples: make([]Sample, h.n)}
			h.tasks[t.Task] = r
		}
		joins := t.Joins.Total()
		// A task's first sample has no rate: nothing to compare with.
		s := Sample{At: now, NotificationLag: t.NotificationLag, MarketLag: t.MarketLag, JoinsPerSecond: -1}
		if !r.at.IsZero() {
			s.JoinsPerSecond = 0
			d := joins - r.joins
			if d < 0 { // the task restarted here: its counts did too
				d = joins
			}
			if secs := now.Sub(r.at).Seconds(); secs > 0 {
				s.JoinsPerSecond = float64(d) / secs
			}
		}
		r.joins, r.at, r.seen = joins, now, now
		r.samples[r.pos] = s
		r.pos = (r.pos + 1) % h.n
		if r.pos == 0 {
			r.full = true
		}
	}
	for p, r := range h.tasks {
		if now.Sub(r.seen) > HistoryWindow {
			delete(h.tasks, p)
		}
	}
}

// series returns task p's samples of the last window, oldest first.
func (h *history) series(p int) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.tasks[p]
	if r == nil {
		return []Sample{}
	}
	var out []Sample
	if r.full {
		out = append(out, r.samples[r.pos:]...)
	}
	out = append(out, r.samples[:r.pos]...)
	cut := time.Now().Add(-HistoryWindow)
	i := 0
	for i < len(out) && out[i].At.Before(cut) {
		i++
	}
	return out[i:]
}

// spark is a sparkline: the points of an SVG polyline in a
// sparkWidth × sparkHeight box, and the last and greatest values.
type spark struct {
	Points    string
	Last, Max string
	N         int
}

const (
	sparkWidth  = 120
	sparkHeight = 24
)

// sparkOf draws the values picked from samples; negative values (unknown)
// are left out.
func sparkOf(samples []Sample, pick func(Sample) float64) spark {
	var vals []float64
	for _, s := range samples {
		if v := pick(s); v >= 0 {
			vals = append(vals, v)
		}
	}
	sp := spark{N: len(vals)}
	if len(vals) == 0 {
		return sp
	}
	top := 0.0
	for _, v := range vals {
		top = max(top, v)
	}
	var b strings.Builder
	for i, v := range vals {
		x := 0.0
		if len(vals) > 1 {
			x = float64(i) * sparkWidth / float64(len(vals)-1)
		}
		y := float64(sparkHeight - 1)
		if top > 0 {
			y = 1 + (sparkHeight-2)*(1-v/top)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	if len(vals) == 1 { // a dot, drawn as a short flat line
		fmt.Fprintf(&b, " %d,%s", sparkWidth, strings.SplitN(b.String(), ",", 2)[1])
	}
	sp.Points, sp.Last, sp.Max = b.String(), compact(vals[len(vals)-1]), compact(top)
	return sp
}

// compact formats v shortly: 12, 3.4, 12.3k, 4.5M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v == float64(int64(v)):
		return strconv.FormatInt(int64(v), 10)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}
