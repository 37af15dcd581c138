package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// decode is Scan then Unescape of body (without its quotes) under mode:
// the value, or the error's message.
func decode(body string, mode Mode) (string, string) {
	b := []byte(body + `"`)
	end, plain, err := Scan(b, mode)
	switch {
	case err != nil:
		return "", err.Msg
	case end != len(body):
		return "", "ended early"
	case plain:
		return body, ""
	}
	return string(Unescape(nil, b[:end])), ""
}

// TestRule is the table of the package doc: what each mode makes of a
// body that is not Unicode text, and that the rest is the same in both.
func TestRule(t *testing.T) {
	for _, c := range []struct {
		body            string
		replace, strict string // the value, or "error: " and a part of the message
	}{
		{"plain", "plain", "plain"},
		{`caf\u00e9 \"q\" \\ \/ \b\f\n\r\t`, "café \"q\" \\ / \b\f\n\r\t", "café \"q\" \\ / \b\f\n\r\t"},
		{"é😀", "é😀", "é😀"},
		{"a\xffb", "a\ufffdb", "error: invalid UTF-8"},
		{"\xe2\x82", "\ufffd\ufffd", "error: invalid UTF-8"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd", "error: invalid UTF-8"}, // a surrogate in UTF-8
		{`\ud800`, "\ufffd", "error: unpaired surrogate"},
		{`\udc00`, "\ufffd", "error: unpaired surrogate"},
		{`x\ud800y`, "x\ufffdy", "error: unpaired surrogate"},
		{`\ud800\u0041`, "\ufffdA", "error: unpaired surrogate"},
		{`\ud800\ud800`, "\ufffd\ufffd", "error: unpaired surrogate"},
		{`\udc00\ud800`, "\ufffd\ufffd", "error: unpaired surrogate"},
		{`\ud83d\ude00`, "😀", "😀"},
		{`\uD83D\uDE00`, "😀", "😀"},
		{`\ufffd`, "\ufffd", "\ufffd"},
		{"a\x01", "error: control character", "error: control character"},
		{`\x`, "error: expected a valid escape", "error: expected a valid escape"},
		{`\u12`, `error: invalid \u escape`, `error: invalid \u escape`},
		{`\ud800\u12`, `error: invalid \u escape`, `error: invalid \u escape`},
	} {
		for _, m := range []struct {
			mode Mode
			want string
		}{{Replace, c.replace}, {Strict, c.strict}} {
			got, msg := decode(c.body, m.mode)
			if wantErr, isErr := strings.CutPrefix(m.want, "error: "); isErr {
				if !strings.Contains(msg, wantErr) {
					t.Errorf("mode %d: %q = %q, %q; want an error with %q", m.mode, c.body, got, msg, wantErr)
				}
			} else if msg != "" || got != m.want {
				t.Errorf("mode %d: %q = %q, %q; want %q", m.mode, c.body, got, msg, m.want)
			}
		}
	}
	// An unterminated body is an error at its end in both modes.
	for _, mode := range []Mode{Replace, Strict} {
		if _, _, err := Scan([]byte(`abc`), mode); err == nil || err.At != 3 || !strings.Contains(err.Msg, "unexpected end") {
			t.Errorf("mode %d: unterminated: %v", mode, err)
		}
	}
}

// TestSkipPositions: Skip finds the end and the first error of bodies
// whose special byte is at every position around its 8-byte words, its
// 32-byte blocks and the end of the input, as Scan (Replace) does.
func TestSkipPositions(t *testing.T) {
	for n := range 80 {
		for _, special := range []string{`"`, `\n`, `\"`, `\u0041`, "\x01", "\x1f", `\q`, "é", "\xff", `\`, `\u00`} {
			for _, tail := range []string{`"`, `"}}`, ``, `x"` + strings.Repeat("y", 40)} {
				body := strings.Repeat("a", n) + special + strings.Repeat("b", n%13) + tail
				checkSkip(t, []byte(body))
			}
		}
	}
}

// checkSkip: Skip and Scan under Replace agree on b, ending at the same
// '"' or failing at the same byte for the same reason.
func checkSkip(t *testing.T, b []byte) {
	t.Helper()
	end, err := Skip(b)
	wend, _, werr := Scan(b, Replace)
	if (err == nil) != (werr == nil) || err == nil && end != wend || err != nil && *err != *werr {
		t.Fatalf("Skip(%q) = %d, %v; Scan says %d, %v", b, end, err, wend, werr)
	}
}

