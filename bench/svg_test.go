package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every chart title fits the chart's 640 px at its full size, by the
// width estimate, and so does the note (date, commit, rounds) of a run with
// a long commit description; both are in the SVG.
func TestChartTextFits(t *testing.T) {
	for _, title := range []string{throughputTitle, latencyTitle, restoreTitle, widthRateTitle, widthRSSTitle} {
		if w := textWidth(title, titleSize, true); w > titleMaxWidth {
			t.Errorf("title %q is about %.0f px wide at %d px; the chart has %d", title, w, titleSize, titleMaxWidth)
		}
	}
	long := "f3edcee (with uncommitted changes)"
	for _, note := range []string{
		chartNote("2026-12-01", long, 10, roundsEach),
		chartNote("2026-12-01", long, 10, roundsOnly),
		chartNote("2026-12-01", long, 10, roundsEach),
	} {
		if w := textWidth(note, noteSize, false); w > noteMaxWidth {
			t.Errorf("note %q is about %.0f px wide at %d px; the chart has %d", note, w, noteSize, noteMaxWidth)
		}
		svg := string(barChart(latencyTitle, "ms", note, []bar{{Label: "p50", Value: 3}}))
		for _, want := range []string{`font-size="15.0" font-weight="bold">` + latencyTitle + "<", `font-size="11.0" fill="#555">` + note + "<"} {
			if !strings.Contains(svg, want) {
				t.Errorf("chart lacks %q:\n%s", want, svg)
			}
		}
	}
	// A title too wide for the chart is set smaller, to fit.
	wide := strings.Repeat("End-to-end latency percentiles (whiskers) ", 3)
	svg := string(barChart(wide, "ms", "n", nil))
	m := regexp.MustCompile(`font-size="([0-9.]+)" font-weight="bold"`).FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("no title in\n%s", svg)
	}
	size, _ := strconv.ParseFloat(m[1], 64)
	if size >= titleSize || textWidth(wide, size, true) > titleMaxWidth {
		t.Errorf("a %.0f px title is set at %.1f px: %.0f px wide, the chart has %d", textWidth(wide, titleSize, true), size, textWidth(wide, size, true), titleMaxWidth)
	}
	// The estimate is no under-estimate for the old latency title, which
	// real renderers cut off at 640 px.
	if w := textWidth("End-to-end latency percentiles, 1 worker (whiskers: min–max of rounds)", titleSize, true); w <= titleMaxWidth {
		t.Errorf("the old latency title is estimated at %.0f px, but it does not fit %d px", w, titleMaxWidth)
	}
}

// The latency chart a run writes says its date, commit and rounds.
func TestLatencyChartNote(t *testing.T) {
	dir := t.TempDir()
	r := &results{latency: []latencyRound{{Round: 1, P50: 3, P90: 5, P99: 9, P999: 12, Max: 20}, {Round: 2, P50: 4, P90: 6, P99: 10, P999: 13, Max: 25}}}
	if _, err := r.write(config{outDir: dir, name: "t"}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*-t-latency.svg"))
	if len(files) != 1 {
		t.Fatalf("latency charts written: %v", files)
	}
	svg, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	date := strings.TrimSuffix(filepath.Base(files[0]), "-t-latency.svg")
	if want := chartNote(date, gitCommit(), 2, roundsOnly); !strings.Contains(string(svg), ">"+want+"<") {
		t.Errorf("latency chart lacks the note %q:\n%s", want, svg)
	}
}
