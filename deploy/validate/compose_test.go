package validate

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// composeFile is the part of docker-compose.yml these checks read; the full
// schema is checked by `docker-compose config -q` in scripts/validate-deploy.
type composeFile struct {
	Services map[string]struct {
		Image           string            `json:"image"`
		Build           any               `json:"build"`
		Command         any               `json:"command"`
		Environment     map[string]string `json:"environment"`
		Volumes         []string          `json:"volumes"`
		StopGracePeriod string            `json:"stop_grace_period"`
		DependsOn       any               `json:"depends_on"`
		Entrypoint      any               `json:"entrypoint"`
		Hostname        string            `json:"hostname"`
		Ports           []string          `json:"ports"`
		Healthcheck     any               `json:"healthcheck"`
		Restart         string            `json:"restart"`
	} `json:"services"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

func TestComposeWorkers(t *testing.T) {
	c := loadCompose(t)
	for _, want := range []string{"kafka", "create-topics", "worker-1", "worker-2", "worker-3", "loadgen", "prometheus", "grafana"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("docker-compose.yml: no service %s", want)
		}
	}
	if img := c.Services["kafka"].Image; !strings.HasPrefix(img, "apache/kafka:") {
		t.Errorf("kafka image %q, want apache/kafka", img)
	}
	ids, states := map[string]bool{}, map[string]bool{}
	for name, s := range c.Services {
		if !strings.HasPrefix(name, "worker-") {
			continue
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "JOINER_") && !slices.Contains(workerEnv, k) {
				t.Errorf("%s: %s is not a joiner run setting", name, k)
			}
		}
		id := s.Environment["JOINER_INSTANCE_ID"]
		if id != name || ids[id] {
			t.Errorf("%s: JOINER_INSTANCE_ID %q must be the service name and unique", name, id)
		}
		ids[id] = true
		if adv := s.Environment["JOINER_ADVERTISE_ADDR"]; adv != name+":8080" {
			t.Errorf("%s: JOINER_ADVERTISE_ADDR %q, want %s:8080", name, adv, name)
		}
		stateDir := s.Environment["JOINER_STATE_DIR"]
		var vol string
		for _, v := range s.Volumes {
			if src, dst, _ := strings.Cut(v, ":"); dst == stateDir {
				vol = src
			}
		}
		if vol == "" || states[vol] {
			t.Errorf("%s: needs its own volume at JOINER_STATE_DIR %q (volumes %v)", name, stateDir, s.Volumes)
		}
		states[vol] = true
		grace, err := time.ParseDuration(s.StopGracePeriod)
		rebalance, err2 := time.ParseDuration(s.Environment["JOINER_REBALANCE_TIMEOUT"])
		if err != nil || err2 != nil || grace <= rebalance {
			t.Errorf("%s: stop_grace_period %q must exceed JOINER_REBALANCE_TIMEOUT %q", name, s.StopGracePeriod, s.Environment["JOINER_REBALANCE_TIMEOUT"])
		}
	}
	if len(ids) != 3 {
		t.Errorf("want 3 workers, got %d", len(ids))
	}

	// Prometheus scrapes exactly these workers.
	prom, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		if !strings.Contains(string(prom), "- "+id+":8080") {
			t.Errorf("deploy/prometheus/prometheus.yml does not scrape %s:8080", id)
		}
	}
}

func TestComposeMountsExist(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, "./") {
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("%s: mount source %s: %v", name, src, err)
			}
		}
	}
}

func TestDockerfileUsesScriptsBuild(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	if !regexp.MustCompile(`(?m)^RUN scripts/build /out/joiner\b`).MatchString(df) {
		t.Errorf("Dockerfile must build with scripts/build (the command CI runs)")
	}
	if !regexp.MustCompile(`(?m)^USER 65532`).MatchString(df) {
		t.Errorf("Dockerfile must run as USER 65532")
	}
	if !strings.Contains(df, `ENTRYPOINT ["/joiner"]`) {
		t.Errorf(`Dockerfile must have ENTRYPOINT ["/joiner"]`)
	}
	build, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "build"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(build), `CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/joiner`) {
		t.Errorf("scripts/build no longer runs CGO_ENABLED=0 go build -trimpath -ldflags ... ./cmd/joiner")
	}
	if !regexp.MustCompile(`(?m)^ARG JOINER_REVISION$`).MatchString(df) {
		t.Errorf("Dockerfile must take ARG JOINER_REVISION for scripts/build (.git is not in the build context)")
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ignore), "\n") {
		switch strings.TrimSpace(line) {
		case "scripts", "cmd", "go.mod", "go.sum", "*.go":
			t.Errorf(".dockerignore excludes %s, which scripts/build needs", line)
		}
	}
}

// scripts/build stamps the binary: `joiner version` prints the VERSION
// file and the commit (JOINER_REVISION here, as the Dockerfile passes it).
func TestBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds joiner")
	}
	want, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "joiner")
	build := exec.Command(filepath.Join(repoRoot, "scripts", "build"), bin)
	build.Env = append(os.Environ(), "JOINER_REVISION=0123456789abcdef")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("joiner version: %v\n%s", err, out)
	}
	for _, w := range []string{"joiner " + strings.TrimSpace(string(want)) + "\n", "commit 0123456789abcdef\n", "go     go1."} {
		if !strings.Contains(string(out), w) {
			t.Errorf("joiner version printed %q, want %q in it", out, w)
		}
	}
}
