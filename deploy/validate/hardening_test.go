package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The worker image is the release in the VERSION file, in the StatefulSet
// and in kustomization.yaml, never :latest (with IfNotPresent a node keeps
// whatever :latest it pulled first).
func TestWorkerImageIsAVersion(t *testing.T) {
	v, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	m := loadManifests(t)
	_, c := m.worker(t)
	name, tag, _ := strings.Cut(c.Image, ":")
	if tag != version || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("worker image %q (pull %s), want %s:%s (the VERSION file) with IfNotPresent", c.Image, c.ImagePullPolicy, name, version)
	}
	data, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, im := range k.Images {
		if im.NewTag != version {
			t.Errorf("kustomization.yaml: image %s newTag %q, want %s (the VERSION file)", im.Name, im.NewTag, version)
		}
	}
}

// kafkaVersion is the Kafka the tests run on: scripts/kafka's default.
func kafkaVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "kafka"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSION=\$\{JOINER_KAFKA_VERSION:-([0-9.]+)\}`).FindSubmatch(data)
	if m == nil {
		t.Fatal("scripts/kafka: no VERSION=${JOINER_KAFKA_VERSION:-x.y.z} line")
	}
	return string(m[1])
}

// Every apache/kafka image of the manifests and the compose file is the
// Kafka the tests run on.
func TestKafkaImagesMatchTestedVersion(t *testing.T) {
	want := "apache/kafka:" + kafkaVersion(t)
	image := regexp.MustCompile(`image:\s*"?(apache/kafka[^\s"]*)`)
	for _, f := range []string{
		filepath.Join(k8sDir, "job-create-topics.yaml"),
		filepath.Join(repoRoot, "docker-compose.yml"),
	} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found := image.FindAllSubmatch(data, -1)
		if len(found) == 0 {
			t.Errorf("%s: no apache/kafka image", f)
		}
		for _, m := range found {
			if string(m[1]) != want {
				t.Errorf("%s: image %s, want %s (scripts/kafka's default, the version CI tests)", f, m[1], want)
			}
		}
	}
}

// The topic Job runs as hardened as the workers: a high non-root user,
// read-only root filesystem (a writable /tmp volume), no privilege
// escalation, no capabilities, and CPU and memory limits.
func TestCreateTopicsJobHardened(t *testing.T) {
	m := loadManifests(t)
	job, ok := m.jobs["joiner-create-topics"]
	if !ok {
		t.Fatal("no Job joiner-create-topics")
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser < 10000 {
		t.Errorf("Job: runAsNonRoot and runAsUser >= 10000 (a user id no host account has) required, got %+v", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("Job container: readOnlyRootFilesystem: true required")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Error("Job container: allowPrivilegeEscalation: false and capabilities drop ALL required")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("Job container: no %s limit", r)
		}
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("Job container: no %s request", r)
		}
	}
	tmp := false
	for _, vm := range c.VolumeMounts {
		tmp = tmp || vm.MountPath == "/tmp"
	}
	if !tmp {
		t.Error("Job container: a read-only root needs a volume at /tmp (the JVM and kafka-run-class.sh write there)")
	}
	if e := envVar(&c, "LOG_DIR"); e == nil || !strings.HasPrefix(e.Value, "/tmp/") {
		t.Errorf("Job container: LOG_DIR must be under /tmp (kafka-run-class.sh creates it), got %+v", e)
	}
}

// The NetworkPolicy admits to the worker pods only the other workers and
// Prometheus, and only on the HTTP port.
func TestNetworkPolicy(t *testing.T) {
	m := loadManifests(t)
	sts, c := m.worker(t)
	np, ok := m.netpols["joiner"]
	if !ok {
		t.Fatal("no NetworkPolicy joiner (/v1/* and --pprof have no authentication by default)")
	}
	workerLabels := labels.Set(sts.Spec.Template.Labels)
	selects(t, "NetworkPolicy joiner", &np.Spec.PodSelector, workerLabels)
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policyTypes %v, want [Ingress]", np.Spec.PolicyTypes)
	}
	var httpPort int32
	for _, p := range c.Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	peers, prometheus := false, false
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("ingress rule %d has no from: it admits everyone", i)
		}
		if len(rule.Ports) == 0 {
			t.Errorf("ingress rule %d has no ports: it admits every port", i)
		}
		for _, p := range rule.Ports {
			if p.Port == nil || !(*p.Port == intstr.FromString("http") || *p.Port == intstr.FromInt32(httpPort)) || p.EndPort != nil {
				t.Errorf("ingress rule %d admits port %v, want only http (%d)", i, p.Port, httpPort)
			}
		}
		for _, peer := range rule.From {
			if peer.IPBlock != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 {
				t.Errorf("ingress rule %d admits %+v: want pods selected by labels", i, peer)
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case sel.Matches(workerLabels) && peer.NamespaceSelector == nil:
				peers = true
			case sel.Matches(labels.Set{"app.kubernetes.io/name": "prometheus"}):
				prometheus = true
			default:
				t.Errorf("ingress rule %d admits pods %s, neither the workers nor Prometheus", i, sel)
			}
		}
	}
	if !peers || !prometheus {
		t.Errorf("the NetworkPolicy must admit the workers (from their own namespace: %v) and Prometheus (%v)", peers, prometheus)
	}
}

// prometheus-k8s.yml finds the workers in the namespace docs/deploy.md
// applies the manifests to.
func TestPrometheusK8sNamespace(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`kubectl apply -k deploy/k8s -n ([a-z0-9-]+)`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/deploy.md: no `kubectl apply -k deploy/k8s -n <namespace>`")
	}
	ns := string(m[1])
	cfg, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "prometheus-k8s.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`_http\._tcp\.joiner-headless\.([a-z0-9-]+)\.svc`).FindAllSubmatch(cfg, -1)
	if len(names) == 0 {
		t.Fatal("prometheus-k8s.yml: no SRV name _http._tcp.joiner-headless.<namespace>.svc...")
	}
	for _, n := range names {
		if string(n[1]) != ns {
			t.Errorf("prometheus-k8s.yml looks in namespace %s; docs/deploy.md deploys to %s", n[1], ns)
		}
	}
}
