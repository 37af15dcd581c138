package testsupport_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/joiner-dev/joiner"

// pkg is what the tests need of `go list -json`: a package's path and
// what its non-test files import.
type pkg struct {
	ImportPath string
	Imports    []string
}

// modulePackages lists every package of the module with the joiner
// packages its non-test files import, by path relative to the module
// ("cmd/joiner", "internal/backoff").
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".." // the module root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var deps []string
		for _, imp := range p.Imports {
			if rel, ok := relative(imp); ok {
				deps = append(deps, rel)
			}
		}
		rel, _ := relative(p.ImportPath)
		pkgs[rel] = deps
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; is the test run from testsupport/?", len(pkgs))
	}
	return pkgs
}

// relative is path without the module prefix, and whether it is in the
// module.
func relative(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// isTestSupport reports whether the package at rel is test support:
// testsupport/... (testkit, oracle, htmltest) and the *test packages
// next to the package they test (kafkasec/kafkasectest).
func isTestSupport(rel string) bool {
	return rel == "testsupport" || strings.HasPrefix(rel, "testsupport/") || strings.HasSuffix(rel, "test")
}

// TestProductImportsNoTestSupport: no non-test file of a product package
// imports test support, and internal/ holds only helpers that import no
// joiner package outside internal/ (nothing there sits above the
// packages that use it).
func TestProductImportsNoTestSupport(t *testing.T) {
	pkgs := modulePackages(t)
	for rel, deps := range pkgs {
		for _, d := range deps {
			if !isTestSupport(rel) && isTestSupport(d) {
				t.Errorf("product package %s imports the test support %s: only _test.go files may", rel, d)
			}
			if strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(d, "internal/") {
				t.Errorf("internal helper %s imports %s: internal/ holds leaf helpers only (test support goes to testsupport/)", rel, d)
			}
		}
	}
	for _, want := range []string{"testsupport/testkit", "testsupport/oracle"} {
		if _, ok := pkgs[want]; !ok {
			t.Errorf("no package %s: update this test with the test support's new place", want)
		}
	}
	if !slices.ContainsFunc(keys(pkgs), func(rel string) bool { return strings.HasPrefix(rel, "internal/") }) {
		t.Error("no package under internal/")
	}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
