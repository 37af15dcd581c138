package join

import (
	"context"
	"errors"
	"testing"

	"github.com/joiner-dev/joiner/group"
)

// PriceAsOf answers the version as of T, names the tick (ts_ms, offset)
// and says when T is older than the kept history; its errors are the
// sentinels the HTTP API maps to status codes.
func TestPriceAsOf(t *testing.T) {
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
	at := func(ms int64) *int64 { return &ms }
	for _, c := range []struct {
		name         string
		at           *int64
		err          error
		price        float64
		tsMs, offset int64
	}{
		{"latest", nil, nil, 3, 3000, 2},
		{"between versions", at(2500), nil, 2, 2000, 1},
		{"exact", at(3000), nil, 3, 3000, 2},
		{"before the first", at(999), ErrNoPrice, 0, 0, 0},
	} {
		p, err := w.PriceAsOf(context.Background(), "BBCA", c.at)
		if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.err)
			continue
		}
		if p.Price != c.price || p.TsMs != c.tsMs || p.Offset != c.offset || p.Late || (p.AtMs != nil) != (c.at != nil && c.err == nil) {
			t.Errorf("%s: %+v, want price %v from %d@%d", c.name, p, c.price, c.tsMs, c.offset)
		}
	}
	// After pruning at 2500, 1500 is older than the kept history: the
	// oldest kept version, late.
	_, err := st.store.Prune(2500)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := w.PriceAsOf(context.Background(), "BBCA", at(1500)); err != nil || !p.Late || p.Price != 2 {
		t.Errorf("as of 1500 after pruning = %+v, %v; want the version at 2000, late", p, err)
	}

	// A task that is not restored yet is ErrRestoring.
	st.restored = make(chan struct{})
	if _, err := w.PriceAsOf(context.Background(), "BBCA", nil); !errors.Is(err, ErrRestoring) {
		t.Errorf("restoring task: err %v, want ErrRestoring", err)
	}
	close(st.restored)
	// A task not held here is ErrNotOwner.
	w.mu.Lock()
	w.assignment.Partitions = 2
	w.mu.Unlock()
	for _, s := range []string{"A", "B", "C", "D", "E", "F"} {
		if SymbolTask(s, 2) != 1 {
			continue
		}
		if _, err := w.PriceAsOf(context.Background(), s, nil); !errors.Is(err, ErrNotOwner) {
			t.Errorf("symbol %s of task 1: err %v, want ErrNotOwner", s, err)
		}
		return
	}
	t.Fatal("no symbol of task 1 among the candidates")
}

// View reports the assignment's owners, tasks and readiness.
func TestView(t *testing.T) {
	w, _, _ := newTestWorker(t)
	w.mu.Lock()
	w.assigned = true
	w.assignment = group.Assignment{Generation: 7, Leader: true, Partitions: 1, Moved: 1,
		Owners: []group.Owner{{InstanceID: "w"}}, Topics: map[string][]int{"market": {0}}}
	w.mu.Unlock()
	v := w.View()
	if v.Instance != "w" || v.Generation != 7 || !v.Leader || v.Partitions != 1 || v.Moved != 1 ||
		len(v.Owners) != 1 || v.Owners[0] != "w" || len(v.StateTasks) != 1 || v.Tasks == nil || len(v.Tasks) != 0 || !v.Ready {
		t.Fatalf("View = %+v", v)
	}
}
