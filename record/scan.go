package record

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/joiner-dev/joiner/internal/jsonstr"
)

// A hand-written scanner for the two fixed input schemas (Tick,
// Notification), used instead of encoding/json's reflection. It accepts and
// rejects exactly what the strict decoder did (json.Decoder into a struct of
// pointer fields, then a check for trailing data), with the same
// Error reasons; record_ref_test.go keeps that decoder and the fuzz
// targets compare the two:
//
//   - a syntax error anywhere in the first JSON value is invalid_json, even
//     when a field before it had the wrong type (encoding/json validates the
//     whole value before decoding it);
//   - then a wrong type (a non-object top-level value other than null, a
//     non-string id/user/symbol/text, a non-number price, a number beyond
//     float64's range) is wrong_type;
//   - then data after the value, unless it starts with ']' or '}' (what
//     json.Decoder.More reports), is invalid_json;
//   - keys match case-insensitively (Unicode simple folding, as
//     bytes.EqualFold), after unescaping; a later duplicate wins, and null
//     resets a field; unknown keys are skipped but still validated;
//   - nesting beyond 10,000 levels is invalid_json;
//   - strings are unescaped as encoding/json does, invalid UTF-8 and lone
//     surrogates becoming U+FFFD (jsonstr.Replace: package jsonstr states
//     the rule, and why planjson's differs).
//
// The common record (no whitespace, keys in their exact case, plain
// ASCII strings, a price with a few decimals) is scanned by one fast path,
// fastObject, that falls back to the general scanner, from the start, at
// anything else; both read strings 8 bytes at a time up to their first
// byte that needs attention (jsonstr.PlainLen), compare keys exactly
// before case folding (exactKey), and convert a short decimal exactly
// without strconv (parseShortDecimal). Values that are only validated are
// skipped by jsonstr.Skip and, in notifications, skipNested.

// maxNestingDepth is encoding/json's limit on nested arrays and objects.
const maxNestingDepth = 10000

// jsonField is one field of a fixed schema while it is scanned.
type jsonField struct {
	name string // JSON key
	// key is name and its closing '"' as a little-endian word, keyMask
	// the bytes of it that count (0 for a name of 8 bytes or more):
	// exactKey compares them with the 8 bytes after a key's opening '"'.
	key, keyMask uint64
	str          string // the value of a string field
	num          float64
	isNum        bool // a number field (price), else a string field
	set          bool // present and not null
}

// newField is the field of a schema named name.
func newField(name string, isNum bool) jsonField {
	f := jsonField{name: name, isNum: isNum}
	if n := len(name); n < 8 {
		var w [8]byte
		copy(w[:], name)
		w[n] = '"'
		f.key, f.keyMask = binary.LittleEndian.Uint64(w[:]), ^uint64(0)>>(64-8*(n+1))
	}
	return f
}

type jsonScanner struct {
	b     []byte
	i     int
	depth int
	// syntax is the first syntax error, typeErr the first wrong type.
	syntax  string
	typeErr error
	// shared: plain string fields alias b (unsafe.String) instead of
	// being copied (DecodeNotificationShared, DecodeTickShared).
	shared bool
	// str is the whole record as one string, made on the first plain
	// string field when not shared: fields are substrings of it (one
	// allocation per record).
	str string
	// key is scratch space for unescaping keys.
	key [64]byte
}

// scanRecord parses value, which must be one JSON object, into fields. It
// returns nil or a *Error with reason invalid_json or wrong_type. With
// shared, the string fields that needed no unescaping alias value.
func scanRecord(value []byte, fields []jsonField, shared bool) error {
	s := jsonScanner{b: value, shared: shared}
	object, err := s.top()
	if err != nil {
		return err
	}
	if object {
		if start := s.i; !s.fastObject(fields) {
			// Start again on the general path, from scratch.
			s.i, s.depth, s.syntax, s.typeErr = start, 0, "", nil
			for i := range fields {
				fields[i].str, fields[i].num, fields[i].set = "", 0, false
			}
			s.object(fields)
		}
	}
	return s.end()
}

