package record

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// member is one member of a JSON object as encoding/json reads it: its
// unescaped name and its value's bytes as written.
type member struct {
	name string
	raw  string
}

// orderedMembers decodes the top-level object of b with encoding/json into
// its members in order (nil for a top-level null).
func orderedMembers(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, &json.UnsupportedValueError{Str: "not an object"}
	}
	var out []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{k.(string), string(raw)})
	}
	_, err = dec.Token()
	return out, err
}

// refNotificationValue is the reference of Decoder.Notification: the
// symbol decoded by encoding/json into a struct whose one field is tagged
// symbolField (encoding/json's name matching, null and duplicate rules),
// the members by orderedMembers.
func refNotificationValue(value []byte, maxBytes int, symbolField string) (string, []member, error) {
	typ := reflect.StructOf([]reflect.StructField{{Name: "Symbol", Type: reflect.TypeFor[*string](), Tag: reflect.StructTag(`json:"` + symbolField + `"`)}})
	v := reflect.New(typ)
	if err := refDecodeStrict(value, maxBytes, v.Interface()); err != nil {
		return "", nil, err
	}
	p := v.Elem().Field(0).Interface().(*string)
	if p == nil {
		return "", nil, reject(ReasonMissingField, "no symbol")
	}
	members, err := orderedMembers(value)
	if err != nil {
		return "", nil, err
	}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.name] {
			return "", nil, reject(ReasonInvalidValue, "duplicate %q", m.name)
		}
		seen[m.name] = true
	}
	if err := CheckSymbol(*p); err != nil {
		return "", nil, err
	}
	return *p, members, nil
}

// refAlert is the documented rule: the notification's members in order,
// each named like a join member prefixed with RenamePrefix until no member
// of the notification has its name, then the join's members.
func refAlert(notification []member, nTsMs int64, price *float64, priceTsMs int64, result Result, worker string) []member {
	names := map[string]bool{}
	for _, m := range notification {
		names[m.name] = true
	}
	var out []member
	for _, m := range notification {
		if slices.Contains(AlertMembers[:], m.name) {
			for names[m.name] || slices.Contains(AlertMembers[:], m.name) {
				m.name = RenamePrefix + m.name
			}
		}
		out = append(out, m)
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	out = append(out, member{"notification_ts_ms", strconv.FormatInt(nTsMs, 10)})
	if price != nil {
		b, _ := json.Marshal(*price)
		out = append(out, member{"price", string(b)})
	}
	if priceTsMs != 0 {
		out = append(out, member{"price_ts_ms", strconv.FormatInt(priceTsMs, 10)})
	}
	return append(out, member{"result", q(string(result))}, member{"worker", q(worker)})
}

// checkNotificationAlert decodes b with Decoder.Notification and the
// reference; they must agree on the reason, and on an accepted b the
// alert the encoder splices must be, member by member, the reference's.
func checkNotificationAlert(t *testing.T, b []byte, symbolField string, price *float64) NotificationValue {
	t.Helper()
	return checkNotificationAlertMax(t, b, symbolField, price, 1024)
}

// checkNotificationAlertMax is checkNotificationAlert with records of up to
// maxBytes.
func checkNotificationAlertMax(t *testing.T, b []byte, symbolField string, price *float64, maxBytes int) NotificationValue {
	t.Helper()
	d := NewDecoder(Fields{Symbol: symbolField}, maxBytes)
	n, err := d.Notification(b)
	sym, members, werr := refNotificationValue(b, maxBytes, symbolField)
	if reasonOf(err) != reasonOf(werr) || n.Symbol != sym {
		t.Fatalf("Notification(%q) with symbol %q = %q, %v; the reference says %q, %v", b, symbolField, n.Symbol, err, sym, werr)
	}
	if err != nil {
		return n
	}
	var conflicts uint8
	for _, m := range members {
		if i := slices.Index(AlertMembers[:], m.name); i >= 0 {
			conflicts |= 1 << i
		}
	}
	if n.Conflicts() != conflicts {
		t.Fatalf("Notification(%q).Conflicts() = %05b, want %05b", b, n.Conflicts(), conflicts)
	}
	a := Alert{NotificationTsMs: 1764489600123, Result: ResultMiss, Worker: "w<1>"}
	if price != nil {
		a.Price, a.PriceTsMs, a.Result = price, 1764489600000, ResultLocal
	}
	want := refAlert(members, a.NotificationTsMs, a.Price, a.PriceTsMs, a.Result, a.Worker)
	e := NewAlertEncoder(a.Worker)
	var fields []byte
	if price != nil {
		fields = AppendPriceFields(nil, *a.Price, a.PriceTsMs)
	}
	var at NotifiedAt
	for _, alert := range [][]byte{e.AppendPriced([]byte("x"), &n, a.NotificationTsMs, fields, a.Result)[1:], e.AppendJoined(nil, &n, &a),
		e.AppendPricedAt(nil, &n, at.Field(a.NotificationTsMs), fields, a.Result)} {
		if !json.Valid(alert) {
			t.Fatalf("the alert of %q is not valid JSON: %s", b, alert)
		}
		got, err := orderedMembers(alert)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("the alert of %q is %s:\n got %q (%v)\nwant %q", b, alert, got, err, want)
		}
	}
	return n
}

