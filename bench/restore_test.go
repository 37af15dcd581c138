package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreStoreSeconds reads store_seconds from the first bulk
// "restore complete" line of a worker's JSON log, and -1 without one.
func TestRestoreStoreSeconds(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  []string
		want float64
	}{
		{"bulk", []string{
			`{"time":"2026-11-30T17:00:00Z","level":"INFO","msg":"restore started","task":0}`,
			`not json`,
			`{"time":"2026-11-30T17:00:01Z","level":"INFO","msg":"restore complete","task":0,"seconds":1.1,"bulk":true,"store_seconds":0.25}`,
			`{"time":"2026-11-30T17:00:02Z","level":"INFO","msg":"restore complete","task":1,"seconds":0.1,"bulk":true,"store_seconds":0.05}`,
		}, 0.25},
		{"batch by batch", []string{
			`{"time":"2026-11-30T17:00:01Z","level":"INFO","msg":"restore complete","task":0,"seconds":1.1,"bulk":false}`,
		}, -1},
		{"no restore", nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w1.log")
			if err := os.WriteFile(path, []byte(strings.Join(tc.log, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := restoreStoreSeconds([]*proc{{log: f}}); got != tc.want {
				t.Fatalf("restoreStoreSeconds = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRestoreSplit: the time of a restore's reading (its seconds less its
// storing) is compared with the raw consume of its own round, and the
// split is left out when a round has no store_seconds.
func TestRestoreSplit(t *testing.T) {
	r := &results{restore: []restoreRound{
		{Kind: "joiner", Round: 1, Records: 1e6, Seconds: 1.2, StoreSeconds: 0.2},
		{Kind: "raw consume", Round: 1, Records: 1e6, Seconds: 0.8},
		{Kind: "joiner", Round: 2, Records: 1e6, Seconds: 1.0, StoreSeconds: 0.1},
		{Kind: "raw consume", Round: 2, Records: 1e6, Seconds: 1.0},
		{Kind: "joiner", Round: 3, Records: 1e6, Seconds: 1.1, StoreSeconds: 0.3},
		{Kind: "raw consume", Round: 3, Records: 1e6, Seconds: 0.5},
	}}
	st, rd, ok := r.restoreSplit()
	if !ok || st.Min != 0.1 || st.Median != 0.2 || st.Max != 0.3 {
		t.Fatalf("storing %+v (ok %v), want 0.1, 0.2, 0.3", st, ok)
	}
	if rd.Min != 0.9 || rd.Median != 1.25 || rd.Max != 1.6 {
		t.Fatalf("reading / raw consume %+v, want 0.9, 1.25, 1.6", rd)
	}
	if !strings.Contains(r.summary(), "storing after the last fetch 200ms") {
		t.Fatalf("summary has no split:\n%s", r.summary())
	}
	r.restore[2].StoreSeconds = -1
	if _, _, ok := r.restoreSplit(); ok || strings.Contains(r.summary(), "storing") {
		t.Fatal("a split without every round's store_seconds")
	}
}