// top starts the scan of a record's value, which must be one JSON
// object: object is true when one starts at s.i, for the caller to scan;
// a null is taken (no fields set), any other value skipped as a wrong
// type. The error is the empty record's.
func (s *jsonScanner) top() (object bool, err error) {
	s.ws()
	switch {
	case s.i >= len(s.b):
		return false, reject(ReasonInvalidJSON, "empty record: want a JSON object")
	case s.b[s.i] == '{':
		return true, nil
	case s.b[s.i] == 'n':
		s.literal("null")
	default:
		kind := s.skipValue()
		s.wrongType("", "object", kind)
	}
	return false, nil
}

// end finishes the scan of a record's value after top and the object:
// nil or a *Error with reason invalid_json (a syntax error first, then
// data after the value, unless it starts with ']' or '}') or wrong_type.
func (s *jsonScanner) end() error {
	if s.syntax != "" {
		return reject(ReasonInvalidJSON, "%s", s.syntax)
	}
	if s.typeErr != nil {
		return s.typeErr
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] != ']' && s.b[s.i] != '}' {
		return reject(ReasonInvalidJSON, "trailing data after the JSON object")
	}
	return nil
}

func (s *jsonScanner) fail(msg string) {
	if s.syntax == "" {
		s.syntax = msg + " at byte " + strconv.Itoa(s.i)
	}
	s.i = len(s.b) // stop
}

func (s *jsonScanner) wrongType(field, want, got string) {
	if s.typeErr == nil && got != "" {
		s.typeErr = reject(ReasonWrongType, "field %q must be a %s, not %s", field, want, got)
	}
}

// ws skips whitespace; the common case, none, is inlined.
func (s *jsonScanner) ws() {
	if s.i < len(s.b) && s.b[s.i] <= ' ' {
		s.skipWS()
	}
}

func (s *jsonScanner) skipWS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// fastObject scans the common record, an object whose '{' is at s.i, in
// one pass: no whitespace, every key the name of one of fields in its
// exact case, every value a plain string (see jsonstr.PlainLen) or, for a
// number field, a short decimal (see parseShortDecimal). It returns false at
// anything else, leaving s and fields for scanRecord to reset.
func (s *jsonScanner) fastObject(fields []jsonField) bool {
	b := s.b
	s.i++ // '{'
	for {
		if s.i >= len(b) || b[s.i] != '"' {
			return false
		}
		f, ok := s.exactKey(fields)
		if !ok || s.i >= len(b) || b[s.i] != ':' {
			return false
		}
		s.i++
		if s.i >= len(b) {
			return false
		}
		if f.isNum {
			start := s.i
			if c := b[s.i]; !(c == '-' || '0' <= c && c <= '9') || !s.number() {
				return false
			}
			if f.num, ok = parseShortDecimal(b[start:s.i]); !ok {
				return false
			}
		} else {
			if b[s.i] != '"' {
				return false
			}
			start := s.i + 1
			end := start + jsonstr.PlainLen(b[start:])
			if end >= len(b) || b[end] != '"' {
				return false
			}
			s.setString(f, start, end)
			s.i = end + 1
		}
		f.set = true
		if s.i >= len(b) {
			return false
		}
		switch b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// object scans an object whose '{' is at s.i into fields.
func (s *jsonScanner) object(fields []jsonField) {
	if !s.push() {
		return
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return
	}
	for s.syntax == "" {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			s.fail("want a string key")
			return
		}
		var f *jsonField
		var ok bool
		if fields == nil {
			// An object skipped: its keys are only validated.
			if s.skipString(); s.syntax != "" {
				return
			}
		} else if f, ok = s.exactKey(fields); !ok {
			var key []byte
			if key, ok = s.stringToken(true); !ok {
				return
			}
			f = matchField(fields, key)
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			s.fail("want ':' after an object key")
			return
		}
		s.i++
		s.ws()
		switch {
		case f == nil:
			s.skipValue()
		case f.isNum:
			s.numberField(f)
		default:
			s.stringField(f)
		}
		if more, _ := s.memberEnd(); !more {
			return
		}
	}
}

// memberEnd takes what follows a member's value in an object: ',' (more
// members follow) or the closing '}' (ok, and the object is left);
// anything else is a syntax error.
func (s *jsonScanner) memberEnd() (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		s.fail("unexpected end of JSON input")
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, true
	case '}':
		s.i++
		s.depth--
		return false, true
	}
	s.fail("want ',' or '}' after an object value")
	return false, false
}