// strictRef is the Strict rule by its definition: Replace accepts body,
// it is valid UTF-8, and every U+FFFD of its value is one written as such
// (a literal or a \ufffd escape), not one put for a lone surrogate.
func strictRef(raw []byte, value string) bool {
	if !utf8.Valid(raw) {
		return false
	}
	written := strings.Count(string(raw), "\ufffd")
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' {
			if raw[i+1] == 'u' && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
				written++
			}
			i++
		}
	}
	return strings.Count(value, "\ufffd") == written
}

// FuzzScan: under Replace, Scan and Unescape are encoding/json's reading
// of the string; Skip agrees with Scan; Strict accepts exactly the bodies
// that Replace accepts and that are Unicode text (strictRef), with the
// same value.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`plain"`, `caf\u00e9"`, `\ud83d\ude00"`, `\ud800"`, `\ud800\u0041"`, "\xff\"", `\x"`, "a\x01\"", `unterminated`, `a"b"`, `\\ufffd"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSkip(t, b)
		end, plain, err := Scan(b, Replace)
		// encoding/json's end of the string: its first '"' that ends a
		// valid one.
		jend := -1
		for k := range b {
			if b[k] == '"' && json.Valid(append([]byte{'"'}, b[:k+1]...)) {
				jend = k
				break
			}
		}
		if err != nil {
			if jend >= 0 {
				t.Fatalf("Scan(%q): %v; encoding/json reads a string up to byte %d", b, err, jend)
			}
			if _, _, serr := Scan(b, Strict); serr == nil {
				t.Fatalf("Strict accepts %q, Replace says %v", b, err)
			}
			return
		}
		var want string
		if jend != end || json.Unmarshal(append([]byte{'"'}, b[:end+1]...), &want) != nil {
			t.Fatalf("Scan(%q) = %d; encoding/json ends the string at %d", b, end, jend)
		}
		raw := b[:end]
		got := string(Unescape(nil, raw))
		if plain {
			got = string(raw)
		}
		if got != want {
			t.Fatalf("Scan(%q): %q (plain %v); encoding/json reads %q", b, got, plain, want)
		}
		send, splain, serr := Scan(b, Strict)
		if ok := strictRef(raw, want); ok != (serr == nil) {
			t.Fatalf("Strict(%q) = %v; the rule says accepted %v", b, serr, ok)
		}
		if serr == nil && (send != end || splain != (plain && utf8.Valid(raw)) || string(Unescape(nil, raw)) != want) {
			t.Fatalf("Strict(%q) = %d, %v; Replace %d, %v", b, send, splain, end, plain)
		}
	})
}

// TestPrefixLengths: PlainLen, ShortPlainLen and HTMLSafeLen stop at the
// first byte their rule does not take, at every position around the
// 8-byte words, as a byte-by-byte reading does.
func TestPrefixLengths(t *testing.T) {
	ref := func(s string, safe func(c byte) bool) int {
		for i := range len(s) {
			if !safe(s[i]) {
				return i
			}
		}
		return len(s)
	}
	plain := func(c byte) bool { return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' }
	html := func(c byte) bool { return plain(c) && c != '<' && c != '>' && c != '&' }
	for n := range 40 {
		for _, c := range []string{"", `"`, `\`, "\x00", "\x1f", " ", "\x7f", "é", "\xff", "<", ">", "&"} {
			for _, tail := range []string{"", "bc", "bcdefghijk"} {
				s := strings.Repeat("a", n) + c + tail
				if got, want := PlainLen([]byte(s)), ref(s, plain); got != want {
					t.Errorf("PlainLen(%q) = %d, want %d", s, got, want)
				}
				if got, want := ShortPlainLen([]byte(s)), ref(s, plain); got != want {
					t.Errorf("ShortPlainLen(%q) = %d, want %d", s, got, want)
				}
				if got, want := HTMLSafeLen(s), ref(s, html); got != want {
					t.Errorf("HTMLSafeLen(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
	if got := (&SyntaxError{At: 3, Msg: msgControl}).Error(); got != "invalid control character in a string at byte 3" {
		t.Errorf("Error() = %q", got)
	}
}
