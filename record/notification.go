package record

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/joiner-dev/joiner/internal/jsonstr"
)

// NotificationValue is a notification as the join reads it: its JSON
// object, kept byte for byte, and its symbol. The alert of a notification
// is that object with the join's members appended (AlertEncoder); no
// member of the notification is decoded but its symbol.
//
// A NotificationValue aliases the value it was decoded from (see
// Decoder.Notification): the value must not change while it is in use.
type NotificationValue struct {
	// Symbol is the value of the notification's symbol member (the
	// Decoder's Fields.Symbol, matched as encoding/json matches a struct
	// tag: exact name first, else case-insensitively; a later one wins).
	Symbol string
	// body is the object from its '{' up to, not including, its closing
	// '}'.
	body []byte
	// renames are the members whose names are those of the join's
	// members, in order (nil without one): their keys are prefixed in the
	// alert (see AlertMembers).
	renames []rename
	// conflicts has bit i set when the notification has a member named
	// AlertMembers[i].
	conflicts uint8
}

// rename is one member of a notification renamed in its alert: the key
// whose first byte after its opening quote is body[at] gets prefixes
// times RenamePrefix before it.
type rename struct {
	at       int
	prefixes int
}

// AlertMembers are the names of the members the join appends to a
// notification's object to make its alert, in their order ("price" and
// "price_ts_ms" are absent on a miss).
var AlertMembers = [...]string{"notification_ts_ms", "price", "price_ts_ms", "result", "worker"}

// RenamePrefix is what a notification's member whose name is one of
// AlertMembers gets before its name in the alert, as many times as it
// takes to make a name the notification does not have: "price" becomes
// "notification_price", or "notification_notification_price" when the
// notification has a "notification_price" too. So an alert never has two
// members of one name and keeps every value of its notification.
const RenamePrefix = "notification_"

// alertMember is the index in AlertMembers of name, or -1.
func alertMember(name string) int {
	switch len(name) {
	case 5, 6, 11, 18:
		if c := name[0]; c != 'n' && c != 'p' && c != 'r' && c != 'w' {
			return -1
		}
		for i, m := range AlertMembers {
			if name == m {
				return i
			}
		}
	}
	return -1
}

// Conflicts has bit i set when the notification has a member named
// AlertMembers[i], which its alert renames (RenamePrefix).
func (n *NotificationValue) Conflicts() uint8 { return n.conflicts }

// Object returns the notification's JSON object as its alert carries it
// (conflicting members renamed), appended to dst.
func (n *NotificationValue) Object(dst []byte) []byte {
	return append(n.appendBody(dst), '}')
}

// appendBody appends the notification's object without its closing brace,
// conflicting members renamed.
func (n *NotificationValue) appendBody(dst []byte) []byte {
	last := 0
	for _, r := range n.renames {
		dst = append(dst, n.body[last:r.at]...)
		for range r.prefixes {
			dst = append(dst, RenamePrefix...)
		}
		last = r.at
	}
	return append(dst, n.body[last:]...)
}

// Fields names the members joiner reads: Symbol in ticks and
// notifications, Price in ticks. An empty name means the default.
type Fields struct {
	Symbol string
	Price  string
}

// The default member names.
const (
	DefaultSymbolField = "symbol"
	DefaultPriceField  = "price"
)

// WithDefaults returns f with every empty name set to its default.
func (f Fields) WithDefaults() Fields {
	if f.Symbol == "" {
		f.Symbol = DefaultSymbolField
	}
	if f.Price == "" {
		f.Price = DefaultPriceField
	}
	return f
}

// Decoder decodes the input records of one worker: ticks and
// notifications with its member names and size limit. Its methods are
// safe for concurrent use.
type Decoder struct {
	fields   Fields
	maxBytes int
	tick     [2]jsonField // symbol, price
	symbol   jsonField
	// symbolASCII: the symbol's name is plain ASCII (jsonstr.PlainLen),
	// which fastTop requires.
	symbolASCII bool
}

// NewDecoder returns the Decoder of fields (defaults for empty names) and
// records of at most maxBytes (0: DefaultMaxRecordBytes).
func NewDecoder(fields Fields, maxBytes int) *Decoder {
	fields = fields.WithDefaults()
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRecordBytes
	}
	return &Decoder{
		fields:   fields,
		maxBytes: maxBytes,
		tick:     [2]jsonField{newField(fields.Symbol, false), newField(fields.Price, true)},
		symbol:   newField(fields.Symbol, false),
		// A name folds to one of its length only when it is ASCII.
		symbolASCII: jsonstr.PlainLen([]byte(fields.Symbol)) == len(fields.Symbol),
	}
}

// Fields returns the decoder's member names.
func (d *Decoder) Fields() Fields { return d.fields }

