package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEOSRatiosAndSummary: with joiner-1w-eos and kstreams-eos rounds,
// the ratios give exactly-once / at-least-once and joiner exactly-once /
// Kafka Streams exactly_once_v2, of medians and round by round, and the
// summary lists both contestants.
func TestEOSRatiosAndSummary(t *testing.T) {
	t0 := time.Unix(1764500000, 0)
	round := func(name string, r int, seconds float64) drainRound {
		return drainRound{Contestant: name, Round: r, N: 1_000_000, Start: t0, Ready: t0,
			First: t0, Last: t0.Add(time.Duration(seconds * float64(time.Second))), CPU: time.Second}
	}
	var res results
	// joiner-1w: 1M/s, 1M/s, 0.5M/s; joiner-1w-eos: 0.8M/s, 0.5M/s, 0.5M/s
	// (ratios 0.8, 0.5, 1; medians 0.5M/s and 1M/s: 0.5); kstreams-eos:
	// 0.1M/s, 0.1M/s, 0.05M/s (ratios 8, 5, 10; medians 0.5M/s and 0.1M/s: 5).
	for r, s := range [][3]float64{{1, 1.25, 10}, {1, 2, 10}, {2, 2, 20}} {
		res.drain = append(res.drain, round("joiner-1w", r+1, s[0]), round("joiner-1w-eos", r+1, s[1]), round("kstreams-eos", r+1, s[2]))
	}
	lines := strings.Join(res.ratioLines(), "\n")
	for _, want := range []string{
		"exactly-once / at-least-once drain (1 worker, target ≥ 0.85×): 0.50× of medians; per round 0.80× (0.50×–1.00×)",
		"joiner exactly-once / Kafka Streams exactly_once_v2 (1 worker, 1 thread; target ≥ 8×): 5.00× of medians; per round 8.00× (5.00×–10.00×)",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("ratios lack %q:\n%s", want, lines)
		}
	}
	sum := res.summary()
	for _, want := range []string{
		"  joiner-1w-eos 500k (500k–800k) notifications/s",
		"  kstreams-eos  100k (50k–100k) notifications/s",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	// Without at-least-once Kafka Streams rounds there is no at-least-once
	// Kafka Streams ratio, and the exactly-once one needs its contestant.
	if strings.Contains(lines, "Kafka Streams (target ≥ 4)") {
		t.Errorf("a joiner / kstreams ratio without kstreams rounds:\n%s", lines)
	}
	res.drain = slices.DeleteFunc(res.drain, func(d drainRound) bool { return d.Contestant == "kstreams-eos" })
	if l := strings.Join(res.ratioLines(), "\n"); strings.Contains(l, "exactly_once_v2") {
		t.Errorf("an exactly_once_v2 ratio without kstreams-eos rounds:\n%s", l)
	}
}

// TestLatencyByGuarantee: latency rounds of both guarantees are summed up
// apart, each with its p99 target (50 ms at-least-once, 150 ms
// exactly-once), and the results file's table and chart name them.
func TestLatencyByGuarantee(t *testing.T) {
	res := results{latency: []latencyRound{
		{Guarantee: atLeastOnce, Round: 1, P50: 5, P90: 8, P99: 20, P999: 30, Max: 40, Samples: 100},
		{Guarantee: exactlyOnce, Round: 1, P50: 60, P90: 90, P99: 120, P999: 140, Max: 160, Samples: 100},
		{Guarantee: atLeastOnce, Round: 2, P50: 6, P90: 9, P99: 24, P999: 31, Max: 41, Samples: 100},
		{Guarantee: exactlyOnce, Round: 2, P50: 70, P90: 95, P99: 130, P999: 150, Max: 170, Samples: 100},
		{Guarantee: exactlyOnce, Round: 3, P50: 65, P90: 92, P99: 110, P999: 145, Max: 165, Samples: 100},
	}}
	sum := res.summary()
	for _, want := range []string{
		"end-to-end latency (1 worker, steady load, at-least-once), median (min–max) of 2 rounds: p50 5.5 ms (5.0 ms–6.0 ms), p90 8.5 ms (8.0 ms–9.0 ms), p99 22.0 ms (20.0 ms–24.0 ms) (target ≤ 50 ms)",
		"end-to-end latency (1 worker, steady load, exactly-once), median (min–max) of 3 rounds: p50 65.0 ms (60.0 ms–70.0 ms), p90 92.0 ms (90.0 ms–95.0 ms), p99 120.0 ms (110.0 ms–130.0 ms) (target ≤ 150 ms)",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	dir := t.TempDir()
	path, err := res.write(config{outDir: dir, name: "t", latencyGuarantees: []string{atLeastOnce, exactlyOnce}})
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| exactly-once | 3 | 0 | 0 | 0.0 | 100 | 65 ms | 92 ms | 110 ms | 145 ms | 165 ms |") {
		t.Errorf("results file lacks exactly-once round 3:\n%s", md)
	}
	svgs, _ := filepath.Glob(filepath.Join(dir, "*-latency.svg"))
	if len(svgs) != 1 {
		t.Fatalf("latency charts %v; want one", svgs)
	}
	svg, _ := os.ReadFile(svgs[0])
	for _, want := range []string{"eos p99", "alo p99"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("latency chart lacks the bar %q", want)
		}
	}
	// Ten bars: neighbouring labels (12 px, centred in their slots) do not
	// overlap.
	slot := float64(chartW-chartLeft-chartRight) / 10
	for _, pair := range [][2]string{{"alo p99.9", "alo max"}, {"eos p99", "eos p99.9"}, {"eos p99.9", "eos max"}, {"alo max", "eos p50"}} {
		if w := (textWidth(pair[0], 12, false) + textWidth(pair[1], 12, false)) / 2; w > slot {
			t.Errorf("labels %q and %q take %.0f px of a %.0f px slot", pair[0], pair[1], w, slot)
		}
	}
}

// TestParseList: the list flags (--figures, --contestants,
// --latency-guarantees) take known items, trimmed, empty ones dropped,
// and name the known ones on an unknown item.
func TestParseList(t *testing.T) {
	got, err := parseList("contestant", " joiner-1w, joiner-1w-eos,,kstreams-eos ", order)
	if err != nil || !slices.Equal(got, []string{"joiner-1w", "joiner-1w-eos", "kstreams-eos"}) {
		t.Errorf("contestants: %q, %v", got, err)
	}
	got, err = parseList("latency guarantee", "exactly-once,at-least-once", []string{atLeastOnce, exactlyOnce})
	if err != nil || !slices.Equal(got, []string{exactlyOnce, atLeastOnce}) {
		t.Errorf("guarantees: %q, %v", got, err)
	}
	if _, err := parseList("latency guarantee", "exactly_once_v2", []string{atLeastOnce, exactlyOnce}); err == nil ||
		!strings.Contains(err.Error(), `unknown latency guarantee "exactly_once_v2" (at-least-once, exactly-once)`) {
		t.Errorf("an unknown guarantee: %v", err)
	}
	for _, name := range []string{"joiner-1w-eos", "kstreams-eos"} {
		if !slices.Contains(order, name) {
			t.Errorf("contestant %s is not in order", name)
		}
	}
	if contestantGuarantee("joiner-1w-eos") != exactlyOnce || contestantGuarantee("joiner-1w") != atLeastOnce || contestantGuarantee("joiner-2w") != atLeastOnce {
		t.Error("contestantGuarantee: joiner-1w-eos must run exactly-once, the others at-least-once")
	}
}
