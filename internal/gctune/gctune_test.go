package gctune

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	if got := Apply(); got != -1 {
		t.Errorf("with GOGC set, Apply() = %d, want -1 (GOGC decides)", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the target became %d, want it left at 100", got)
	}
}

func TestApplyDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// t.Setenv restores GOGC after the test; unset it for this one.
	t.Setenv("GOGC", "")
	unsetenv(t, "GOGC")
	if got := Apply(); got != DefaultPercent {
		t.Errorf("Apply() = %d, want %d", got, DefaultPercent)
	}
	if got := debug.SetGCPercent(100); got != DefaultPercent {
		t.Errorf("the target is %d, want %d", got, DefaultPercent)
	}
}

func unsetenv(t *testing.T, key string) {
	t.Helper()
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}
