package join

import (
	"errors"
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
			var re *RecordError
			if !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("DecodeTick error = %v; want reason %s", err, tt.reason)
			}
		})
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
			var re *RecordError
			if !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("DecodeNotification error = %v; want reason %s", err, tt.reason)
			}
		})
	}
}

// FuzzDecodeTick and FuzzDecodeNotification: untrusted bytes never panic,
// and every rejection carries a known reason.
func FuzzDecodeTick(f *testing.F) {
	for _, s := range []string{`{"symbol":"BBCA","price":1.5}`, `{"symbol":1}`, `{`, `null`, `{"symbol":"a","price":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tick, err := DecodeTick(b, 1024)
		checkDecoded(t, err, tick.Symbol)
	})
}

func FuzzDecodeNotification(f *testing.F) {
	for _, s := range []string{`{"id":"n","symbol":"BBCA"}`, `{"id":3}`, `[]`, `""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeNotification(b, 1024)
		checkDecoded(t, err, n.Symbol)
	})
}

func checkDecoded(t *testing.T, err error, symbol string) {
	t.Helper()
	if err == nil {
		if checkSymbol(symbol) != nil {
			t.Fatalf("accepted invalid symbol %q", symbol)
		}
		return
	}
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a *RecordError", err)
	}
	switch re.Reason {
	case ReasonInvalidJSON, ReasonMissingField, ReasonWrongType, ReasonOversized, ReasonInvalidValue:
	default:
		t.Fatalf("unknown reason %q", re.Reason)
	}
}
