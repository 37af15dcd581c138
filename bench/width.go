package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// widthRound is one joiner worker owning every task of topics of Tasks
// partitions: it restores them, drains a backlog spread over all of
// them, then idles.
type widthRound struct {
	Tasks, Round int
	N            int64 // alerts read back
	Start        time.Time
	Ready        time.Time // /readyz answered 200: every task restored
	FirstTask    time.Time // the first task started on its notifications (its log)
	Last         time.Time // the last alert's append time
	CPU          time.Duration
	MaxRSSKiB    int64
	// Idle, widthIdle after the last alert: the worker's RSS and open
	// files (/proc), its sockets included.
	IdleRSSKiB int64
	Files      int
}

// Rate is the drain rate: alerts over the time from the first task's
// start to the last alert.
func (r widthRound) Rate() float64 { return float64(r.N) / r.Last.Sub(r.FirstTask).Seconds() }

// RSSPerTaskKiB is the idle RSS over the tasks.
func (r widthRound) RSSPerTaskKiB() float64 { return float64(r.IdleRSSKiB) / float64(r.Tasks) }

// FilesPerTask is the idle open files over the tasks.
func (r widthRound) FilesPerTask() float64 { return float64(r.Files) / float64(r.Tasks) }

// widthIdle is how long a width round's worker idles after its last
// alert before its RSS and files are read.
const widthIdle = 10 * time.Second

// width measures one worker at each of c.widths tasks: the topics get
// that many partitions and a backlog of c.widthSymbols symbols (one tick
// and c.widthNotifications notifications each, spread by murmur2 over
// the partitions).
func (b *bench) width(ctx context.Context) error {
	c := b.cfg
	for _, tasks := range c.widths {
		prefix := fmt.Sprintf("%s-width%d", b.prefix, tasks)
		market, notifications := prefix+"-market", prefix+"-notifications"
		for _, t := range []string{market, notifications} {
			if err := b.createTopic(ctx, t, tasks, false); err != nil {
				return err
			}
		}
		say("width: %d tasks: producing %d symbols × 1 tick and × %d notifications", tasks, c.widthSymbols, c.widthNotifications)
		if err := b.backlog(ctx, market, notifications, c.widthSymbols, 1, c.widthNotifications, 0); err != nil {
			return err
		}
		for round := 1; round <= c.widthRounds; round++ {
			r, err := b.widthOnce(ctx, tasks, round, market, notifications, int64(c.widthSymbols*c.widthNotifications))
			if err != nil {
				return fmt.Errorf("%d tasks, round %d: %w", tasks, round, err)
			}
			say("width: %d tasks round %d: ready %s after start, %.0f notifications/s, idle RSS %d MiB (%.0f KiB per task), %d open files (%.2f per task)",
				tasks, round, r.Ready.Sub(r.Start).Round(time.Millisecond), r.Rate(), r.IdleRSSKiB>>10, r.RSSPerTaskKiB(), r.Files, r.FilesPerTask())
			b.res.width = append(b.res.width, r)
		}
		b.deleteTopics(market, notifications)
	}
	return nil
}

func (b *bench) widthOnce(ctx context.Context, tasks, round int, market, notifications string, n int64) (widthRound, error) {
	id := fmt.Sprintf("%s-width%d-%d", b.prefix, tasks, round)
	output := id + "-out"
	if err := b.createTopic(ctx, output, tasks, true); err != nil {
		return widthRound{}, err
	}
	defer b.deleteTopics(output)
	r := widthRound{Tasks: tasks, Round: round, Start: time.Now()}
	ps, ready, err := b.startJoiners(ctx, 1, id, market, notifications, output, atLeastOnce)
	if err != nil {
		return r, err
	}
	r.Ready = ready
	err = b.waitRecords(ctx, output, tasks, n, 10*time.Minute)
	if err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(widthIdle):
		}
	}
	if err == nil {
		r.IdleRSSKiB, r.Files, err = procUsage(ps[0].cmd.Process.Pid)
	}
	r.FirstTask = taskStart(ps)
	r.CPU, r.MaxRSSKiB = stopAll(ps)
	if err != nil {
		return r, err
	}
	if r.FirstTask.IsZero() {
		r.FirstTask = r.Ready
	}
	_, r.Last, r.N, err = b.outputSpan(ctx, output, tasks)
	return r, err
}

