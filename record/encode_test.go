package record

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"unicode/utf8"
)

// TestAppendTickAndNotificationMatchMarshal: the input encoders write what
// json.Marshal writes, for every field filled at random and left empty at
// random, and what they write decodes back to the value encoded when the
// value is one the decoders accept.
func TestAppendTickAndNotificationMatchMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		var n Notification
		fill(t, r, reflect.ValueOf(&n).Elem(), "Notification")
		if i%2 == 1 {
			zeroRandomly(r, reflect.ValueOf(&n).Elem())
		}
		got := AppendNotification([]byte("prefix"), &n)
		want, err := json.Marshal(&n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
			t.Fatalf("AppendNotification(%+v) = %s, want %s after prefix", n, got, want)
		}
		valid := utf8.ValidString(n.ID + n.User + n.Symbol + n.Text) // invalid UTF-8 decodes as U+FFFD
		if back, err := DecodeNotification(got[len("prefix"):], 1<<20); valid && err == nil && back != n {
			t.Fatalf("DecodeNotification(AppendNotification(%+v)) = %+v", n, back)
		}

		tk := Tick{Symbol: randomString(r), Price: randomFloat(r)}
		if math.IsNaN(tk.Price) || math.IsInf(tk.Price, 0) {
			continue
		}
		got = AppendTick(nil, tk)
		if want, _ = json.Marshal(tk); !bytes.Equal(got, want) {
			t.Fatalf("AppendTick(%+v) = %s, want %s", tk, got, want)
		}
		if back, err := DecodeTick(got, 1<<20); utf8.ValidString(tk.Symbol) && err == nil && back != tk {
			t.Fatalf("DecodeTick(AppendTick(%+v)) = %+v", tk, back)
		}
	}
}

// TestDecodeWhatLoadIsMadeOf: the values loadgen and the oracle write
// decode to what was encoded.
func TestDecodeWhatLoadIsMadeOf(t *testing.T) {
	tk := Tick{Symbol: "BBCA", Price: 9125.37}
	if got, err := DecodeTick(AppendTick(nil, tk), 0); err != nil || got != tk {
		t.Fatalf("tick round trip: %+v, %v", got, err)
	}
	n := Notification{ID: "n-BBCA-0", User: "u7", Symbol: "BBCA", Text: "BBCA moved"}
	if got, err := DecodeNotification(AppendNotification(nil, &n), 0); err != nil || got != n {
		t.Fatalf("notification round trip: %+v, %v", got, err)
	}
}

func TestReasonOf(t *testing.T) {
	_, errJSON := DecodeNotification([]byte(`{"id":`), 0)
	_, errMissing := DecodeNotification([]byte(`{"id":"x"}`), 0)
	_, errType := DecodeTick([]byte(`{"symbol":"X","price":"1"}`), 0)
	_, errSize := DecodeTick([]byte(`{"symbol":"X","price":1}`), 5)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{errJSON, ReasonInvalidJSON},
		{errMissing, ReasonMissingField},
		{errType, ReasonWrongType},
		{errSize, ReasonOversized},
		{CheckSymbol("a/b"), ReasonInvalidValue},
		{bytes.ErrTooLarge, ReasonInvalidValue}, // not a decoding error
	} {
		if got := ReasonOf(tt.err); got != tt.want {
			t.Errorf("ReasonOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestTopicsWithDefaults(t *testing.T) {
	got := Topics{Alerts: "out"}.WithDefaults()
	want := Topics{Market: DefaultMarketTopic, Notifications: DefaultNotificationsTopic, Alerts: "out", DeadLetter: DefaultDeadLetterTopic}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if all := got.All(); len(all) != 4 || all[0] != got.Market || all[3] != got.DeadLetter {
		t.Fatalf("All = %v", all)
	}
	if in := got.Inputs(); len(in) != 2 || in[0] != got.Market || in[1] != got.Notifications {
		t.Fatalf("Inputs = %v", in)
	}
}