// Tick is DecodeTickShared with the decoder's names and limit: the
// Symbol of the result may alias value.
func (d *Decoder) Tick(value []byte) (Tick, error) {
	return decodeTickWith(value, d.maxBytes, d.tick, true)
}

// Notification decodes a notifications record value: one JSON object with
// a string symbol member (Fields.Symbol); every other member is optional
// and may have any type. It is rejected (a *Error) when it is not one
// JSON object (invalid_json, wrong_type), has no symbol (missing_field),
// a symbol that is not a string (wrong_type), two members of the same name
// (invalid_value: its alert could keep only one), or an invalid symbol
// (CheckSymbol). The whole object is validated; only the symbol is
// decoded. The result aliases value, which must not change while it is
// in use. It never panics.
func (d *Decoder) Notification(value []byte) (NotificationValue, error) {
	if err := checkSize(value, d.maxBytes); err != nil {
		return NotificationValue{}, err
	}
	var keyBuf [8]objectKey // most notifications have fewer members
	s := jsonScanner{b: value, shared: true}
	sym := d.symbol
	start, end := -1, -1
	keys := keyBuf[:0]
	object, err := s.top()
	if err != nil {
		return NotificationValue{}, err
	}
	if object {
		start = s.i
		var ok bool
		if !d.symbolASCII {
			keys, end = s.topObject(&sym, keys)
		} else if keys, end, ok = s.fastTop(&sym, keys); !ok {
			// Start again on the general path, from scratch.
			s.i, s.depth, s.syntax, s.typeErr = start, 0, "", nil
			sym.str, sym.set = "", false
			keys, end = s.topObject(&sym, keys[:0])
		}
	}
	if err := s.end(); err != nil {
		return NotificationValue{}, err
	}
	if !sym.set {
		return NotificationValue{}, reject(ReasonMissingField, "notification has no %q member", d.fields.Symbol)
	}
	if name, dup := duplicateKey(keys); dup {
		return NotificationValue{}, reject(ReasonInvalidValue, "notification for %q has two members named %q", sym.str, name)
	}
	if err := CheckSymbol(sym.str); err != nil {
		return NotificationValue{}, err
	}
	n := NotificationValue{Symbol: sym.str, body: value[start:end]}
	for _, k := range keys {
		if m := alertMember(k.name); m >= 0 {
			n.conflicts |= 1 << m
			n.renames = append(n.renames, rename{at: k.start - start, prefixes: renames(k.name, keys)})
		}
	}
	return n, nil
}

// renames is how many times RenamePrefix goes before name to make a name
// none of keys has.
func renames(name string, keys []objectKey) int {
	for p := 1; ; p++ {
		name = RenamePrefix + name
		taken := false
		for _, k := range keys {
			if k.name == name {
				taken = true
				break
			}
		}
		if !taken {
			return p
		}
	}
}

// duplicateKey reports a name two of keys share. The common object has
// none, which a 64-bit filter of each name's length and first and last
// bytes shows in one pass; names that meet in it are compared.
func duplicateKey(keys []objectKey) (string, bool) {
	var seen, clash uint64
	for _, k := range keys {
		h := uint(len(k.name))
		if n := len(k.name); n > 0 {
			h += uint(k.name[0])*7 + uint(k.name[n-1])*31
		}
		bit := uint64(1) << (h & 63)
		clash |= seen & bit
		seen |= bit
	}
	if clash == 0 {
		return "", false
	}
	if len(keys) <= 16 {
		for i := 1; i < len(keys); i++ {
			a := keys[i].name
			for j := range i {
				if b := keys[j].name; len(a) == len(b) && (len(a) == 0 || a[0] == b[0]) && a == b {
					return keys[i].name, true
				}
			}
		}
		return "", false
	}
	names := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, ok := names[k.name]; ok {
			return k.name, true
		}
		names[k.name] = struct{}{}
	}
	return "", false
}

// CheckNotificationKey reports whether a notification's symbol is its
// record's key, which Kafka partitioned it by: a notification keyed
// otherwise would be joined on a task that does not hold its symbol. The
// error is an *Error (ReasonKeyMismatch, as for a tick: CheckKey).
func CheckNotificationKey(key []byte, symbol string) error {
	if string(key) != symbol {
		return reject(ReasonKeyMismatch, "notification for %q has the record key %q: notifications are keyed by their symbol", symbol, truncateKey(key))
	}
	return nil
}

// objectKey is one member name of a top-level object: its unescaped name
// (aliasing the value when it had no escapes) and where it starts, the
// byte after its opening quote.
type objectKey struct {
	name  string
	start int
}

