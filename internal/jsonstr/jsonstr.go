// Package jsonstr is joiner's one decoder of JSON string bodies (RFC 8259
// §7), used by the record scanners (package record: ticks and
// notifications) and by the planner's input (copartition/planjson). It
// reads a body from the byte after its opening '"': Skip finds its end,
// Scan validates it, Unescape decodes it.
//
// # What is not Unicode text
//
// JSON's grammar lets a string hold two things that are not Unicode text:
// bytes that are not UTF-8, and a \u escape of one half of a UTF-16
// surrogate pair without the other half ("\ud800", "\ud800\u0041",
// "\udc00"). What becomes of them is the Mode, the one rule of this
// package:
//
//	body                      Replace                  Strict
//	invalid UTF-8 byte        U+FFFD (each byte)       rejected: "invalid UTF-8"
//	lone \ud800 or \udc00     U+FFFD                   rejected: "unpaired surrogate"
//	\ud800\u0041              U+FFFD, then "A"         rejected: "unpaired surrogate"
//	\ud83d\ude00 (a pair)     U+1F600                  U+1F600
//
// Replace is encoding/json's rule, and the record decoders' (input records
// are untrusted producers' bytes: joiner accepts what encoding/json and
// consumers built on it accept, and dead-letters the rest; a notification's
// alert carries its bytes as written anyway). Strict is planjson's: a
// member's name is an identity, and replacing would make two different
// invalid names one member. Every other rule is the same in both modes: a
// control byte (below 0x20) or an unknown escape is a syntax error.
// TestRule in jsonstr_test.go is the table above.
package jsonstr

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Mode is what Scan does with a body that is not Unicode text (see the
// package doc).
type Mode uint8

const (
	// Replace accepts invalid UTF-8 and lone surrogates, which Unescape
	// turns into U+FFFD (encoding/json's rule).
	Replace Mode = iota
	// Strict rejects them.
	Strict
)

// A SyntaxError is why a string body is not valid, and where: At is the
// offset, in the slice given, of the byte the reader stopped at (its
// length at an unexpected end).
type SyntaxError struct {
	At  int
	Msg string
}

func (e *SyntaxError) Error() string { return e.Msg + " at byte " + strconv.Itoa(e.At) }

// The messages of SyntaxError.
const (
	msgEOF       = "unexpected end of JSON input in a string"
	msgEscapeEOF = "unexpected end of JSON input in a string escape"
	msgHex       = "invalid \\u escape in a string"
	msgEscape    = `invalid escape in a string (expected a valid escape: \" \\ \/ \b \f \n \r \t or \uXXXX)`
	msgControl   = "invalid control character in a string"
	msgUTF8      = "invalid UTF-8 in a string"
	msgSurrogate = "unpaired surrogate in a string"
)

// Skip returns the index in b of the closing '"' of the string body b
// starts with, validating what both modes require (escapes, no control
// bytes) but not UTF-8 or surrogates: for a value that is only skipped,
// under Replace. It looks for the bytes that end a run of plain ones
// ('"', '\\', control bytes; not others above 0x7f) 8 at a time in the
// first 32 bytes, where most bodies end, then with bytes.IndexByte, and
// reads each byte at most a few times, however many escapes the body has.
func Skip(b []byte) (end int, err *SyntaxError) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if i >= 32 {
			return skipFrom(b, i)
		}
		if m := stopMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			if k := i + bits.TrailingZeros64(m)/8; b[k] == '"' {
				return k, nil
			} else {
				return skipFrom(b, k)
			}
		}
	}
	for ; i < len(b); i++ { // the last bytes of b
		if c := b[i]; c == '"' {
			return i, nil
		} else if c == '\\' || c < 0x20 {
			break
		}
	}
	return skipFrom(b, i)
}

// stopMask has the high bit set of the bytes of x that end a run of
// plain bytes in Skip; only the lowest is exact (see hasByte).
func stopMask(x uint64) uint64 {
	// hasLess20 and hasByte, their high bits taken once.
	q, e := x^('"'*ones), x^('\\'*ones)
	return ((x+lessK)&^x | (q-ones)&^q | (e-ones)&^e) & highs
}

// lessK is -0x20 repeated in each byte, mod 2^64: x+lessK is x-0x20*ones.
const lessK = 0xdfdfdfdfdfdfdfe0

// plainMask is stopMask with the bytes above 0x7f set too (PlainLen).
func plainMask(x uint64) uint64 {
	return stopMask(x) | x&highs
}

// skipFrom is Skip from b[i], all bytes before it plain.
func skipFrom(b []byte, i int) (end int, err *SyntaxError) {
	q := -1 // the first '"' at or after i, once q >= i
	for {
		if q < i {
			if k := bytes.IndexByte(b[i:], '"'); k >= 0 {
				q = i + k
			} else {
				q = len(b)
			}
		}
		stop := q
		if k := bytes.IndexByte(b[i:q], '\\'); k >= 0 {
			stop = i + k
		}
		if k := controlIndex(b[i:stop]); k >= 0 {
			return 0, &SyntaxError{i + k, msgControl}
		}
		switch {
		case stop >= len(b):
			return 0, &SyntaxError{len(b), msgEOF}
		case b[stop] == '"':
			return stop, nil
		}
		if i, _, err = escape(b, stop); err != nil {
			return 0, err
		}
	}
}

