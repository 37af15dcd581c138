package jsonstr

import (
	"strings"
	"testing"
)

// BenchmarkSkip: Skip of string bodies of a few lengths, each followed by
// the rest of a record as in a real input.
func BenchmarkSkip(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"4B", "push"},
		{"16B", "n0-SYM0421-12345"},
		{"35B", "SYM0421 moved today today today tod"},
		{"300B", strings.Repeat("lorem ipsum ", 25)},
	} {
		in := []byte(c.body + `"}}`)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if end, err := Skip(in); err != nil || end != len(c.body) {
					b.Fatal(end, err)
				}
			}
		})
	}
}
