package loadgen

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// NumShapes is the number of notification shapes ShapedNotification
// writes.
const NumShapes = 5

// ShapedNotification appends the JSON of n in shape shape (mod NumShapes),
// with f's symbol member name: the shapes of notifications real services
// write, each with members of its own beside the symbol:
//
//	0: the plain {"id","user","symbol","text"}
//	1: a numeric user, a nested object with an array, an exponent
//	   number (and, with a renamed symbol member, a "symbol" member that
//	   is not the symbol)
//	2: an integer longer than int64, -0.0, escapes and non-ASCII text,
//	   nested arrays with every literal
//	3: members named like the join's (price, result, worker,
//	   notification_ts_ms, price_ts_ms) and a notification_price, which
//	   its alert keeps renamed
//	4: whitespace around every token, and a newline after the object
//
// n.ID "" leaves the id member out; ref, when not "", is put in a "ref"
// member first (a test's handle on a notification without an id).
func ShapedNotification(dst []byte, n *record.Notification, f record.Fields, shape int, ref string) []byte {
	f = f.WithDefaults()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var m []string // members, "name":value
	if ref != "" {
		m = append(m, `"ref":`+q(ref))
	}
	id := func() {
		if n.ID != "" {
			m = append(m, `"id":`+q(n.ID))
		}
	}
	sym := q(f.Symbol) + `:` + q(n.Symbol)
	userNum := 0
	for _, c := range n.User {
		if '0' <= c && c <= '9' {
			userNum = userNum*10 + int(c-'0')
		}
	}
	switch ((shape % NumShapes) + NumShapes) % NumShapes {
	case 0:
		id()
		if n.User != "" {
			m = append(m, `"user":`+q(n.User))
		}
		m = append(m, sym)
		if n.Text != "" {
			m = append(m, `"text":`+q(n.Text))
		}
	case 1:
		id()
		m = append(m, `"user":`+strconv.Itoa(userNum), sym, `"channel":"push"`, `"meta":{"lang":"id","tags":["a","b"],"depth":{"x":[]}}`, `"score":1.5e3`)
		if f.Symbol != record.DefaultSymbolField {
			m = append(m, `"symbol":"not the key"`)
		}
	case 2:
		m = append(m, sym)
		id()
		m = append(m, `"big":123456789012345678901234567890`, `"neg":-0.0`, `"exp":6.02E+23`,
			`"text":"caf\u00e9 \"q\" \\ \/ `+"☕ é"+` \ud83d\ude00 <&>\n"`, `"nested":[{"a":[1,[2,{}]]},null,true,false]`)
	case 3:
		id()
		m = append(m, sym, fmt.Sprintf(`"price":{"target":%d}`, 9000+userNum), `"result":"pending"`, `"worker":7`,
			`"notification_ts_ms":"x"`, `"price_ts_ms":[]`, `"notification_price":1`)
	case 4:
		if n.ID != "" {
			m = append(m, "\"id\" :\t"+q(n.ID))
		}
		m = append(m, q(f.Symbol)+" : "+q(n.Symbol)+" ", `"text" : "spaced"`)
		return append(dst, "{\n  "+strings.Join(m, " ,\n  ")+"\n}\n"...)
	}
	return append(dst, "{"+strings.Join(m, ",")+"}"...)
}

// NotificationHeaders are the headers of the seq-th notification with
// Config.Headers: a W3C traceparent unique to it, a tracestate, a tenant,
// a key given twice and one with an empty value, in that order.
func NotificationHeaders(seq int) []kafka.Header {
	return []kafka.Header{
		{Key: "traceparent", Value: fmt.Appendf(nil, "00-%032x-%016x-01", seq+1, seq+1)},
		{Key: "tracestate", Value: []byte("joiner=loadgen")},
		{Key: "tenant", Value: fmt.Appendf(nil, "t%d", seq%3)},
		{Key: "x-multi", Value: []byte("1")},
		{Key: "x-multi", Value: []byte("2")},
		{Key: "x-empty", Value: []byte{}},
	}
}
