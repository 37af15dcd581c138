package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one started contestant process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	// ready receives the time the process printed "ready UNIX_MS" on
	// stdout (passthrough, kstreams).
	ready chan time.Time
	log   *os.File
	wg    sync.WaitGroup
	done  chan struct{}
	err   error
}

// start runs argv with its stderr (and stdout, after scanning it for the
// ready line) appended to logPath.
func start(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = f
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, ready: make(chan time.Time, 1), log: f, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, argv[0], err)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if ms, ok := strings.CutPrefix(line, "ready "); ok {
				if v, err := strconv.ParseInt(strings.TrimSpace(ms), 10, 64); err == nil {
					select {
					case p.ready <- time.UnixMilli(v):
					default:
					}
				}
			}
		}
		_, _ = io.Copy(f, out)
	}()
	go func() {
		p.wg.Wait()
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to grace, then kills; it returns the CPU
// time (user+sys) and peak RSS of the process from its rusage.
func (p *proc) stop(grace time.Duration) (cpu time.Duration, maxRSSKiB int64) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		maxRSSKiB = ru.Maxrss
	}
	return cpu, maxRSSKiB
}

// exited reports whether the process has ended on its own.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady waits for the "ready" line, or, with readyURLs, until a GET of
// any of them answers 200 (polled every 5ms). It fails when the process
// exits first.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration, readyURLs ...string) (time.Time, error) {
	deadline := time.After(timeout)
	if len(readyURLs) == 0 {
		select {
		case t := <-p.ready:
			return t, nil
		case <-p.done:
			return time.Time{}, fmt.Errorf("%s exited before it was ready: %v (see %s)", p.name, p.err, p.log.Name())
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not ready after %s (see %s)", p.name, timeout, p.log.Name())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	hc := &http.Client{Timeout: time.Second}
	for {
		for _, u := range readyURLs {
			if resp, err := hc.Get(u); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return time.Now(), nil
				}
			}
		}
		select {
		case <-p.done:
			return time.Time{}, fmt.Errorf("%s exited before it was ready: %v (see %s)", p.name, p.err, p.log.Name())
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not ready after %s (see %s)", p.name, timeout, p.log.Name())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
