package loadgen

import (
	"encoding/json"
	"testing"

	"github.com/joiner-dev/joiner/record"
)

// TestShapedNotifications: every shape is a notification the join takes,
// with the symbol under the given name, members of its own, and the
// shape of members named like the join's counted as conflicts.
func TestShapedNotifications(t *testing.T) {
	for _, f := range []record.Fields{{}, {Symbol: "ticker", Price: "last"}} {
		d := record.NewDecoder(f, 0)
		for shape := range NumShapes {
			for _, id := range []string{"n-1", ""} {
				n := record.Notification{ID: id, User: "u42", Symbol: "BBCA", Text: "BBCA moved"}
				v := ShapedNotification(nil, &n, f, shape, "ref-1")
				got, err := d.Notification(v)
				if err != nil || got.Symbol != "BBCA" {
					t.Fatalf("shape %d with %+v: %s: %+v, %v", shape, f, v, got, err)
				}
				if (got.Conflicts() != 0) != (shape == 3) {
					t.Errorf("shape %d: conflicts %05b", shape, got.Conflicts())
				}
				var m map[string]any
				if err := json.Unmarshal(v, &m); err != nil || m["ref"] != "ref-1" || (m["id"] != nil) != (id != "") || len(m) < 3 {
					t.Errorf("shape %d: %s: %v, %v", shape, v, m, err)
				}
			}
		}
	}
	if h := NotificationHeaders(7); len(h) != 6 || string(h[0].Value) != "00-00000000000000000000000000000008-0000000000000008-01" {
		t.Errorf("headers %v", h)
	}
}

// TestNotificationBytes: a padded notification has the size asked for,
// is one the join takes, and keeps its members; a size below the
// notification's pads nothing.
func TestNotificationBytes(t *testing.T) {
	n := record.Notification{ID: "n-1", User: "u42", Symbol: "BBCA", Text: "BBCA moved"}
	plain := NotificationValue(Config{}, &n, 0)
	for _, size := range []int{0, 10, len(plain), 100, 400, 4000} {
		for _, extra := range []bool{false, true} {
			v := NotificationValue(Config{NotificationBytes: size, ExtraFields: extra}, &n, 0)
			if size > len(plain)+60 && len(v) != size {
				t.Errorf("size %d: %d bytes: %s", size, len(v), v)
			}
			if size <= len(plain) && !extra && string(v) != string(plain) {
				t.Errorf("size %d padded %s", size, v)
			}
			var m map[string]any
			if err := json.Unmarshal(v, &m); err != nil || m["id"] != "n-1" || m["symbol"] != "BBCA" {
				t.Errorf("size %d: %s: %v %v", size, v, m, err)
			}
			if _, err := record.NewDecoder(record.Fields{}, 0).Notification(v); err != nil {
				t.Errorf("size %d: %v", size, err)
			}
		}
	}
}
