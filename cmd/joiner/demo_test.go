package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The last line of `joiner demo --json` is the report; the defaults
// reproduce the four-worker demo (4 workers, 6 partitions) with 30/30 local
// joins, and stderr holds no WARN.
func TestDemoJSONLastLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"demo", "--json", "--timeout", "60s"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	var rep struct {
		Workers       int `json:"workers"`
		Partitions    int `json:"partitions"`
		Notifications int `json:"notifications"`
		Alerts        int `json:"alerts"`
		Joins         struct {
			Local  int `json:"local"`
			Remote int `json:"remote"`
			Miss   int `json:"miss"`
		} `json:"joins"`
		PerWorker []struct {
			Instance string `json:"instance"`
			Tasks    []int  `json:"tasks"`
			Local    int    `json:"local"`
			Remote   int    `json:"remote"`
			Miss     int    `json:"miss"`
		} `json:"per_worker"`
	}
	dec := json.NewDecoder(strings.NewReader(lines[len(lines)-1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("last line %q is not the report: %v", lines[len(lines)-1], err)
	}
	if rep.Workers != 4 || rep.Partitions != 6 || rep.Notifications != 30 || rep.Alerts != 30 ||
		rep.Joins.Local != 30 || rep.Joins.Remote != 0 || rep.Joins.Miss != 0 || len(rep.PerWorker) != 4 {
		t.Errorf("report = %+v, want 4 workers, 6 partitions, 30 notifications, 30 alerts, 30 local", rep)
	}
	sum := 0
	for _, w := range rep.PerWorker {
		if w.Tasks == nil {
			t.Errorf("worker %s: tasks is null, want a list", w.Instance)
		}
		sum += w.Local + w.Remote + w.Miss
	}
	if sum != 30 {
		t.Errorf("per-worker joins sum to %d, want 30", sum)
	}
	// The first screen is quiet: a fresh demo group starts with nothing to
	// replay, which is no warning.
	if strings.Contains(stderr.String(), "level=WARN") || strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("joiner demo without --verbose logged a warning or an error:\n%s", stderr.String())
	}
}

func TestDemoUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--workers", "0"},
		{"demo", "--assignor", "sticky"},
		{"demo", "--partitions", "-1"},
		{"demo", "extra"},
		{"demo", "--no-such-flag"},
	} {
		var stdout, stderr bytes.Buffer
		if code := dispatch(args, nil, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if stdout.Len() != 0 || stderr.Len() == 0 {
			t.Errorf("%v: stdout %q, stderr %q; want only stderr", args, stdout.String(), stderr.String())
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	t.Setenv("JOINER_SESSION_TIMEOUT", "soon")
	if code := dispatch([]string{"run"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("bad JOINER_SESSION_TIMEOUT: exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "JOINER_SESSION_TIMEOUT") {
		t.Errorf("stderr %q does not name the variable", stderr.String())
	}
}

// The README's demo sample shows the table a real `joiner demo` prints:
// each worker's tasks and joins (the rest of the sample, the broker's port
// and the timings, change from run to run).
func TestREADMEDemoSample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sample, ok := strings.Cut(string(readme), "$ go run ./cmd/joiner demo\n")
	sample, _, _ = strings.Cut(sample, "```")
	if !ok {
		t.Fatal("README has no `$ go run ./cmd/joiner demo` sample")
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"demo", "--timeout", "60s"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	table := func(s string) []string {
		var rows []string
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) == 5 && (strings.HasPrefix(f[0], "worker") || f[0] == "total") {
				rows = append(rows, strings.Join(f, " "))
			}
		}
		return rows
	}
	if got, want := table(stdout.String()), table(sample); strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
		t.Errorf("joiner demo prints\n%s\nbut the README shows\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
