package record

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestDecodeTick(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   Tick
		reason string
	}{
		{"ok", `{"symbol":"BBCA","price":9125.5}`, Tick{"BBCA", 9125.5}, ""},
		{"extra fields ignored", `{"symbol":"X","price":1,"venue":"IDX"}`, Tick{"X", 1}, ""},
		{"bad json", `{"symbol":`, Tick{}, ReasonInvalidJSON},
		{"not an object", `[1,2]`, Tick{}, ReasonWrongType},
		{"trailing", `{"symbol":"X","price":1} {}`, Tick{}, ReasonInvalidJSON},
		{"no symbol", `{"price":1}`, Tick{}, ReasonMissingField},
		{"empty symbol", `{"symbol":"","price":1}`, Tick{}, ReasonMissingField},
		{"no price", `{"symbol":"X"}`, Tick{}, ReasonMissingField},
		{"price string", `{"symbol":"X","price":"1"}`, Tick{}, ReasonWrongType},
		{"symbol number", `{"symbol":7,"price":1}`, Tick{}, ReasonWrongType},
		{"symbol slash", `{"symbol":"A/B","price":1}`, Tick{}, ReasonInvalidValue},
		{"oversized", `{"symbol":"X","price":1,"pad":"` + strings.Repeat("x", 100) + `"}`, Tick{}, ReasonOversized},
		// A price is a finite number greater than zero.
		{"tiny price", `{"symbol":"X","price":1e-300}`, Tick{"X", 1e-300}, ""},
		{"zero", `{"symbol":"X","price":0}`, Tick{}, ReasonInvalidValue},
		{"minus zero", `{"symbol":"X","price":-0}`, Tick{}, ReasonInvalidValue},
		{"negative", `{"symbol":"X","price":-12.5}`, Tick{}, ReasonInvalidValue},
		{"underflows to zero", `{"symbol":"X","price":1e-400}`, Tick{}, ReasonInvalidValue},
		{"NaN string", `{"symbol":"X","price":"NaN"}`, Tick{}, ReasonWrongType},
		{"NaN bare", `{"symbol":"X","price":NaN}`, Tick{}, ReasonInvalidJSON},
		{"Infinity bare", `{"symbol":"X","price":Infinity}`, Tick{}, ReasonInvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeTick([]byte(tt.in), 64)
			if tt.reason == "" {
				if err != nil || got != tt.want {
					t.Fatalf("DecodeTick = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var re *Error
			if !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("DecodeTick error = %v; want reason %s", err, tt.reason)
			}
		})
	}
}

// CheckKey: a market record's key is its tick's symbol, byte for byte.
func TestCheckKey(t *testing.T) {
	for _, tt := range []struct {
		key, symbol string
		ok          bool
	}{
		{"BBCA", "BBCA", true},
		{"bbca", "BBCA", false},
		{"", "BBCA", false},
		{"BBCA ", "BBCA", false},
		{"BBC", "BBCA", false},
	} {
		err := CheckKey([]byte(tt.key), tt.symbol)
		if (err == nil) != tt.ok || (err != nil && ReasonOf(err) != ReasonKeyMismatch) {
			t.Errorf("CheckKey(%q, %q) = %v, want ok %v (else reason %s)", tt.key, tt.symbol, err, tt.ok, ReasonKeyMismatch)
		}
	}
	if err := CheckKey(nil, "BBCA"); err == nil {
		t.Error("a tick without a key was accepted")
	}
}

func TestDecodeNotification(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   Notification
		reason string
	}{
		{"ok", `{"id":"n1","user":"u","symbol":"BBCA","text":"hi"}`, Notification{"n1", "u", "BBCA", "hi"}, ""},
		{"minimal", `{"id":"n1","symbol":"BBCA"}`, Notification{ID: "n1", Symbol: "BBCA"}, ""},
		{"no id", `{"symbol":"BBCA"}`, Notification{}, ReasonMissingField},
		{"no symbol", `{"id":"n1"}`, Notification{}, ReasonMissingField},
		{"user number", `{"id":"n1","symbol":"S","user":3}`, Notification{}, ReasonWrongType},
		{"garbage", "\x00\x01", Notification{}, ReasonInvalidJSON},
		{"null", `null`, Notification{}, ReasonMissingField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeNotification([]byte(tt.in), 0)
			if tt.reason == "" {
				if err != nil || got != tt.want {
					t.Fatalf("DecodeNotification = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var re *Error
			if !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("DecodeNotification error = %v; want reason %s", err, tt.reason)
			}
		})
	}
}

