package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scripts/bench -h and --help print the usage and exit 0 at once: no go,
// java, mvn or download runs, no broker starts (its directory stays empty
// and its port closed), also when the output is piped into head.
func TestScriptHelpStartsNothing(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "bench"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	shims, calls, kafkaDir := filepath.Join(dir, "bin"), filepath.Join(dir, "calls"), filepath.Join(dir, "kafka")
	for _, d := range []string{shims, kafkaDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Every tool a build, a fetch or a broker start needs records its call
	// and fails.
	for _, tool := range []string{"go", "java", "mvn", "curl", "wget", "tar"} {
		shim := "#!/bin/sh\necho " + tool + " \"$@\" >>" + calls + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(shims, tool), []byte(shim), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	for _, cmd := range []string{script + " --help", script + " -h", script + " --rounds 5 --help | head -n 1", script + " -h | head -c 1"} {
		c := exec.Command("bash", "-c", "set -o pipefail; "+cmd)
		c.Env = append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"), "JOINER_KAFKA_DIR="+kafkaDir,
			"JOINER_KAFKA_PORT="+strconv.Itoa(port), "JOINER_KAFKA_CONTROLLER_PORT="+strconv.Itoa(port+1), "JOINER_CACHE="+filepath.Join(dir, "cache"))
		began := time.Now()
		out, err := c.CombinedOutput()
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("%s took %s, want at once", cmd, took)
		}
		if err != nil || !strings.HasPrefix(string(out), "s") {
			t.Errorf("%s: %v, output %q; want exit 0 and the usage", cmd, err, out)
		}
		if !strings.Contains(cmd, "head") && !strings.Contains(string(out), "nothing is built or started") {
			t.Errorf("%s printed %q, not the usage", cmd, out)
		}
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("scripts/bench --help ran: %s", b)
	}
	if entries, _ := os.ReadDir(kafkaDir); len(entries) > 0 {
		t.Errorf("scripts/bench --help wrote the broker dir: %v", entries)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Errorf("a broker listens on port %d after scripts/bench --help", port)
	}
}
