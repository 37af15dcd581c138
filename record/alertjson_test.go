package record

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func float(f float64) *float64 { return &f }

func TestAppendAlertMatchesMarshal(t *testing.T) {
	base := Alert{Notification: Notification{ID: "n-1", User: "u7", Symbol: "BBCA", Text: "BBCA moved"}, NotificationTsMs: 1700000000123, Price: float(9125.5), PriceTsMs: 1700000000000, Result: ResultLocal, Worker: "worker-1"}
	tests := []struct {
		name string
		edit func(a *Alert)
	}{
		{"full", func(*Alert) {}},
		{"miss: no price", func(a *Alert) { a.Price, a.PriceTsMs, a.Result = nil, 0, ResultMiss }},
		{"no user, no text", func(a *Alert) { a.User, a.Text = "", "" }},
		{"zero price is written", func(a *Alert) { a.Price = float(0) }},
		{"negative zero", func(a *Alert) { a.Price = float(math.Copysign(0, -1)) }},
		{"price 1e21", func(a *Alert) { a.Price = float(1e21) }},
		{"price just below 1e21", func(a *Alert) { a.Price = float(999999999999999900000) }},
		{"price 1e-7", func(a *Alert) { a.Price = float(1e-7) }},
		{"price 1e-6", func(a *Alert) { a.Price = float(1e-6) }},
		{"price max", func(a *Alert) { a.Price = float(math.MaxFloat64) }},
		{"price smallest", func(a *Alert) { a.Price = float(math.SmallestNonzeroFloat64) }},
		{"negative timestamps", func(a *Alert) { a.NotificationTsMs, a.PriceTsMs = -1, math.MinInt64 }},
		{"zero notification ts is written", func(a *Alert) { a.NotificationTsMs = 0 }},
		{"escapes", func(a *Alert) { a.Text = "\"\\/\b\f\n\r\t\x00\x1f\x7f <a href='x'>&amp;</a>" }},
		{"unicode", func(a *Alert) { a.Text = "é 😀 \u2028\u2029 \ufffd" }},
		{"invalid utf-8", func(a *Alert) { a.Text, a.User = "a\xffb\xe2\x82", "\xc0" }},
		{"empty id and symbol are written", func(a *Alert) { a.ID, a.Symbol = "", "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.edit(&a)
			checkAppendAlert(t, &a)
		})
	}
}

// TestAppendAlertEveryField sets every field of Alert (found by reflection,
// embedded structs included) to a non-zero value, so a field added to the
// struct but not to AppendAlert fails here.
func TestAppendAlertEveryField(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var a Alert
		fill(t, r, reflect.ValueOf(&a).Elem(), "Alert")
		checkAppendAlert(t, &a)
	}
}

// TestAppendAlertProperty: random alerts, with fields left empty at random
// (omitempty) and strings drawn from an alphabet of the characters that are
// escaped.
func TestAppendAlertProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		var a Alert
		fill(t, r, reflect.ValueOf(&a).Elem(), "Alert")
		v := reflect.ValueOf(&a).Elem()
		zeroRandomly(r, v)
		checkAppendAlert(t, &a)
	}
}

func zeroRandomly(r *rand.Rand, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Struct {
			zeroRandomly(r, f)
			continue
		}
		if r.IntN(3) == 0 {
			f.SetZero()
		}
	}
}

var alphabet = []string{"a", "Z", "0", " ", "\"", "\\", "/", "<", ">", "&", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "😀", "\u2028", "\u2029", "\xff", "\xe2\x82", "\ufffd"}

func randomString(r *rand.Rand) string {
	var b []byte
	for range 1 + r.IntN(12) {
		b = append(b, alphabet[r.IntN(len(alphabet))]...)
	}
	return string(b)
}

func randomFloat(r *rand.Rand) float64 {
	switch r.IntN(4) {
	case 0:
		return math.Float64frombits(r.Uint64()) // any finite bits, checked below
	case 1:
		return float64(r.IntN(1_000_000)) / 100
	case 2:
		return r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30))
	default:
		return float64(r.Int64())
	}
}