// FuzzDecodeTick and FuzzDecodeNotification: untrusted bytes never panic,
// every rejection carries a known reason, and the schema scanner, copying
// and shared, agrees with the reflection decoder it replaced
// (record_ref_test.go): the same value, or the same rejection reason.
func FuzzDecodeTick(f *testing.F) {
	for _, s := range append(differentialSeeds, `{"symbol":"BBCA","price":1.5}`, `{"symbol":1}`, `{`, `null`, `{"symbol":"a","price":1e400}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tick, err := DecodeTick(b, 1024)
		checkDecoded(t, err, tick.Symbol)
		if err == nil && !(tick.Price > 0 && tick.Price <= math.MaxFloat64) {
			t.Fatalf("DecodeTick(%q) accepted the price %v", b, tick.Price)
		}
		compareTick(t, b, 1024)
	})
}

func FuzzDecodeNotification(f *testing.F) {
	for _, s := range append(differentialSeeds, `{"id":"n","symbol":"BBCA"}`, `{"id":3}`, `[]`, `""`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeNotification(b, 1024)
		checkDecoded(t, err, n.Symbol)
		compareNotification(t, b, 1024)
	})
}

// differentialSeeds are the corners where a hand-written scanner is most
// likely to differ from encoding/json; TestDecodersAgree runs them all.
var differentialSeeds = []string{
	``, ` `, `{}`, `{} `, `{}x`, `{}]`, `{}}`, `{} {}`, `null`, `null x`, `null]`, `nul`, `true`, `1`, `1x`, `-`, `01`, `[1]x`, `"a"x`,
	`{"id":"n","symbol":"S"}`, ` {"id":"n","symbol":"S"} `, "\t{\"id\":\"n\",\"symbol\":\"S\"}\r\n",
	`{"ID":"n","SYMBOL":"S"}`, `{"Id":"n","sYmBoL":"S","USER":"u","Text":"t"}`,
	`{"id":"n","ſymbol":"S"}`, `{"id":"n","\u0073ymbol":"S"}`, `{"id":"n","symbol":"S","symbol":null}`,
	`{"id":"n","symbol":null,"symbol":"S"}`, `{"id":"n","symbol":"S","id":""}`,
	`{"id":"n","symbol":7}`, `{"id":"n","symbol":7,}`, `{"id":"n","symbol":7 "x":1}`, `{"id":"n","symbol":{}}`,
	`{"id":"n","symbol":[]}`, `{"id":"n","symbol":true}`, `{"id":["a",{"b":null}],"symbol":"S"}`,
	`{"id":"n","symbol":"S","x":[1,2,{"y":[true,false,null,-0.5e+3]}]}`, `{"id":"n","symbol":"S","x":[1,]}`,
	`{"id":"n","symbol":"S","x":01}`, `{"id":"n","symbol":"S","x":1.}`, `{"id":"n","symbol":"S","x":1e}`, `{"id":"n","symbol":"S","x":-}`,
	`{"id":"n\"\\\/\b\f\n\r\t","symbol":"S"}`, `{"id":"\u00e9\ud83d\ude00\ud800\u0041\udc00x","symbol":"S"}`,
	`{"id":"\ud800\ud800","symbol":"S"}`, `{"id":"\x","symbol":"S"}`, `{"id":"\u12","symbol":"S"}`, "{\"id\":\"a\x01\",\"symbol\":\"S\"}",
	"{\"id\":\"\xff\xfe\",\"symbol\":\"S\"}", "{\"id\":\"\xe2\x82\",\"symbol\":\"S\"}", "{\"id\":\"é\",\"symbol\":\"BB\xffCA\"}",
	`{"id":"n","symbol":"A/B"}`, `{"id":"n","symbol":"A B"}`, `{"id":"n","symbol":""}`, `{"id":1,"symbol":"S","user":{"x":1}}`,
	`{"symbol":"S","price":1}`, `{"symbol":"S","price":-0}`, `{"symbol":"S","price":1e400}`, `{"symbol":"S","price":-1e400}`,
	`{"symbol":"S","price":1e-400}`, `{"symbol":"S","price":"1"}`, `{"symbol":"S","price":null}`, `{"symbol":"S","PRICE":2.5}`,
	`{"symbol":"S","price":123456789012345678901234567890}`, `{"symbol":"S","price":0.1e1,"price":3}`,
	`{"symbol":"S","price":1,"symbol":"T"}`, `{"symbol":"S","price":1}]`, `{"symbol":"S","price":1}}x`,
	`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"id":"n","symbol":"S"}`,
	`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"id":"n","symbol":"S"}`,
	`{"a":` + strings.Repeat(`{"b":`, 9999) + `1` + strings.Repeat("}", 9999) + `,"id":"n","symbol":"S"}`,
	`{"a":` + strings.Repeat(`{"b":`, 10000) + `1` + strings.Repeat("}", 10000) + `,"id":"n","symbol":"S"}`,
	strings.Repeat("[", 10001),
	// The fast path's record, then what makes it fall back part way.
	`{"id":"n","user":"u","symbol":"S","text":"t"}`, `{"id":"n","symbol":"S"}x`, `{"id":"n","symbol":"S"}}`, `{"id":"n","symbol":"S"}]`,
	`{"id":"n","symbol":"S"`, `{"id":"n","symbol":"S",`, `{"id":"n","symbol":"S",}`, `{"id":"n","symbol":"S" }`, `{"id":"n","symbol":"S","user":1}`,
	`{"id":"n","symbol":"S","user":null}`, `{"id":"x","ID":null,"symbol":"S"}`, `{"id":"n","symbol":"S","x":"y"}`, `{"id":"n","symbol":"S\u0041"}`,
	`{"id":"n","symbol":"S"x`, `{"id":"n","symbol":"S":`, `{"id":"n","symbol""S"}`, `{"id":"n","symbol"`, `{"id":"n","symbol":`,
	`{"symbol":"S","price":1}x`, `{"symbol":"S","price":1.5,"price":"x"}`, `{"symbol":"S","price":01}`, `{"symbol":"S","price":-}`,
	`{"symbol":"S","price":1.}`, `{"symbol":"S","price":1e5}`, `{"symbol":"S","price":-0.0}`, `{"symbol":"S","price":12345678901234567}`,
	`{"symbol":"S","price":-3}`, `{"symbol":"S","price":0}`, `{"symbol":"S","price":0e5}`, `{"symbol":"S","price":-1e-9}`, `{"symbol":"S","price":5e-324}`,
	`{"symbol":"S","price":1,"price":null}`, `{"symbol":"S","price":1 }`, `{"symbol":"S","price":1`, `{"symbol":"S","price":true}`,
	`{"id"x"n","symbol":"S"}`, `{"symbol":"S","price"x1}`, `{"id":"a\,"symbol":"S"}`, "{\"id\":\"a\x01,\"symbol\":\"S\"}",
	"{\"id\":\"n\",\"symbol\":\"S\x7f}", "{\"id\":\"n\",\"symbol\":\"S\xff}", "{\"symbol\":\"S\x00,\"price\":1}",
}

func TestDecodersAgree(t *testing.T) {
	for _, s := range differentialSeeds {
		for _, maxBytes := range []int{0, 1 << 20} {
			compareTick(t, []byte(s), maxBytes)
			compareNotification(t, []byte(s), maxBytes)
		}
	}
}

// TestDecodersAgreeEveryPosition: a byte that needs attention in a
// string (a quote, an escape, a control or non-ASCII byte), at every
// position around the 8-byte words of plainLen, in a value and in a key,
// and short decimals around parseShortDecimal's limits, decode as the
// reflection decoder does.
func TestDecodersAgreeEveryPosition(t *testing.T) {
	specials := []string{`"`, `\"`, `\\`, `\n`, `\u0041`, `\u00e9`, "\x00", "\x1f", "\x7f", " ", "~", "é", "\xff", "\xe2\x82", "😀", "/"}
	for n := range 20 {
		for p := range n + 1 {
			for _, sp := range specials {
				s := strings.Repeat("a", p) + sp + strings.Repeat("b", n-p)
				compareNotification(t, []byte(`{"id":"`+s+`","symbol":"S","text":"`+s+`"}`), 0)
				compareNotification(t, []byte(`{"id":"n","symbol":"`+s+`"}`), 0)
				compareNotification(t, []byte(`{"`+s+`":"x","id":"n","symbol":"S"}`), 0)
				compareTick(t, []byte(`{"symbol":"`+s+`","price":1}`), 0)
			}
		}
	}
	for _, sym := range []string{"id", "ids", "i", "symbol", "symbo", "symbols", "Symbol", "price", "pric", "prices"} {
		compareNotification(t, []byte(`{"`+sym+`":"x","id":"n","symbol":"S"}`), 0)
		compareTick(t, []byte(`{"symbol":"S","`+sym+`":2,"price":1}`), 0)
	}
	nums := []string{"0", "-0", "-0.0", "0.000001", "1e2", "1E-2", "123456789012345", "1234567890123456", "12345678901234567",
		"0.12345678901234", "0.123456789012345", "0.1234567890123456", "9007199254740993", "999999999999999.9", "-1.5", "8961.72"}
	r := rand.New(rand.NewPCG(11, 12))
	for range 20000 {
		digits := strconv.FormatUint(r.Uint64()>>r.IntN(64), 10)
		if p := r.IntN(len(digits) + 1); p < len(digits) && p > 0 {
			digits = digits[:p] + "." + digits[p:]
		}
		if r.IntN(2) == 0 {
			digits = "-" + digits
		}
		nums = append(nums, digits)
	}
	for _, num := range nums {
		compareTick(t, []byte(`{"symbol":"S","price":`+num+`}`), 0)
	}
}

func reasonOf(err error) string {
	var re *Error
	if errors.As(err, &re) {
		return re.Reason
	}
	if err != nil {
		return "not a *record.Error: " + err.Error()
	}
	return ""
}

func compareTick(t *testing.T, b []byte, maxBytes int) {
	t.Helper()
	got, err := DecodeTick(b, maxBytes)
	want, werr := refDecodeTick(b, maxBytes)
	if reasonOf(err) != reasonOf(werr) || got.Symbol != want.Symbol || math.Float64bits(got.Price) != math.Float64bits(want.Price) {
		t.Fatalf("DecodeTick(%q) = %+v, %v; the reflection decoder says %+v, %v", b, got, err, want, werr)
	}
	shared, serr := DecodeTickShared(b, maxBytes)
	if reasonOf(serr) != reasonOf(werr) || shared.Symbol != want.Symbol || math.Float64bits(shared.Price) != math.Float64bits(want.Price) {
		t.Fatalf("DecodeTickShared(%q) = %+v, %v; the reflection decoder says %+v, %v", b, shared, serr, want, werr)
	}
}

func compareNotification(t *testing.T, b []byte, maxBytes int) {
	t.Helper()
	got, err := DecodeNotification(b, maxBytes)
	want, werr := refDecodeNotification(b, maxBytes)
	if reasonOf(err) != reasonOf(werr) || got != want {
		t.Fatalf("DecodeNotification(%q) = %+v, %v; the reflection decoder says %+v, %v", b, got, err, want, werr)
	}
	shared, serr := DecodeNotificationShared(b, maxBytes)
	if reasonOf(serr) != reasonOf(werr) || shared != want {
		t.Fatalf("DecodeNotificationShared(%q) = %+v, %v; the reflection decoder says %+v, %v", b, shared, serr, want, werr)
	}
}

func checkDecoded(t *testing.T, err error, symbol string) {
	t.Helper()
	if err == nil {
		if CheckSymbol(symbol) != nil {
			t.Fatalf("accepted invalid symbol %q", symbol)
		}
		return
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a *record.Error", err)
	}
	switch re.Reason {
	case ReasonInvalidJSON, ReasonMissingField, ReasonWrongType, ReasonOversized, ReasonInvalidValue:
	default:
		t.Fatalf("unknown reason %q", re.Reason)
	}
}
