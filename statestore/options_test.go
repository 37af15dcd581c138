package statestore

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A zero Options takes the exported defaults; NoMinFreeBytes and set
// fields are kept.
func TestOptionsDefaults(t *testing.T) {
	dirs := []string{"a"}
	got := Options{Dirs: dirs}.withDefaults()
	if got.CacheBytes != DefaultCacheBytes || got.Placement != DefaultPlacement || got.Logger == nil || got.FS != vfs.Default ||
		got.CorruptRetention != DefaultCorruptRetention || got.Fatal == nil || got.MinFreeBytes != DefaultMinFreeBytes ||
		got.OpenTimeout != DefaultOpenTimeout {
		t.Errorf("withDefaults = %+v", got)
	}
	got.Dirs[0] = "b"
	if dirs[0] != "a" {
		t.Error("withDefaults did not copy Dirs")
	}
	if got := (Options{MinFreeBytes: NoMinFreeBytes, Placement: PlacementTasks}).withDefaults(); got.MinFreeBytes != NoMinFreeBytes || got.Placement != PlacementTasks {
		t.Errorf("withDefaults changed set fields: MinFreeBytes %d, Placement %q", got.MinFreeBytes, got.Placement)
	}
}
