package record

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/joiner-dev/joiner/internal/jsonstr"
)

// AppendAlert appends the JSON of a to dst and returns the extended slice:
// byte for byte what json.Marshal(a) writes (field order, omitempty, HTML
// escaping, float format), without reflection or allocation when dst has
// room. A non-finite price, which json.Marshal refuses and the decoders
// never let through, is written as null.
//
// Adding a field to Alert or Notification means adding one line here, in
// the struct's field order; TestAppendAlertMatchesMarshal fills every field
// by reflection and fails until it is done.
func AppendAlert(dst []byte, a *Alert) []byte {
	return appendAlertTail(appendAlertHead(dst, a), a.Result, a.Worker)
}

// appendAlertHead appends the fields of a before "result".
func appendAlertHead(dst []byte, a *Alert) []byte {
	dst = appendNotified(dst, &a.Notification, a.NotificationTsMs)
	if a.Price != nil {
		return AppendPriceFields(dst, *a.Price, a.PriceTsMs)
	}
	return appendPriceTs(dst, a.PriceTsMs)
}

// appendNotified appends an alert's first fields: those of its
// notification n, opening the object, and "notification_ts_ms".
func appendNotified(dst []byte, n *Notification, notificationTsMs int64) []byte {
	dst = appendNotificationFields(dst, n)
	dst = append(dst, `,"notification_ts_ms":`...)
	return strconv.AppendInt(dst, notificationTsMs, 10)
}

// appendPriceTs appends an alert's "price_ts_ms" field, which it omits
// when zero.
func appendPriceTs(dst []byte, tsMs int64) []byte {
	if tsMs != 0 {
		dst = append(dst, `,"price_ts_ms":`...)
		dst = strconv.AppendInt(dst, tsMs, 10)
	}
	return dst
}

// AppendPriceFields appends the JSON an alert with this price carries
// between "notification_ts_ms" and "result": its "price" and "price_ts_ms"
// fields, with their leading commas. A caller that joins many
// notifications to the same price encodes it once, then hands it to
// AlertEncoder.AppendPriced.
func AppendPriceFields(dst []byte, price float64, priceTsMs int64) []byte {
	dst = append(dst, `,"price":`...)
	dst = appendJSONFloat(dst, price)
	return appendPriceTs(dst, priceTsMs)
}

// appendAlertTail appends an alert's last fields, "result" and "worker",
// and its closing brace.
func appendAlertTail(dst []byte, result Result, worker string) []byte {
	dst = append(dst, `,"result":`...)
	dst = appendJSONString(dst, string(result))
	dst = append(dst, `,"worker":`...)
	dst = appendJSONString(dst, worker)
	return append(dst, '}')
}

// AlertEncoder is AppendAlert for the alerts of one worker: an alert's
// last fields, its result and the worker, are the same for every alert of
// a result, so they are encoded once per result, not once per alert.
type AlertEncoder struct {
	worker string
	tails  [len(Results)][]byte // per Result.Index
}

// NewAlertEncoder returns the AlertEncoder of the alerts of worker.
func NewAlertEncoder(worker string) *AlertEncoder {
	e := &AlertEncoder{worker: worker}
	for i, r := range Results {
		e.tails[i] = appendAlertTail(nil, r, worker)
	}
	return e
}

// AppendPriced appends the alert of the notification n, notified at
// notificationTsMs, joined with the price whose fields priceFields holds
// (AppendPriceFields; none on a miss), with result, by the encoder's
// worker: n's object byte for byte (its members named like the join's
// renamed, see RenamePrefix), then "notification_ts_ms", the price
// fields, "result" and "worker". For a notification of the Notification
// shape (AppendNotification) that is byte for byte what AppendAlert writes.
func (e *AlertEncoder) AppendPriced(dst []byte, n *NotificationValue, notificationTsMs int64, priceFields []byte, result Result) []byte {
	return e.appendTail(appendJoinedHead(dst, n, notificationTsMs, priceFields), result)
}