// exactKey matches the common key, the name of one of fields in its exact
// case (without escapes), whose '"' is at s.i, and moves past it. ok is
// false for any other key: stringToken and matchField then take it.
func (s *jsonScanner) exactKey(fields []jsonField) (f *jsonField, ok bool) {
	rest := s.b[s.i+1:]
	var next uint64 // the 8 bytes after the '"', when there are 8
	if len(rest) >= 8 {
		next = binary.LittleEndian.Uint64(rest)
	}
	for i := range fields {
		f := &fields[i]
		n := len(f.name)
		if len(rest) >= 8 && f.keyMask != 0 {
			ok = next&f.keyMask == f.key
		} else {
			ok = len(rest) > n && rest[n] == '"' && string(rest[:n]) == f.name
		}
		if ok {
			s.i += n + 2
			return f, true
		}
	}
	return nil, false
}

// matchField is the field of key: the first whose name is key, else the
// first whose name is key case-insensitively; nil for an unknown key.
func matchField(fields []jsonField, key []byte) *jsonField {
	for i := range fields {
		if string(key) == fields[i].name {
			return &fields[i]
		}
	}
	for i := range fields {
		if bytes.EqualFold(key, []byte(fields[i].name)) {
			return &fields[i]
		}
	}
	return nil
}

func (s *jsonScanner) stringField(f *jsonField) {
	if s.i >= len(s.b) {
		s.fail("unexpected end of JSON input")
		return
	}
	switch s.b[s.i] {
	case '"':
		start := s.i + 1
		v, ok := s.stringToken(false)
		if !ok {
			break
		}
		if len(v) > 0 && &v[0] != &s.b[start] {
			f.str = string(v) // unescaped
		} else {
			s.setString(f, start, start+len(v))
		}
		f.set = true
	case 'n':
		if s.literal("null") {
			f.str, f.set = "", false
		}
	default:
		s.wrongType(f.name, "string", s.skipValue())
	}
}

// setString sets f to the string s.b[start:end], which needed no
// unescaping: an alias of the record when shared, else a substring of
// its one copy.
func (s *jsonScanner) setString(f *jsonField, start, end int) {
	switch {
	case start == end:
		f.str = ""
	case s.shared:
		f.str = unsafe.String(&s.b[start], end-start)
	default:
		if s.str == "" {
			s.str = string(s.b)
		}
		f.str = s.str[start:end]
	}
}

func (s *jsonScanner) numberField(f *jsonField) {
	if s.i >= len(s.b) {
		s.fail("unexpected end of JSON input")
		return
	}
	switch c := s.b[s.i]; {
	case c == '-' || ('0' <= c && c <= '9'):
		start := s.i
		if !s.number() {
			return
		}
		v, ok := parseShortDecimal(s.b[start:s.i])
		if ok {
			f.num, f.set = v, true
			return
		}
		v, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
		if err != nil {
			s.wrongType(f.name, "float64", "number "+string(s.b[start:s.i]))
			return
		}
		f.num, f.set = v, true
	case c == 'n':
		if s.literal("null") {
			f.num, f.set = 0, false
		}
	default:
		s.wrongType(f.name, "float64", s.skipValue())
	}
}

// push enters an array or object.
func (s *jsonScanner) push() bool {
	s.depth++
	if s.depth > maxNestingDepth {
		s.fail("exceeded max depth")
		return false
	}
	return true
}

