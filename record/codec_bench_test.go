package record

import (
	"encoding/json"
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
