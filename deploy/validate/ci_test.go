package validate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// .ci/summary.sh's totals, on a module with a passing, a skipped and a
// failing test: the summary is the last thing printed, its last line is
// "N passed, N failed, N skipped", and the failure still exits non-zero.
func TestCISummary(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":      "module x\n\ngo 1.26\n",
		"a/a_test.go": "package a\nimport \"testing\"\nfunc TestA(t *testing.T) { t.Run(\"s\", func(t *testing.T) { t.Skip(\"later\") }) }\nfunc TestB(t *testing.T) { t.Log(\"--- PASS: not a result\") }\n",
		"b/b_test.go": "package b\nimport (\"strings\"; \"testing\")\nfunc TestF(t *testing.T) {\n\tt.Error(\"the cause\")\n\tt.Log(\"a dump of logs:\\n\" + strings.Repeat(\"a log line\\n\", 300))\n\tt.Fatal(\"boom\")\n}\n",
		"c/c.go":      "package c\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	summary, err := filepath.Abs(filepath.Join(repoRoot, ".ci", "summary.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, script string
		fails        bool
		last         string
	}{
		{"pass", "gotest -count=1 ./a/ ./c/\necho after", false, "2 passed, 0 failed, 1 skipped"},
		{"fail", "gotest -count=1 ./a/\ngotest -count=1 ./...\necho not reached", true, "4 passed, 1 failed, 2 skipped"},
		{"teardown", "trap 'status=$?; echo teardown; ci_summary \"$status\"' EXIT\ngotest -count=1 ./b/", true, "0 passed, 1 failed, 0 skipped"},
	} {
		cmd := exec.Command("bash", "-c", "set -euo pipefail\nsource "+summary+"\ntrap ci_summary EXIT\n"+tc.script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		if tc.fails != (err != nil) {
			t.Errorf("%s: exit error %v, want failure %v\n%s", tc.name, err, tc.fails, out)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if got := lines[len(lines)-1]; got != tc.last {
			t.Errorf("%s: last line %q, want %q\n%s", tc.name, got, tc.last, out)
		}
		if strings.Contains(string(out), "not reached") {
			t.Errorf("%s: went on after a failed step\n%s", tc.name, out)
		}
		if tc.fails && (!strings.Contains(string(out), "--- output of TestF (its last 200 lines) ---\n") || !strings.Contains(string(out), "    b_test.go:6: boom\n")) {
			t.Errorf("%s: the failed test's own output is not shown\n%s", tc.name, out)
		}
		// Its t.Error line, which the dump pushed out of the last 200,
		// is shown before them.
		if tc.fails && !strings.Contains(string(out), "--- TestF: its test lines ---\n    b_test.go:4: the cause\n    b_test.go:5: a dump of logs:\n    b_test.go:6: boom\n--- output of TestF") {
			t.Errorf("%s: the failed test's own lines are not shown first\n%s", tc.name, out)
		}
		if tc.name == "teardown" && !strings.Contains(string(out), "teardown\n\n== summary") {
			t.Errorf("teardown: the summary does not come after the teardown\n%s", out)
		}
	}
}

// .ci/run keeps the totals: it sources .ci/summary.sh, its cleanup ends in
// ci_summary, every go test step runs through gotest or has its log
// tallied, and nothing is printed after the summary.
func TestCIRunPrintsSummaryLast(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	run := string(data)
	for _, want := range []string{"\nsource .ci/summary.sh\ntrap ci_summary EXIT\n", "\tci_summary \"$status\"\n}"} {
		if !strings.Contains(run, want) {
			t.Errorf(".ci/run lacks %q", want)
		}
	}
	logged := regexp.MustCompile(`go test [^\n]*>"\$(\w+)"`)
	for _, line := range strings.Split(run, "\n") {
		l := strings.TrimSpace(line)
		if !strings.Contains(l, "go test ") || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "step ") || strings.HasPrefix(l, "gotest ") {
			continue
		}
		m := logged.FindStringSubmatch(l)
		if m == nil {
			t.Errorf(".ci/run: %q neither runs through gotest nor writes a log that is tallied", l)
			continue
		}
		if !strings.Contains(run, `tally "$`+m[1]+`"`) {
			t.Errorf(".ci/run: the log %s of %q is never tallied", m[1], l)
		}
	}
	if strings.Contains(run, `step "done"`) {
		t.Error(`.ci/run prints step "done" before its teardown; the summary is the end`)
	}
}

// The docs say what .ci/run does: the integration suite's -timeout
// (docs/integration.md) and the broker log lines shown on failure
// (docs/kafka.md).
func TestCIDocsMatchRun(t *testing.T) {
	read := func(parts ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{repoRoot}, parts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	run, integration, kafka := read(".ci", "run"), read("docs", "integration.md"), read("docs", "kafka.md")
	timeout := regexp.MustCompile(`go test -race -count=1 -timeout (\w+) -v \./integration/`)
	want := timeout.FindStringSubmatch(run)
	if want == nil {
		t.Fatal(".ci/run: no `go test -race -count=1 -timeout X -v ./integration/`")
	}
	for _, got := range timeout.FindAllStringSubmatch(integration, -1) {
		if got[1] != want[1] {
			t.Errorf("docs/integration.md says -timeout %s for the integration suite; .ci/run uses %s", got[1], want[1])
		}
	}
	if !timeout.MatchString(integration) {
		t.Errorf("docs/integration.md does not give .ci/run's integration command (-timeout %s)", want[1])
	}
	logs := regexp.MustCompile("scripts/kafka logs ([0-9]+)")
	wantLogs := logs.FindStringSubmatch(run)
	if wantLogs == nil {
		t.Fatal(".ci/run: no scripts/kafka logs N")
	}
	for _, doc := range []struct{ name, text string }{{"docs/kafka.md", kafka}, {"docs/integration.md", integration}} {
		for _, got := range logs.FindAllStringSubmatch(doc.text, -1) {
			if got[1] != wantLogs[1] {
				t.Errorf("%s says scripts/kafka logs %s; .ci/run shows %s lines", doc.name, got[1], wantLogs[1])
			}
		}
	}
}