func fill(t *testing.T, r *rand.Rand, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(t, r, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.String:
		v.SetString(randomString(r))
	case reflect.Int64, reflect.Int, reflect.Int32:
		n := r.Int64()
		if n == 0 {
			n = 1
		}
		if r.IntN(2) == 0 {
			n = -n
		}
		v.SetInt(n)
	case reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Float64 {
			t.Fatalf("%s: teach fill (and AppendAlert) about %s", path, v.Type())
		}
		f := randomFloat(r)
		for math.IsNaN(f) || math.IsInf(f, 0) {
			f = randomFloat(r)
		}
		v.Set(reflect.ValueOf(&f))
	case reflect.Float64:
		v.SetFloat(randomFloat(r))
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("%s: teach fill (and AppendAlert) about kind %s", path, v.Kind())
	}
}

func checkAppendAlert(t *testing.T, a *Alert) {
	t.Helper()
	want, err := json.Marshal(a)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	prefix := []byte("prefix")
	got := AppendAlert(prefix, a)
	if !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("AppendAlert(%+v)\n got %s\nwant %s", *a, got[len(prefix):], want)
	}
	// The worker's encoder (its tails encoded once), and another worker's,
	// which falls back to AppendAlert.
	for _, e := range []*AlertEncoder{NewAlertEncoder(a.Worker), NewAlertEncoder(a.Worker + "-other")} {
		got := e.Append([]byte("prefix"), a)
		if !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("AlertEncoder(%q).Append(%+v)\n got %s\nwant %s", e.worker, *a, got[len(prefix):], want)
		}
		// With the price's fields encoded once (a priced alert, by the
		// alert's worker).
		if a.Price == nil || e.worker != a.Worker {
			continue
		}
		// The join's path: the notification's own bytes, spliced.
		nv, err := NewDecoder(Fields{}, 1<<20).Notification(AppendNotification(nil, &a.Notification))
		if err != nil {
			continue // a symbol the join refuses
		}
		got = e.AppendPriced([]byte("prefix"), &nv, a.NotificationTsMs, AppendPriceFields([]byte("junk"), *a.Price, a.PriceTsMs)[4:], a.Result)
		if !bytes.Equal(got[:len(prefix)], []byte("prefix")) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("AlertEncoder(%q).AppendPriced(%+v)\n got %s\nwant %s", e.worker, *a, got[len(prefix):], want)
		}
		got = e.AppendJoined([]byte("prefix"), &nv, a)
		if !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("AlertEncoder(%q).AppendJoined(%+v)\n got %s\nwant %s", e.worker, *a, got[len(prefix):], want)
		}
	}
}

// FuzzAppendAlert compares AppendAlert with json.Marshal on arbitrary
// strings, prices and timestamps.
func FuzzAppendAlert(f *testing.F) {
	f.Add("n-1", "u7", "BBCA", "BBCA moved <&>", int64(1700000000123), 9125.5, int64(1700000000000), "local", "worker-1", true)
	f.Add("", "", "", "", int64(0), 1e21, int64(0), "miss", "\xff\u2028", false)
	f.Fuzz(func(t *testing.T, id, user, symbol, text string, nts int64, price float64, pts int64, result, worker string, hasPrice bool) {
		if math.IsNaN(price) || math.IsInf(price, 0) {
			return // json.Marshal refuses them; the decoders never let them through
		}
		a := Alert{Notification: Notification{ID: id, User: user, Symbol: symbol, Text: text}, NotificationTsMs: nts, PriceTsMs: pts, Result: Result(result), Worker: worker}
		if hasPrice {
			a.Price = &price
		}
		checkAppendAlert(t, &a)
	})
}

