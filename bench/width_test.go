package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWidthSummaryAndFile: the width rounds are summed up per task count
// (ready time, drain rate, idle RSS and files per task), tabled round by
// round in the results file, and drawn in two charts.
func TestWidthSummaryAndFile(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	round := func(tasks int, ready, drain time.Duration, rssKiB int64, files int) widthRound {
		return widthRound{Tasks: tasks, Round: 1, N: 300_000, Start: t0, Ready: t0.Add(ready), FirstTask: t0.Add(ready),
			Last: t0.Add(ready + drain), IdleRSSKiB: rssKiB, Files: files}
	}
	res := results{width: []widthRound{
		round(6, 100*time.Millisecond, time.Second, 60<<10, 40),
		round(1024, 20*time.Second, 3*time.Second, 340<<10, 3090),
	}}
	sum := res.summary()
	for _, want := range []string{
		"width, 1 worker, 6 tasks, median (min–max) of 1 rounds: ready 100ms",
		"drain 300k notifications/s; idle RSS 10240 KiB per task",
		"width, 1 worker, 1024 tasks, median (min–max) of 1 rounds: ready 20s after start",
		"drain 100k notifications/s; idle RSS 340 KiB per task (target ≤ 488 KiB = 0.5 MB); 3.02 open files per task",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	dir := t.TempDir()
	path, err := res.write(config{outDir: dir, name: "t", widthSymbols: 5000, widthNotifications: 60})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(path)
	if !strings.Contains(string(md), "| 1024 | 1 | 300000 | 20s | 100000 |") || !strings.Contains(string(md), "| 340 MiB | 340 KiB | 3090 | 3.02 |") {
		t.Errorf("results file lacks the 1024-task round:\n%s", md)
	}
	for _, chart := range []string{"-width-rate.svg", "-width-rss.svg"} {
		svgs, _ := filepath.Glob(filepath.Join(dir, "*"+chart))
		if len(svgs) != 1 {
			t.Fatalf("%s charts %v; want one", chart, svgs)
		}
		svg, _ := os.ReadFile(svgs[0])
		if !strings.Contains(string(svg), "1024 tasks") {
			t.Errorf("%s lacks the bar of 1024 tasks", chart)
		}
	}
}

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("width", " 6, 256,,1024 ")
	if err != nil || len(got) != 3 || got[0] != 6 || got[2] != 1024 {
		t.Errorf("parseCounts = %v, %v; want [6 256 1024]", got, err)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if _, err := parseCounts("width", bad); err == nil {
			t.Errorf("parseCounts(%q) took it", bad)
		}
	}
}
