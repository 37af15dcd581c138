package validate

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s/prometheus-operator/prometheusrule.yaml from deploy/prometheus/joiner.rules.yml")

var operatorDir = filepath.Join(k8sDir, "prometheus-operator")

// prometheusRuleHeader starts the generated PrometheusRule; its spec is
// deploy/prometheus/joiner.rules.yml, indented.
const prometheusRuleHeader = `# GENERATED from deploy/prometheus/joiner.rules.yml; do not edit. Rewrite it with
#   (cd deploy/validate && go test -run TestPrometheusRule -update)
# deploy/validate fails when the two differ.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: joiner
  labels:
    app.kubernetes.io/name: joiner
    app.kubernetes.io/part-of: joiner
spec:
`

// prometheusRule is the PrometheusRule for the rules file: its groups,
// comments and all, as the spec.
func prometheusRule(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "#") { // the file's own header
		lines = lines[1:]
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range lines {
		if l != "" {
			b.WriteString("  " + l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The PrometheusRule holds exactly the rules of joiner.rules.yml (which
// promtool checks and tests), and decodes as a PrometheusRule.
func TestPrometheusRule(t *testing.T) {
	path := filepath.Join(operatorDir, "prometheusrule.yaml")
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not deploy/prometheus/joiner.rules.yml: rewrite it with go test -run TestPrometheusRule -update", path)
	}
	var pr struct {
		customResource
		Spec struct {
			Groups []struct {
				Name     string `json:"name"`
				Interval string `json:"interval,omitempty"`
				Rules    []struct {
					Record      string            `json:"record,omitempty"`
					Alert       string            `json:"alert,omitempty"`
					Expr        string            `json:"expr"`
					For         string            `json:"for,omitempty"`
					Labels      map[string]string `json:"labels,omitempty"`
					Annotations map[string]string `json:"annotations,omitempty"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(got, &pr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" || len(pr.Spec.Groups) == 0 {
		t.Errorf("%s: %s %s %q with %d groups", path, pr.APIVersion, pr.Kind, pr.Metadata.Name, len(pr.Spec.Groups))
	}
}

// customResource is the type and metadata of a Prometheus Operator object.
type customResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
}

// serviceMonitor is the part of a ServiceMonitor this repository uses.
type serviceMonitor struct {
	customResource
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels,omitempty"`
				TargetLabel  string   `json:"targetLabel"`
				Replacement  string   `json:"replacement,omitempty"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// The ServiceMonitor scrapes the port of joiner-metrics that serves
// /metrics, with the labels the rules and dashboard use: job "joiner" and
// instance the pod name (as prometheus-k8s.yml does).
func TestServiceMonitor(t *testing.T) {
	m := loadManifests(t)
	data, err := os.ReadFile(filepath.Join(operatorDir, "servicemonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sm serviceMonitor
	if err := yaml.UnmarshalStrict(data, &sm); err != nil {
		t.Fatalf("servicemonitor.yaml: %v", err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("servicemonitor.yaml: %s %s", sm.APIVersion, sm.Kind)
	}
	svc, ok := m.services["joiner-metrics"]
	if !ok {
		t.Fatal("no Service joiner-metrics")
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select the Service joiner-metrics (labels %v)", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	for name, other := range m.services {
		if name != "joiner-metrics" && labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(other.Labels)) {
			t.Errorf("ServiceMonitor also selects the Service %s: each pod would be scraped twice", name)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor: want one endpoint, got %d", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
		t.Errorf("ServiceMonitor port %q is no port name of joiner-metrics", ep.Port)
	}
	if ep.Path != "/metrics" {
		t.Errorf("ServiceMonitor path %q, want /metrics", ep.Path)
	}
	var job, instance bool
	for _, r := range ep.Relabelings {
		job = job || (r.TargetLabel == "job" && r.Replacement == "joiner" && len(r.SourceLabels) == 0)
		instance = instance || (r.TargetLabel == "instance" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_name"}))
	}
	if !job || !instance {
		t.Errorf("ServiceMonitor relabelings must set job to joiner (the rules use up{job=\"joiner\"}) and instance to __meta_kubernetes_pod_name; got %+v", ep.Relabelings)
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), `job="joiner"`) {
		t.Error(`the rules no longer select job="joiner": update the ServiceMonitor's job relabeling and this check`)
	}
	var k kustomization
	kd, err := os.ReadFile(filepath.Join(operatorDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(kd, &k); err != nil {
		t.Fatalf("prometheus-operator/kustomization.yaml: %v", err)
	}
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, []string{"prometheusrule.yaml", "servicemonitor.yaml"}) {
		t.Errorf("prometheus-operator/kustomization.yaml resources %v", got)
	}
}