// procUsage is the RSS (KiB) and the open files of process pid, from
// /proc.
func procUsage(pid int) (rssKiB int64, files int, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKiB, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
		}
	}
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, 0, err
	}
	return rssKiB, len(fds), nil
}

// byTasks groups the width rounds by task count, in the order measured.
func (r *results) byTasks() (counts []int, m map[int][]widthRound) {
	m = map[int][]widthRound{}
	for _, w := range r.width {
		if _, ok := m[w.Tasks]; !ok {
			counts = append(counts, w.Tasks)
		}
		m[w.Tasks] = append(m[w.Tasks], w)
	}
	return counts, m
}

// widthSummary is the width figure's lines of the summary.
func (r *results) widthSummary(b *strings.Builder) {
	counts, m := r.byTasks()
	for _, n := range counts {
		ws := m[n]
		fmt.Fprintf(b, "width, 1 worker, %d tasks, median (min–max) of %d rounds: ready %s after start; drain %s notifications/s; idle RSS %s KiB per task (target ≤ 488 KiB = 0.5 MB); %s open files per task (target ≤ 4)\n",
			n, len(ws),
			spreadOf(collect(ws, func(w widthRound) float64 { return w.Ready.Sub(w.Start).Seconds() })).format(secs),
			spreadOf(collect(ws, widthRound.Rate)).format(rate),
			spreadOf(collect(ws, widthRound.RSSPerTaskKiB)).format(func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			spreadOf(collect(ws, widthRound.FilesPerTask)).format(func(v float64) string { return fmt.Sprintf("%.2f", v) }))
	}
}

// writeWidth writes the width section of the results file and its charts.
func (r *results) writeWidth(b *bytes.Buffer, c config, base, date, commit string) error {
	counts, m := r.byTasks()
	charts := []struct {
		file, title, unit string
		value             func(widthRound) float64
		sub               func(float64) string
	}{
		{base + "-width-rate.svg", widthRateTitle, "notifications/s", widthRound.Rate, func(v float64) string { return rate(v) + "/s" }},
		{base + "-width-rss.svg", widthRSSTitle, "KiB per task", widthRound.RSSPerTaskKiB, func(v float64) string { return fmt.Sprintf("%.0f KiB", v) }},
	}
	for _, ch := range charts {
		var bars []bar
		for _, n := range counts {
			s := spreadOf(collect(m[n], ch.value))
			bars = append(bars, bar{Label: fmt.Sprintf("%d tasks", n), Value: s.Median, Low: s.Min, Hi: s.Max, Sublabel: ch.sub(s.Median)})
		}
		if err := os.WriteFile(filepath.Join(c.outDir, ch.file), barChart(ch.title, ch.unit, chartNote(date, commit, len(m[counts[0]]), roundsEach), bars), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(b, "\n## Width\n\nOne worker owns every task of topics of N partitions. Backlog: %d symbols × 1 tick and × %d notifications, spread over the partitions by murmur2. Each round starts the worker with a fresh group, state dir and output topic. Ready: its /readyz answers 200 (every task restored). Drain rate = notifications / (last alert's append time − the first task's start). Idle: %s after the last alert, the worker's VmRSS and its open files (/proc/<pid>/fd, sockets included), over the tasks.\n\n![drain rate by width](%s) ![idle RSS per task](%s)\n\n",
		c.widthSymbols, c.widthNotifications, widthIdle, charts[0].file, charts[1].file)
	b.WriteString("| tasks | round | notifications | ready after start | notifications/s | CPU | peak RSS | idle RSS | idle RSS per task | open files | per task |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range r.width {
		fmt.Fprintf(b, "| %d | %d | %d | %s | %.0f | %s | %d MiB | %d MiB | %.0f KiB | %d | %.2f |\n", w.Tasks, w.Round, w.N,
			secs(w.Ready.Sub(w.Start).Seconds()), w.Rate(), w.CPU.Round(time.Millisecond), w.MaxRSSKiB>>10, w.IdleRSSKiB>>10, w.RSSPerTaskKiB(), w.Files, w.FilesPerTask())
	}
	return nil
}