// TestAppendJSONFloatMatchesMarshal: the float formatter, its fast path
// for short decimals included, writes what json.Marshal writes for
// decimals of every length around the fast path's limits, exponents, both
// zeros, and tiny, huge and arbitrary values.
func TestAppendJSONFloatMatchesMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	fs := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 0.2, 0.1 + 0.2, 1e-6, 1e-7, 9.99999e-7, 0.000001, 0.0000015,
		1e15, 1e15 - 1, 1e15 + 1, 999999999999999.9, 99999999999999.99, 1e21, 1e21 - 65536, 1e20, 1e22, 123456789012345678,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 1 << 53, 1<<53 + 2,
		8961.72, 4444.77, 9125.5, 0.5, 1.005, 2.675, 5e-324, 4.35, 0.3, 1.1, 100.000001, 1234567.891011}
	for range 30000 {
		m := r.Int64N(int64(math.Pow10(1 + r.IntN(17))))
		f := float64(m) / math.Pow10(r.IntN(10))
		if r.IntN(2) == 0 {
			f = -f
		}
		fs = append(fs, f, math.Nextafter(f, math.Inf(1)), math.Nextafter(f, math.Inf(-1)))
	}
	for range 20000 {
		fs = append(fs, randomFloat(r), math.Float64frombits(r.Uint64()))
	}
	for _, f := range fs {
		checkJSONFloat(t, f)
	}
}

func checkJSONFloat(t *testing.T, f float64) {
	t.Helper()
	want, err := json.Marshal(f)
	if err != nil {
		return // NaN and infinities: json.Marshal refuses them
	}
	if got := appendJSONFloat([]byte("x"), f); string(got) != "x"+string(want) {
		t.Fatalf("appendJSONFloat(%v) = %s, json.Marshal writes %s", f, got[1:], want)
	}
}

// FuzzAppendJSONFloat compares the float formatter with json.Marshal on
// arbitrary float64s, as bits (every value reachable) and as a decimal
// with few digits (the fast path's case).
func FuzzAppendJSONFloat(f *testing.F) {
	f.Add(uint64(0), int64(91255), uint8(1))
	f.Add(math.Float64bits(math.Copysign(0, -1)), int64(-896172), uint8(2))
	f.Add(math.Float64bits(1e21), int64(999999999999999), uint8(6))
	f.Fuzz(func(t *testing.T, fbits uint64, m int64, k uint8) {
		checkJSONFloat(t, math.Float64frombits(fbits))
		checkJSONFloat(t, float64(m)/math.Pow10(int(k%24)))
	})
}

// TestAppendJSONStringEveryPosition: a byte that needs escaping, or a
// multi-byte character, at every position of strings around the 8-byte
// words of htmlSafeLen, is escaped as json.Marshal does.
func TestAppendJSONStringEveryPosition(t *testing.T) {
	specials := []string{"\"", "\\", "<", ">", "&", "\x00", "\x1f", "\n", "\x7f", " ", "~", "é", "\xff", "\u2028", "😀"}
	for n := range 20 {
		for p := range n + 1 {
			for _, sp := range specials {
				s := strings.Repeat("a", p) + sp + strings.Repeat("b", n-p)
				want, _ := json.Marshal(s)
				if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
					t.Fatalf("appendJSONString(%q) = %s, json.Marshal writes %s", s, got, want)
				}
			}
		}
	}
}

// TestResultIndex: each result's Index is its place in Results, which the
// encoder's tails and join's counts are indexed by; other values have none.
func TestResultIndex(t *testing.T) {
	for i, r := range Results {
		if got := r.Index(); got != i {
			t.Errorf("%q.Index() = %d, want %d", r, got, i)
		}
	}
	if got := Result("other").Index(); got != -1 {
		t.Errorf(`"other".Index() = %d, want -1`, got)
	}
}

// TestAppendPricedAt: with one NotifiedAt across alerts of repeated and
// changing times, AppendPricedAt writes AppendPriced's bytes.
func TestAppendPricedAt(t *testing.T) {
	n, err := NewDecoder(Fields{}, 0).Notification([]byte(`{"symbol":"BBCA","price":1,"text":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	e := NewAlertEncoder("w-1")
	fields := AppendPriceFields(nil, 9125.5, 1764489600000)
	var at NotifiedAt
	for _, ms := range []int64{0, 0, 1764489600123, 1764489600123, 1764489600124, 7, -3, 1764489600123, 1 << 62} {
		want := e.AppendPriced(nil, &n, ms, fields, ResultLocal)
		if got := e.AppendPricedAt([]byte{}, &n, at.Field(ms), fields, ResultLocal); string(got) != string(want) {
			t.Fatalf("notified at %d:\n got %s\nwant %s", ms, got, want)
		}
	}
}
