package record

import (
	"encoding/json"
	"strconv"
	"testing"
)

// Benchmarks of the per-record codec work (go test -run x -bench . -benchmem
// ./record): the schema scanner against the reflection decoder it replaced,
// and AppendAlert into a reused buffer against json.Marshal. One op is one
// record, so allocs/op is the allocations per notification of each step.

var (
	benchNotification = []byte(`{"id":"bench-n-123456","user":"u-42","symbol":"SYM0421","text":"SYM0421 moved 1.5%"}`)
	benchTick         = []byte(`{"symbol":"SYM0421","price":9125.5}`)
	benchAlert        = Alert{
		Notification:     Notification{ID: "bench-n-123456", User: "u-42", Symbol: "SYM0421", Text: "SYM0421 moved 1.5%"},
		NotificationTsMs: 1764489600123, Price: float(9125.5), PriceTsMs: 1764489600000, Result: ResultLocal, Worker: "worker-1",
	}
)

func BenchmarkDecodeNotification(b *testing.B) {
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(benchNotification)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeNotification(benchNotification, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.SetBytes(int64(len(benchNotification)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeNotificationShared(benchNotification, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("value", func(b *testing.B) { // the join's: Decoder.Notification
		d := NewDecoder(Fields{}, 0)
		b.SetBytes(int64(len(benchNotification)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.Notification(benchNotification); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		b.SetBytes(int64(len(benchNotification)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refDecodeNotification(benchNotification, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// sizedNotification is a notification of the loadgen's shape of about
// size bytes: up to 100 bytes its text is longer, above that a "meta"
// object member whose "body" string fills the rest, as `joiner loadgen
// --notification-bytes` pads it.
func sizedNotification(size int) []byte {
	v := []byte(`{"id":"n0-SYM0421-12345","user":"u42","symbol":"SYM0421","text":"SYM0421 moved`)
	const head, tail = `,"meta":{"channel":"push","lang":"id","body":"`, `"}`
	if size <= 100 {
		for i := 0; len(v)+2 < size; i++ {
			v = append(v, " today"[i%6])
		}
		return append(v, `"}`...)
	}
	v = append(v, `"`+head...)
	for i := 0; len(v)+len(tail)+1 < size; i++ {
		v = append(v, "lorem ipsum "[i%12])
	}
	return append(v, tail+"}"...)
}

// BenchmarkNotificationSizes: Decoder.Notification, the join's decoder, of
// notifications of 100 bytes (flat) and 400 bytes (padded by a nested
// "meta" object, as the bench's --notification-bytes 400 backlog is).
func BenchmarkNotificationSizes(b *testing.B) {
	for _, size := range []int{100, 400} {
		v := sizedNotification(size)
		if len(v) != size {
			b.Fatalf("sizedNotification(%d) has %d bytes: %s", size, len(v), v)
		}
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			d := NewDecoder(Fields{}, 0)
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Notification(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodeTick(b *testing.B) {
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(benchTick)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeTick(benchTick, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.SetBytes(int64(len(benchTick)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeTickShared(benchTick, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflection", func(b *testing.B) {
		b.SetBytes(int64(len(benchTick)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refDecodeTick(benchTick, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncodeAlert(b *testing.B) {
	b.Run("AppendAlert", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = AppendAlert(buf[:0], &benchAlert)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("splice", func(b *testing.B) { // the join's: AlertEncoder.AppendPriced of the notification's bytes
		n, err := NewDecoder(Fields{}, 0).Notification(benchNotification)
		if err != nil {
			b.Fatal(err)
		}
		e := NewAlertEncoder(benchAlert.Worker)
		fields := AppendPriceFields(nil, *benchAlert.Price, benchAlert.PriceTsMs)
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = e.AppendPriced(buf[:0], &n, benchAlert.NotificationTsMs, fields, ResultLocal)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			out, err := json.Marshal(&benchAlert)
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.SetBytes(int64(n))
	})
}

// mustJSON is the reflection encoder the alert encoder replaced, for
// comparison.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