// NotifiedAt encodes the "notification_ts_ms" member of alerts for
// AppendPricedAt once per millisecond, not once per alert: the
// notifications of a backlog mostly share their millisecond with the one
// before. The zero value is ready to use; it is not safe for concurrent
// use.
type NotifiedAt struct {
	ms    int64
	field []byte // `,"notification_ts_ms":` and ms; nil before the first
}

// Field returns the member of an alert notified at ms, with its leading
// comma. It is valid until the next call.
func (c *NotifiedAt) Field(ms int64) []byte {
	if c.field == nil || c.ms != ms {
		c.field = strconv.AppendInt(append(c.field[:0], `,"notification_ts_ms":`...), ms, 10)
		c.ms = ms
	}
	return c.field
}

// AppendPricedAt is AppendPriced with the notification's time given as
// its member, notified.Field: byte for byte the same alert.
func (e *AlertEncoder) AppendPricedAt(dst []byte, n *NotificationValue, notified, priceFields []byte, result Result) []byte {
	dst = n.appendBody(dst)
	dst = append(dst, notified...)
	return e.appendTail(append(dst, priceFields...), result)
}

// AppendJoined is AppendPriced with the join's result, price and
// notification time taken from a (its Notification and Worker are not
// used).
func (e *AlertEncoder) AppendJoined(dst []byte, n *NotificationValue, a *Alert) []byte {
	dst = appendJoinedHead(dst, n, a.NotificationTsMs, nil)
	if a.Price != nil {
		dst = AppendPriceFields(dst, *a.Price, a.PriceTsMs)
	} else {
		dst = appendPriceTs(dst, a.PriceTsMs)
	}
	return e.appendTail(dst, a.Result)
}

// Append appends the JSON of a to dst, byte for byte what AppendAlert
// writes.
func (e *AlertEncoder) Append(dst []byte, a *Alert) []byte {
	if a.Worker != e.worker {
		return AppendAlert(dst, a)
	}
	return e.appendTail(appendAlertHead(dst, a), a.Result)
}

// appendTail appends the last fields of an alert of result by the
// encoder's worker: the tail encoded once, for one of Results.
func (e *AlertEncoder) appendTail(dst []byte, result Result) []byte {
	if i := result.Index(); i >= 0 {
		return append(dst, e.tails[i]...)
	}
	return appendAlertTail(dst, result, e.worker)
}

// AppendTick appends the JSON of t to dst, byte for byte what
// json.Marshal(t) writes (a non-finite price, which DecodeTick rejects, is
// written as null).
func AppendTick(dst []byte, t Tick) []byte {
	dst = append(dst, `{"symbol":`...)
	dst = appendJSONString(dst, t.Symbol)
	dst = append(dst, `,"price":`...)
	dst = appendJSONFloat(dst, t.Price)
	return append(dst, '}')
}

// AppendNotification appends the JSON of n to dst, byte for byte what
// json.Marshal(n) writes.
func AppendNotification(dst []byte, n *Notification) []byte {
	return append(appendNotificationFields(dst, n), '}')
}

// appendNotificationFields appends the opening brace and the fields of n,
// in Notification's field order, with its omitempty rules.
func appendNotificationFields(dst []byte, n *Notification) []byte {
	return appendNotificationNamed(dst, n, DefaultSymbolField)
}

// appendNotificationNamed is appendNotificationFields with the symbol
// member named symbol.
func appendNotificationNamed(dst []byte, n *Notification, symbol string) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, n.ID)
	if n.User != "" {
		dst = append(dst, `,"user":`...)
		dst = appendJSONString(dst, n.User)
	}
	if symbol == DefaultSymbolField {
		dst = append(dst, `,"symbol":`...)
	} else {
		dst = append(dst, ',')
		dst = appendJSONString(dst, symbol)
		dst = append(dst, ':')
	}
	dst = appendJSONString(dst, n.Symbol)
	if n.Text != "" {
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, n.Text)
	}
	return dst
}