// skipValue validates and skips one value; it returns its kind for error
// messages ("" after a syntax error).
func (s *jsonScanner) skipValue() string {
	if s.i >= len(s.b) {
		s.fail("unexpected end of JSON input")
		return ""
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.object(nil)
		return s.kind("object")
	case c == '[':
		if !s.push() {
			return ""
		}
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			s.depth--
			return "array"
		}
		for s.syntax == "" {
			s.ws()
			s.skipValue()
			s.ws()
			if s.i >= len(s.b) {
				s.fail("unexpected end of JSON input")
				break
			}
			if s.b[s.i] == ',' {
				s.i++
				continue
			}
			if s.b[s.i] == ']' {
				s.i++
				s.depth--
				break
			}
			s.fail("want ',' or ']' after an array element")
		}
		return s.kind("array")
	case c == '"':
		s.skipString() // validated, not unescaped
		return s.kind("string")
	case c == 't':
		s.literal("true")
		return s.kind("bool")
	case c == 'f':
		s.literal("false")
		return s.kind("bool")
	case c == 'n':
		s.literal("null")
		return ""
	case c == '-' || ('0' <= c && c <= '9'):
		s.number()
		return s.kind("number")
	default:
		s.fail("invalid character " + strconv.QuoteRune(rune(c)) + " looking for the beginning of a value")
		return ""
	}
}

func (s *jsonScanner) kind(k string) string {
	if s.syntax != "" {
		return ""
	}
	return k
}

func (s *jsonScanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		s.fail("invalid literal, want " + lit)
		return false
	}
	s.i += len(lit)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScanner) number() bool {
	b := s.b
	if s.i < len(b) && b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(b) && b[s.i] == '0':
		s.i++
	case s.i < len(b) && '1' <= b[s.i] && b[s.i] <= '9':
		for s.i < len(b) && '0' <= b[s.i] && b[s.i] <= '9' {
			s.i++
		}
	default:
		s.fail("invalid number")
		return false
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if s.i >= len(b) || b[s.i] < '0' || b[s.i] > '9' {
			s.fail("invalid number: want a digit after '.'")
			return false
		}
		for s.i < len(b) && '0' <= b[s.i] && b[s.i] <= '9' {
			s.i++
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if s.i >= len(b) || b[s.i] < '0' || b[s.i] > '9' {
			s.fail("invalid number: want a digit in the exponent")
			return false
		}
		for s.i < len(b) && '0' <= b[s.i] && b[s.i] <= '9' {
			s.i++
		}
	}
	return true
}

// stringToken scans the string whose '"' is at s.i and returns its
// unescaped bytes: a slice of the input when nothing needs unescaping,
// else freshly allocated (or, for a key, in s.key when it fits).
func (s *jsonScanner) stringToken(isKey bool) ([]byte, bool) {
	raw, plain, ok := s.scanString()
	if !ok || plain {
		return raw, ok
	}
	var dst []byte
	if isKey {
		dst = s.key[:0]
	} else {
		dst = make([]byte, 0, len(raw)+utf8.UTFMax)
	}
	return jsonstr.Unescape(dst, raw), true
}

// scanString scans the string whose '"' is at s.i, validating it
// (jsonstr.Scan, Replace), and returns its body as it is in the input;
// plain is false when the body needs unescaping (escapes, invalid UTF-8).
func (s *jsonScanner) scanString() (raw []byte, plain, ok bool) {
	start := s.i + 1 // after the opening quote
	end, plain, err := jsonstr.Scan(s.b[start:], jsonstr.Replace)
	if err != nil {
		s.i = start + err.At
		s.fail(err.Msg)
		return nil, false, false
	}
	s.i = start + end + 1
	return s.b[start : start+end], plain, true
}

// skipString skips the string whose '"' is at s.i, validating it as
// scanString does, without reading its value (jsonstr.Skip).
func (s *jsonScanner) skipString() {
	start := s.i + 1
	end, err := jsonstr.Skip(s.b[start:])
	if err != nil {
		s.i = start + err.At
		s.fail(err.Msg)
		return
	}
	s.i = start + end + 1
}