// Scan validates the string body b starts with under mode and returns the
// index in b of its closing '"'; plain is true when the body is its own
// value (no escapes, valid UTF-8), else Unescape decodes it.
func Scan(b []byte, mode Mode) (end int, plain bool, err *SyntaxError) {
	i := PlainLen(b) // the common body: plain ASCII up to its '"'
	plain = true
	for {
		if i >= len(b) {
			return 0, false, &SyntaxError{len(b), msgEOF}
		}
		switch c := b[i]; {
		case c == '"':
			return i, plain, nil
		case c == '\\':
			plain = false
			at := i
			var r rune
			if i, r, err = escape(b, i); err != nil {
				return 0, false, err
			}
			if mode == Strict && utf16.IsSurrogate(r) {
				if i, err = pairLow(b, at, i, r); err != nil {
					return 0, false, err
				}
			}
		case c < 0x20:
			return 0, false, &SyntaxError{i, msgControl}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				if mode == Strict {
					return 0, false, &SyntaxError{i, msgUTF8}
				}
				plain = false
			}
			i += size
		}
	}
}

// escape validates the escape whose '\\' is at b[i] and returns the index
// after it, with the code unit of a \u escape (else 0).
func escape(b []byte, i int) (next int, r rune, err *SyntaxError) {
	i++
	if i >= len(b) {
		return 0, 0, &SyntaxError{len(b), msgEscapeEOF}
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1, 0, nil
	case 'u':
		i++
		for k := range 4 {
			if i+k >= len(b) || !isHex(b[i+k]) {
				return 0, 0, &SyntaxError{i + k, msgHex}
			}
		}
		return i + 4, hexValue(b[i:]), nil
	}
	return 0, 0, &SyntaxError{i, msgEscape}
}

// pairLow checks, under Strict, that the surrogate r escaped at b[at:i] is
// the high half of a pair whose low half is the escape at i, and returns
// the index after it.
func pairLow(b []byte, at, i int, r rune) (int, *SyntaxError) {
	if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
		next, r2, err := escape(b, i)
		if err != nil {
			return 0, err
		}
		if utf16.DecodeRune(r, r2) != utf8.RuneError {
			return next, nil
		}
	}
	return 0, &SyntaxError{at, msgSurrogate}
}

// Unescape appends the value of raw, a body Scan accepted (in either mode)
// without its closing quote, to dst, as encoding/json's unquote does:
// escapes decoded, invalid UTF-8 and lone surrogates as U+FFFD (which
// Strict has rejected already).
func Unescape(dst, raw []byte) []byte {
	for r := 0; r < len(raw); {
		c := raw[r]
		switch {
		case c == '\\':
			switch raw[r+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := hexValue(raw[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(raw) && raw[r] == '\\' && raw[r+1] == 'u' && isHex(raw[r+2]) && isHex(raw[r+3]) && isHex(raw[r+4]) && isHex(raw[r+5]) {
						if d := utf16.DecodeRune(rr, hexValue(raw[r+2:])); d != utf8.RuneError {
							dst = utf8.AppendRune(dst, d)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, raw[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(raw[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexValue(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// SWAR constants: a byte repeated 8 times.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasByte has the high bit of a byte set where x has the byte c (given
// repeated in each byte of c). Above the first such byte a borrow may set
// more, so only the lowest set bit (or whether any is set) is exact.
func hasByte(x, c uint64) uint64 {
	y := x ^ c
	return (y - ones) &^ y & highs
}

// hasLess20 is hasByte for the bytes below 0x20.
func hasLess20(x uint64) uint64 {
	return (x - 0x20*ones) &^ x & highs
}

// PlainLen is the length of the prefix of b that a JSON string may hold
// as is and that is its own value: ASCII, not a control character, '"' or
// '\\'. It reads 8 bytes at a time (the bytes after a string's end are in
// b as well).
func PlainLen(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if m := plainMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

// ShortPlainLen is PlainLen with the first 8 bytes checked inline: most
// keys and many values end within them.
func ShortPlainLen(b []byte) int {
	if len(b) >= 8 {
		if m := plainMask(binary.LittleEndian.Uint64(b)); m != 0 {
			return bits.TrailingZeros64(m) / 8
		}
	}
	return PlainLen(b)
}

// controlIndex is the index of the first byte of b below 0x20, or -1. It
// reads 32 bytes at a time while there is none (the high bits of
// hasLess20 are taken once per 32 bytes: an OR of the words' borrows is
// the OR of their masks).
func controlIndex(b []byte) int {
	const k = lessK
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		x0 := binary.LittleEndian.Uint64(w[0:8])
		x1 := binary.LittleEndian.Uint64(w[8:16])
		x2 := binary.LittleEndian.Uint64(w[16:24])
		x3 := binary.LittleEndian.Uint64(w[24:32])
		if ((x0+k)&^x0|(x1+k)&^x1|(x2+k)&^x2|(x3+k)&^x3)&highs != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		if m := hasLess20(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return -1
}

// HTMLSafeLen is the length of the prefix of s that an encoder with
// encoding/json's HTML escaping copies as is: ASCII, not a control
// character, '"', '\\', '<', '>' or '&'. It reads 8 bytes at a time.
func HTMLSafeLen(s string) int {
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // only read
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		special := x | hasLess20(x) | hasByte(x, '"'*ones) | hasByte(x, '\\'*ones) |
			hasByte(x, '<'*ones) | hasByte(x, '>'*ones) | hasByte(x, '&'*ones)
		if m := special & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b) && htmlSafe[b[i]]; i++ {
	}
	return i
}

// htmlSafe says which bytes HTMLSafeLen counts.
var htmlSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()
