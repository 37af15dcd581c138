package fetch

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestRecords: records before from are skipped, keys and values are
// copied exactly (nil stays nil, empty stays empty, large ones too), and
// no two share spare capacity: appending to one leaves the others as they
// were.
func TestRecords(t *testing.T) {
	big := strings.Repeat("x", ownBufferMin+1)
	cases := []struct {
		name       string
		key, value []byte
		wantNilKey bool
		wantNilVal bool
	}{
		{"plain", []byte("k"), []byte(`{"a":1}`), false, false},
		{"null key", nil, []byte("v"), true, false},
		{"null value", []byte("k"), nil, false, true},
		{"empty", []byte{}, []byte{}, false, false},
		{"large value", []byte("k"), []byte(big), false, false},
		{"value larger than the first buffer", []byte("k"), []byte(strings.Repeat("y", firstSlabBytes+100)), false, false},
	}
	var in []kafka.Record
	var want []Record
	for i := range 3000 {
		c := cases[i%len(cases)]
		v := c.value
		if v != nil && len(v) > 0 && len(v) < 100 {
			v = fmt.Appendf(nil, "%s-%d", v, i)
		}
		r := kafka.Record{Offset: int64(i), Time: time.UnixMilli(int64(1000 + i))}
		if c.key != nil {
			r.Key = kafka.NewBytes(c.key)
		}
		if v != nil {
			r.Value = kafka.NewBytes(v)
		}
		in = append(in, r)
		if i >= 10 {
			want = append(want, Record{Offset: int64(i), Time: r.Time, Key: c.key, Value: v})
		}
	}
	got, err := Records(kafka.NewRecordReader(in...), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records; want %d", len(got), len(want))
	}
	check := func() {
		t.Helper()
		for i := range want {
			g, w := got[i], want[i]
			if g.Offset != w.Offset || !g.Time.Equal(w.Time) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) ||
				(g.Key == nil) != (w.Key == nil) || (g.Value == nil) != (w.Value == nil) {
				t.Fatalf("record %d: got %d %v key %q value %.20q; want %d %v key %q value %.20q",
					i, g.Offset, g.Time, g.Key, g.Value, w.Offset, w.Time, w.Key, w.Value)
			}
		}
	}
	check()
	for i := range got {
		_ = append(got[i].Key, '!')
		_ = append(got[i].Value, '!')
	}
	check()
}

// A reader's fetches start at FirstMaxBytes and double up to MaxBytes.
func TestNextMaxBytes(t *testing.T) {
	var got []int
	for prev, i := 0, 0; i < 7; i++ {
		prev = NextMaxBytes(prev)
		got = append(got, prev)
	}
	want := []int{64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 1 << 20, 1 << 20}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fetch sizes %v; want %v", got, want)
	}
}

// A first value larger than the first buffer (and smaller than the size
// that gets its own) is copied whole.
func TestRecordsFirstValueLargerThanFirstBuffer(t *testing.T) {
	v := []byte(strings.Repeat("y", firstSlabBytes+100))
	got, err := Records(kafka.NewRecordReader(kafka.Record{Offset: 0, Value: kafka.NewBytes(v)}), 0, nil)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, v) {
		t.Fatalf("got %d records (%v); want the one value of %d bytes", len(got), err, len(v))
	}
}