// notificationSeeds are notifications of every shape the join takes, and
// the corners of the conflict rule.
var notificationSeeds = []string{
	`{"symbol":"BBCA"}`, `{"id":"n-1","user":"u7","symbol":"BBCA","text":"BBCA moved"}`,
	`{"user":42,"symbol":"BBCA","channel":"push","meta":{"lang":"id","tags":["a","b"]},"score":1.5e3}`,
	`{"symbol":"BBCA","big":123456789012345678901234567890,"neg":-0.0,"e":1E-7,"t":true,"f":false,"n":null}`,
	`{"symbol":"BBCA","text":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ <&> ` + "é😀\u2028" + `"}`,
	` { "symbol" : "BBCA" , "a" : [ 1 , { "b" : [ ] } ] } `, "{\n\t\"symbol\": \"BBCA\"\r\n}\n",
	`{"symbol":"BBCA","price":9000}`, `{"price":{"target":9000},"symbol":"BBCA","result":"x","worker":1,"price_ts_ms":2,"notification_ts_ms":3}`,
	`{"symbol":"BBCA","price":1,"notification_price":2}`, `{"symbol":"BBCA","price":1,"notification_price":2,"notification_notification_price":3}`,
	`{"symbol":"BBCA","pr\u0069ce":1}`, `{"symbol":"BBCA","Price":1,"PRICE":2}`, `{"symbol":"BBCA","notification_ts_ms":"x"}`,
	`{"symbol":"BBCA","a":1,"a":2}`, `{"symbol":"BBCA","a":1,"\u0061":2}`, `{"symbol":"BBCA","symbol":"BBCA"}`, `{"symbol":"X","SYMBOL":"BBCA"}`,
	`{"Symbol":"BBCA"}`, `{"ticker":"BBCA","symbol":"x y"}`, `{"ticker":"BBCA"}`, `{"TICKER":"BBCA"}`, `{"symbol":"BBCA","ticker":7}`,
	`{"symbol":7}`, `{"symbol":null}`, `{"symbol":"BBCA","symbol":null}`, `{}`, `null`, `[]`, `"x"`, `{"symbol":"BBCA"}]`, `{"symbol":"BBCA"}x`,
	`{"symbol":"BBCA",}`, `{"symbol":"BBCA","x":"\x"}`, `{"symbol":"BBCA","x":01}`, `{"symbol":"BBCA"`, `{"symbol":"A/B"}`, `{"symbol":""}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"symbol":"BBCA","a":0}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"symbol":"BBCA","price":0}`,
	`{"symbol":"BBCA","` + strings.Repeat("k", 100) + `\n":1}`, "{\"symbol\":\"BBCA\",\"\xff\":\"\xfe\"}",
}

func FuzzNotificationAlert(f *testing.F) {
	for _, s := range append(slices.Clone(notificationSeeds), differentialSeeds...) {
		f.Add([]byte(s), uint8(0), 9125.5)
	}
	f.Fuzz(func(t *testing.T, b []byte, field uint8, price float64) {
		p := &price
		if math.IsNaN(price) || math.IsInf(price, 0) {
			p = nil // a miss
		}
		checkNotificationAlert(t, b, []string{"symbol", "ticker", "Sym_1"}[field%3], p)
	})
}