// pow10 are the powers of ten of short decimals, all exact float64s.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// parseShortDecimal converts a number that number() accepted, when it has
// no exponent and at most 15 digits, exactly as strconv.ParseFloat does:
// its digits are an exact float64 (below 2^53), and so is the power of ten
// it is divided by, and one IEEE division rounds correctly. ok is false
// for any other number.
func parseShortDecimal(b []byte) (v float64, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var m uint64
	digits, decimals := 0, -1
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			m = m*10 + uint64(c-'0')
			digits++
			if decimals >= 0 {
				decimals++
			}
		case c == '.':
			decimals = 0
		default:
			return 0, false // an exponent
		}
	}
	if digits > 15 {
		return 0, false
	}
	v = float64(m)
	if decimals > 0 {
		v /= pow10[decimals]
	}
	if neg {
		v = -v
	}
	return v, true
}

// maxSkipNesting is how deep skipNested goes before it leaves a value to
// skipValue.
const maxSkipNesting = 64

// skipMember is skipValue for the values of a notification's members,
// which are only validated: an object or an array by skipNested.
func (s *jsonScanner) skipMember() {
	if s.i < len(s.b) && (s.b[s.i] == '{' || s.b[s.i] == '[') && s.skipNested() {
		return
	}
	s.skipValue()
}

// skipNested validates and skips the object or array whose '{' or '[' is
// at s.i as skipValue does, with the same syntax errors, in one loop
// instead of a call per value: bit d of objects is whether the container
// open at depth d+1 is an object. It returns false, s as it was, for a
// value nested deeper than maxSkipNesting, which skipValue then takes.
func (s *jsonScanner) skipNested() bool {
	b := s.b
	var (
		objects uint64
		depth   int
		start   = s.i
		i       = s.i
		msg     string
	)
open: // b[i] is '{' or '['
	if depth == maxSkipNesting {
		s.i = start
		return false
	}
	if b[i] == '{' {
		objects |= 1 << depth
	} else {
		objects &^= 1 << depth
	}
	depth++
	i = wsAt(b, i+1)
	if i < len(b) && b[i] == closer(objects>>(depth-1)&1) {
		i++
		depth--
		goto closed
	}
member: // at a member of an object or an element of an array
	if objects>>(depth-1)&1 != 0 {
		if i >= len(b) || b[i] != '"' {
			msg = "want a string key"
			goto fail
		}
		end, err := jsonstr.Skip(b[i+1:])
		if err != nil {
			s.i = i + 1 + err.At
			s.fail(err.Msg)
			return true
		}
		i = wsAt(b, i+end+2)
		if i >= len(b) || b[i] != ':' {
			msg = "want ':' after an object key"
			goto fail
		}
		i = wsAt(b, i+1)
	}
	if i >= len(b) {
		msg = "unexpected end of JSON input"
		goto fail
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		goto open
	case c == '"':
		end, err := jsonstr.Skip(b[i+1:])
		if err != nil {
			s.i = i + 1 + err.At
			s.fail(err.Msg)
			return true
		}
		i += end + 2
	default:
		// A number or a literal, or a syntax error: skipValue's.
		s.i = i
		if s.skipValue(); s.syntax != "" {
			return true
		}
		i = s.i
	}
closed: // after a value at depth (0: the value skipped)
	if depth == 0 {
		s.i = i
		return true
	}
	if i = wsAt(b, i); i >= len(b) {
		msg = "unexpected end of JSON input"
		goto fail
	}
	switch c := b[i]; {
	case c == ',':
		i = wsAt(b, i+1)
		goto member
	case c == closer(objects>>(depth-1)&1):
		i++
		depth--
		goto closed
	case objects>>(depth-1)&1 != 0:
		msg = "want ',' or '}' after an object value"
	default:
		msg = "want ',' or ']' after an array element"
	}
fail:
	s.i = i
	s.fail(msg)
	return true
}

// closer is the byte that closes an object (isObject 1) or an array.
func closer(isObject uint64) byte {
	if isObject != 0 {
		return '}'
	}
	return ']'
}