// fastTop is topObject's fast path for the common notification, an
// object whose '{' is at s.i, whose keys are plain ASCII
// (jsonstr.PlainLen) and whose symbol is a plain string: the symbol is
// read in place, other values are skipped (skipString, skipMember). It
// returns false at anything else, leaving s, sym and keys for the caller
// to reset. The symbol's name must be plain ASCII (Decoder.symbolASCII).
func (s *jsonScanner) fastTop(sym *jsonField, keys []objectKey) (_ []objectKey, end int, ok bool) {
	b := s.b
	s.depth = 1
	i := s.i + 1 // after '{'
	for {
		i = wsAt(b, i)
		if i >= len(b) || b[i] != '"' {
			return keys, -1, false
		}
		start := i + 1
		e := start + jsonstr.ShortPlainLen(b[start:])
		if e >= len(b) || b[e] != '"' {
			return keys, -1, false
		}
		var name string
		if e > start {
			name = unsafe.String(&b[start], e-start)
		}
		keys = append(keys, objectKey{name: name, start: start})
		i = wsAt(b, e+1)
		if i >= len(b) || b[i] != ':' {
			return keys, -1, false
		}
		if i = wsAt(b, i+1); i >= len(b) {
			return keys, -1, false
		}
		isSym := name == sym.name || len(name) == len(sym.name) && strings.EqualFold(name, sym.name)
		switch {
		case b[i] == '"' && isSym:
			vs := i + 1
			ve := vs + jsonstr.ShortPlainLen(b[vs:])
			if ve >= len(b) || b[ve] != '"' {
				return keys, -1, false // to be unescaped: the general path
			}
			sym.str, sym.set = "", true
			if ve > vs {
				sym.str = unsafe.String(&b[vs], ve-vs)
			}
			i = ve + 1
		case b[i] == '"':
			end, err := jsonstr.Skip(b[i+1:])
			if err != nil {
				return keys, -1, false // the general path reports it
			}
			i += end + 2
		case isSym:
			return keys, -1, false // null, or a wrong type: the general path says which
		default:
			s.i = i
			s.skipMember()
			if s.syntax != "" {
				return keys, -1, false
			}
			i = s.i
		}
		if i = wsAt(b, i); i >= len(b) {
			return keys, -1, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			s.i, s.depth = i+1, 0
			return keys, i, true
		default:
			return keys, -1, false
		}
	}
}

// wsAt is the index of the first byte at or after i of b that is not
// JSON whitespace.
func wsAt(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// topObject scans the object whose '{' is at s.i, the top-level value of
// a notification: the string member sym (any member matching its name,
// as matchField matches) is decoded, every other value validated and
// skipped, and each member's name appended to keys. end is the index of
// the closing '}' (-1 after a syntax error).
func (s *jsonScanner) topObject(sym *jsonField, keys []objectKey) (_ []objectKey, end int) {
	symASCII := jsonstr.PlainLen(unsafe.Slice(unsafe.StringData(sym.name), len(sym.name))) == len(sym.name)
	if !s.push() {
		return keys, -1
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return keys, s.i - 1
	}
	for s.syntax == "" {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			s.fail("want a string key")
			return keys, -1
		}
		start := s.i + 1
		var name string
		// The common key: plain ASCII up to its closing quote (jsonstr.PlainLen),
		// an alias of the value. ASCII folding keeps lengths, so such a
		// key matches an ASCII symbol name only at its length.
		isSym := false
		if end := start + jsonstr.ShortPlainLen(s.b[start:]); end < len(s.b) && s.b[end] == '"' {
			if end > start {
				name = unsafe.String(&s.b[start], end-start)
			}
			s.i = end + 1
			isSym = name == sym.name || (!symASCII || len(name) == len(sym.name)) && strings.EqualFold(name, sym.name)
		} else {
			key, ok := s.stringToken(true)
			if !ok {
				return keys, -1
			}
			switch {
			case len(key) == 0:
			case &key[0] == &s.b[start]: // not unescaped: an alias
				name = unsafe.String(&s.b[start], len(key))
			default:
				name = string(key)
			}
			isSym = name == sym.name || strings.EqualFold(name, sym.name)
		}
		keys = append(keys, objectKey{name: name, start: start})
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			s.fail("want ':' after an object key")
			return keys, -1
		}
		s.i++
		s.ws()
		switch {
		case isSym:
			s.stringField(sym)
		case s.i < len(s.b) && s.b[s.i] == '"':
			s.skipString()
		default:
			s.skipMember()
		}
		switch more, ok := s.memberEnd(); {
		case !ok:
			return keys, -1
		case !more:
			return keys, s.i - 1
		}
	}
	return keys, -1
}

// appendJoinedHead appends the alert of n: its object, then the join's
// members up to "result" (notification_ts_ms and priceFields, see
// AppendPriceFields).
func appendJoinedHead(dst []byte, n *NotificationValue, notificationTsMs int64, priceFields []byte) []byte {
	dst = n.appendBody(dst)
	dst = append(dst, `,"notification_ts_ms":`...)
	dst = strconv.AppendInt(dst, notificationTsMs, 10)
	return append(dst, priceFields...)
}