// TestNotificationAlertShapes: every seed, with each symbol name and with
// and without a price, against the reference.
func TestNotificationAlertShapes(t *testing.T) {
	for _, s := range append(slices.Clone(notificationSeeds), differentialSeeds...) {
		for _, field := range []string{"symbol", "ticker"} {
			checkNotificationAlert(t, []byte(s), field, nil)
			checkNotificationAlert(t, []byte(s), field, float(-0.25))
		}
	}
}

// TestNotificationAlertExamples pins the documented rule on examples: the
// alert's bytes, not only its members.
func TestNotificationAlertExamples(t *testing.T) {
	e := NewAlertEncoder("worker-1")
	fields := AppendPriceFields(nil, 9125.5, 1764489600000)
	for _, c := range []struct{ in, want string }{
		{`{"id":"n-1","symbol":"BBCA","meta":{"tags":["a","b"]},"score":1.5e3}`,
			`{"id":"n-1","symbol":"BBCA","meta":{"tags":["a","b"]},"score":1.5e3,"notification_ts_ms":1764489600123,"price":9125.5,"price_ts_ms":1764489600000,"result":"local","worker":"worker-1"}`},
		{` {"symbol" : "BBCA", "price":{"target":9000} } `,
			`{"symbol" : "BBCA", "notification_price":{"target":9000} ,"notification_ts_ms":1764489600123,"price":9125.5,"price_ts_ms":1764489600000,"result":"local","worker":"worker-1"}`},
		{`{"symbol":"BBCA","price":1,"notification_price":2,"worker":"me"}`,
			`{"symbol":"BBCA","notification_notification_price":1,"notification_price":2,"notification_worker":"me","notification_ts_ms":1764489600123,"price":9125.5,"price_ts_ms":1764489600000,"result":"local","worker":"worker-1"}`},
		{`{"symbol":"BBCA","pr\u0069ce":1}`,
			`{"symbol":"BBCA","notification_pr\u0069ce":1,"notification_ts_ms":1764489600123,"price":9125.5,"price_ts_ms":1764489600000,"result":"local","worker":"worker-1"}`},
	} {
		n, err := NewDecoder(Fields{}, 0).Notification([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := e.AppendPriced(nil, &n, 1764489600123, fields, ResultLocal); string(got) != c.want {
			t.Errorf("alert of %s\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// TestNotificationRejections: what the join dead-letters, and why.
func TestNotificationRejections(t *testing.T) {
	d := NewDecoder(Fields{Symbol: "ticker"}, 64)
	for _, c := range []struct{ in, reason string }{
		{`{"ticker":"BBCA"}`, ""},
		{`{"ticker":"BBCA","id":7,"user":{"x":1}}`, ""},
		{`{"symbol":"BBCA"}`, ReasonMissingField},
		{`{"ticker":"BBCA","a":1,"a":2}`, ReasonInvalidValue},
		{`{"ticker":5}`, ReasonWrongType},
		{`[1]`, ReasonWrongType},
		{`{"ticker":"BBCA"`, ReasonInvalidJSON},
		{`{"ticker":"A B"}`, ReasonInvalidValue},
		{`{"ticker":"BBCA","pad":"` + strings.Repeat("x", 64) + `"}`, ReasonOversized},
	} {
		_, err := d.Notification([]byte(c.in))
		if reasonOf(err) != c.reason {
			t.Errorf("%s: %v, want reason %q", c.in, err, c.reason)
		}
	}
	if err := CheckNotificationKey([]byte("BBCA"), "BBCA"); err != nil {
		t.Errorf("CheckNotificationKey of the symbol: %v", err)
	}
	if err := CheckNotificationKey([]byte("TLKM"), "BBCA"); reasonOf(err) != ReasonKeyMismatch {
		t.Errorf("CheckNotificationKey of another key: %v", err)
	}
	if err := CheckNotificationKey(nil, "BBCA"); reasonOf(err) != ReasonKeyMismatch {
		t.Errorf("CheckNotificationKey of no key: %v", err)
	}
}

// TestDecoderNames: a tick's symbol and price members by the decoder's
// names.
func TestDecoderNames(t *testing.T) {
	d := NewDecoder(Fields{Symbol: "ticker", Price: "last"}, 0)
	tk, err := d.Tick([]byte(`{"ticker":"BBCA","last":9125.5,"price":1}`))
	if err != nil || tk != (Tick{Symbol: "BBCA", Price: 9125.5}) {
		t.Fatalf("Tick = %+v, %v", tk, err)
	}
	if _, err := d.Tick([]byte(`{"symbol":"BBCA","price":1}`)); reasonOf(err) != ReasonMissingField {
		t.Fatalf("a tick with the default names: %v, want missing_field", err)
	}
}

// TestFieldsEncoders: the encoders with other names write what the
// decoders with those names read, and the default names byte for byte
// the plain encoders.
func TestFieldsEncoders(t *testing.T) {
	n := Notification{ID: "n-1", User: "u", Symbol: "BBCA", Text: "t"}
	tk := Tick{Symbol: "BBCA", Price: 9125.5}
	if got, want := (Fields{}).AppendNotification(nil, &n), AppendNotification(nil, &n); string(got) != string(want) {
		t.Errorf("default names: %s, want %s", got, want)
	}
	if got, want := (Fields{}).AppendTick(nil, tk), AppendTick(nil, tk); string(got) != string(want) {
		t.Errorf("default names: %s, want %s", got, want)
	}
	f := Fields{Symbol: "tick\"er", Price: "last"}
	d := NewDecoder(f, 0)
	if got, err := d.Tick(f.AppendTick(nil, tk)); err != nil || got != tk {
		t.Errorf("tick with %+v: %+v, %v", f, got, err)
	}
	v := f.AppendNotification(nil, &n)
	if got, err := d.Notification(v); err != nil || got.Symbol != "BBCA" {
		t.Errorf("notification %s with %+v: %+v, %v", v, f, got, err)
	}
	if id, ok := StringMember(v, "id"); !ok || id != "n-1" {
		t.Errorf("StringMember(id) = %q, %v", id, ok)
	}
	if _, ok := StringMember([]byte(`{"id":1}`), "id"); ok {
		t.Errorf("StringMember of a number: ok")
	}
}

// TestNotificationNestedValues: nested values of every depth around
// skipNested's limit (where skipValue takes over) and encoding/json's,
// valid and broken at each kind of place, are accepted or rejected as
// the reference says, and spliced byte for byte.
func TestNotificationNestedValues(t *testing.T) {
	nest := func(depth int, inner string) string {
		var b strings.Builder
		for d := range depth {
			if d%2 == 0 {
				b.WriteString(`{"k` + strconv.Itoa(d) + `" : `)
			} else {
				b.WriteString(`[1, `)
			}
		}
		b.WriteString(inner)
		for d := depth - 1; d >= 0; d-- {
			if d%2 == 0 {
				b.WriteString(`}`)
			} else {
				b.WriteString(` ]`)
			}
		}
		return b.String()
	}
	inners := []string{`"v"`, `{}`, `[]`, `[ ]`, `{ }`, `-1.5e3`, `true`, `null`, `"caf\u00e9 \" é"`, `{"a":[1,{"b":"c"}],"d":false}`,
		// broken
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a"x1}`, `[1x2]`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`, `tru`, `01`, `"a` + "\x01" + `"`, `"\x"`, `{"a":}`, `[`, `{`, `}`, `]`, `"`}
	for _, depth := range []int{1, 2, 3, 63, 64, 65, 66, 130} {
		for _, inner := range inners {
			v := `{"symbol":"BBCA","meta":` + nest(depth, inner) + `,"x":1}`
			checkNotificationAlertMax(t, []byte(v), "symbol", float(9125.5), 1<<20)
		}
	}
	// Deeper than encoding/json's limit: invalid_json.
	for _, depth := range []int{maxNestingDepth - 1, maxNestingDepth, maxNestingDepth + 1} {
		v := []byte(`{"symbol":"BBCA","meta":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
		_, err := NewDecoder(Fields{}, 1<<20).Notification(v)
		if want := depth+1 > maxNestingDepth; (reasonOf(err) == ReasonInvalidJSON) != want {
			t.Errorf("depth %d: %v, want invalid_json %v", depth+1, err, want)
		}
	}
}
