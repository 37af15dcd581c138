package node

import (
	"strings"
	"testing"
)

// TestCheckFileLimit: a soft limit below the tasks' needs is raised to
// the hard one; a hard limit below them too is an error naming what to
// set; enough is left alone.
func TestCheckFileLimit(t *testing.T) {
	need := filesNeeded(1024)
	if need != 1024*4+512+256 {
		t.Fatalf("filesNeeded(1024) = %d, want %d", need, 1024*4+512+256)
	}
	for _, tc := range []struct {
		name      string
		cur, hard uint64
		wantSet   bool
		wantLimit uint64
		wantErr   bool
	}{
		{"enough", need, need, false, need, false},
		{"soft low, hard enough", 1024, 1 << 20, true, 1 << 20, false},
		{"both low", 1024, 2048, true, 2048, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := false
			limit, err := checkFileLimit(1024,
				func() (uint64, uint64, error) { return tc.cur, tc.hard, nil },
				func(cur, max uint64) error {
					set = true
					if cur != tc.hard || max != tc.hard {
						t.Errorf("setrlimit(%d, %d); want the hard limit %d for both", cur, max, tc.hard)
					}
					return nil
				})
			if set != tc.wantSet || limit != tc.wantLimit || (err != nil) != tc.wantErr {
				t.Fatalf("set %v, limit %d, err %v; want set %v, limit %d, error %v", set, limit, err, tc.wantSet, tc.wantLimit, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "ulimit -n 4864") {
				t.Errorf("error %q does not say what to set", err)
			}
		})
	}
}