// AppendTick appends the JSON of t with f's member names (defaults for
// empty ones): AppendTick's bytes with those names.
func (f Fields) AppendTick(dst []byte, t Tick) []byte {
	f = f.WithDefaults()
	dst = append(dst, '{')
	dst = appendJSONString(dst, f.Symbol)
	dst = append(dst, ':')
	dst = appendJSONString(dst, t.Symbol)
	dst = append(dst, ',')
	dst = appendJSONString(dst, f.Price)
	dst = append(dst, ':')
	dst = appendJSONFloat(dst, t.Price)
	return append(dst, '}')
}

// AppendNotification appends the JSON of n with f's symbol member name:
// AppendNotification's bytes with that name.
func (f Fields) AppendNotification(dst []byte, n *Notification) []byte {
	return append(appendNotificationNamed(dst, n, f.WithDefaults().Symbol), '}')
}

// StringMember returns the string value of the top-level member name of
// the JSON object value (matched as the decoders match names), for tools
// that read one member of an alert or a notification back (an id). ok is
// false when value is not a valid object or has no such string member.
func StringMember(value []byte, name string) (_ string, ok bool) {
	f := [1]jsonField{newField(name, false)}
	if scanRecord(value, f[:], false) != nil || !f[0].set {
		return "", false
	}
	return f[0].str, true
}

// appendJSONFloat formats f as encoding/json does for a float64 (ES6
// number formatting).
func appendJSONFloat(dst []byte, f float64) []byte {
	if d, ok := appendShortDecimal(dst, f); ok {
		return d
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// maxShortDecimals bounds the decimals appendShortDecimal tries; 1e-6,
// the smallest it can write, is still in encoding/json's 'f' range.
const maxShortDecimals = 6

// appendShortDecimal is appendJSONFloat's fast path for the common price:
// |f| is the float64 nearest a decimal M/10^k, with an integer M < 10^15
// and k ≤ maxShortDecimals (M not a multiple of 10 unless k is 0). That
// decimal is what strconv's shortest formatting writes: it parses back to
// f (M and 10^k are exact float64s and one division rounds correctly, as
// the check m/10^k == |f| does), and no other decimal of as few digits
// does (it would differ by at least 10^-k, more than the rounding interval
// of f, which is below f·2^-52 = M·2^-52·10^-k < 10^-k). ok is false for
// any other f.
func appendShortDecimal(dst []byte, f float64) (_ []byte, ok bool) {
	a := math.Abs(f)
	k := 0
	for ; ; k++ {
		if k > maxShortDecimals {
			return dst, false
		}
		m := a * pow10[k]
		if m >= 1e15 { // also catches +Inf; NaN fails the next test
			return dst, false
		}
		if m == float64(int64(m)) && m/pow10[k] == a { // m < 10^15: int64 is exact
			break
		}
	}
	u := uint64(a * pow10[k])
	for k > 0 && u%10 == 0 {
		// a·10^k may round to an integer for a k above the smallest
		// (8961.72·100 is not one, ·1000 is): the decimal is the same
		// without its trailing zeros.
		u /= 10
		k--
	}
	var buf [24]byte // sign, 15 digits, point, up to 6 leading zeros
	i := len(buf)
	for range k {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	if k > 0 {
		i--
		buf[i] = '.'
	}
	for {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	if math.Signbit(f) {
		i--
		buf[i] = '-'
	}
	return append(dst, buf[i:]...), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping (its
// default): <, > and & as \u003c, \u003e, \u0026; U+2028 and U+2029
// escaped; invalid UTF-8 as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// The common string needs no escaping; else the loop goes on from
	// the first byte that may.
	i := jsonstr.HTMLSafeLen(s)
	if i == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	start := 0
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
