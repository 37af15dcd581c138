package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cmd/joiner only parses flags and wires packages: no non-test file grows
// past 200 lines (logic that does goes to a package of its own, as the
// JSON of joiner assign went to copartition/planjson).
func TestNoLongFiles(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files here (%v)", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > 200 {
			t.Errorf("%s has %d lines; cmd/joiner files stay at 200 or fewer: move the logic into a package", f, n)
		}
	}
}
