package validate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root, two levels above this module.
const repoRoot = "../.."

var k8sDir = filepath.Join(repoRoot, "deploy", "k8s")

// workerEnv are the JOINER_* settings `joiner run` reads: the flags the brief
// fixed, plus every flag declared in cmd/joiner/run.go and, for the broker
// security flags, kafkasec/kafkasec.go (each flag --x-y is also read from
// JOINER_X_Y), plus JOINER_SASL_PASSWORD. A key outside this set is a typo.
var workerEnv = func() []string {
	names := []string{
		"JOINER_BROKERS", "JOINER_GROUP", "JOINER_INSTANCE_ID", "JOINER_MARKET_TOPIC",
		"JOINER_NOTIFICATIONS_TOPIC", "JOINER_ALERTS_TOPIC", "JOINER_DEAD_LETTER_TOPIC",
		"JOINER_STATE_DIR", "JOINER_HTTP_ADDR", "JOINER_ADVERTISE_ADDR", "JOINER_CREATE_TOPICS",
		"JOINER_PARTITIONS", "JOINER_ASSIGNOR", "JOINER_SESSION_TIMEOUT", "JOINER_REBALANCE_TIMEOUT",
		"JOINER_MAX_TASK_IDLE", "JOINER_LOG_FORMAT", "JOINER_LOG_LEVEL", "JOINER_SASL_PASSWORD",
	}
	flagDecl := regexp.MustCompile(`fs\.[A-Za-z0-9]+\([^,]+,\s*"([a-z0-9-]+)"`)
	for _, file := range []string{filepath.Join("cmd", "joiner", "run.go"), filepath.Join("kafkasec", "kafkasec.go")} {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			continue
		}
		for _, m := range flagDecl.FindAllStringSubmatch(string(src), -1) {
			n := "JOINER_" + strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}()

// jobOnlyEnv are ConfigMap keys only the topic-creation Job reads.
var jobOnlyEnv = []string{"JOINER_REPLICATION_FACTOR"}

// manifests holds every object of deploy/k8s, decoded strictly.
type manifests struct {
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	pdbs         map[string]*policyv1.PodDisruptionBudget
	jobs         map[string]*batchv1.Job
	netpols      map[string]*networkingv1.NetworkPolicy
	files        []string // base names of the manifest files
}

// newObject returns an empty typed object for an apiVersion and kind.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q (add it to newObject if it is meant to be there)", apiVersion, kind)
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{
		configMaps:   map[string]*corev1.ConfigMap{},
		services:     map[string]*corev1.Service{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		jobs:         map[string]*batchv1.Job{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
	}
	for _, path := range paths {
		base := filepath.Base(path)
		if base == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, base)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", base, i, err)
			}
			obj, err := newObject(tm.APIVersion, tm.Kind)
			if err != nil {
				t.Fatalf("%s document %d: %v", base, i, err)
			}
			if err := decodeStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s document %d (%s): strict decode: %v", base, i, tm.Kind, err)
			}
			name := obj.(metav1.Object).GetName()
			if name == "" {
				t.Fatalf("%s document %d (%s): no metadata.name", base, i, tm.Kind)
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				m.configMaps[name] = o
			case *corev1.Service:
				m.services[name] = o
			case *appsv1.StatefulSet:
				m.statefulSets[name] = o
			case *policyv1.PodDisruptionBudget:
				m.pdbs[name] = o
			case *batchv1.Job:
				m.jobs[name] = o
			case *networkingv1.NetworkPolicy:
				m.netpols[name] = o
			}
		}
	}
	if len(m.files) == 0 {
		t.Fatalf("no manifests in %s", k8sDir)
	}
	return m
}

// decodeStrict decodes YAML into obj the way the API server does in strict
// mode: YAML to JSON, then sigs.k8s.io/json, which rejects unknown fields,
// duplicate fields and field names that differ only in case (encoding/json
// would accept "clusterIp" for "clusterIP"; the API server would not).
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func TestStrictDecodeRejectsUnknownFields(t *testing.T) {
	// The decoder this suite relies on must fail on misspelt fields.
	for _, bad := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIPs: [None], publishNotReady: true}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
	} {
		if err := decodeStrict([]byte(bad), &corev1.Service{}); err == nil {
			t.Errorf("decodeStrict accepted %q", bad)
		}
	}
	good := "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIP: None}\n"
	if err := decodeStrict([]byte(good), &corev1.Service{}); err != nil {
		t.Errorf("decodeStrict rejected a valid Service: %v", err)
	}
}

func (m *manifests) worker(t *testing.T) (*appsv1.StatefulSet, *corev1.Container) {
	t.Helper()
	sts, ok := m.statefulSets["joiner"]
	if !ok {
		t.Fatal("no StatefulSet joiner")
	}
	for i := range sts.Spec.Template.Spec.Containers {
		c := &sts.Spec.Template.Spec.Containers[i]
		if c.Name == "joiner" {
			return sts, c
		}
	}
	t.Fatal("StatefulSet joiner has no container joiner")
	return nil, nil
}

func (m *manifests) config(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	cm, ok := m.configMaps["joiner"]
	if !ok {
		t.Fatal("no ConfigMap joiner")
	}
	return cm
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// setting is the value a worker container sees for name: its env entry if
// any, else the ConfigMap's.
func setting(c *corev1.Container, cm *corev1.ConfigMap, name string) (string, bool) {
	if e := envVar(c, name); e != nil {
		return e.Value, e.ValueFrom == nil
	}
	v, ok := cm.Data[name]
	return v, ok
}

func selects(t *testing.T, what string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	if sel == nil {
		t.Errorf("%s: no selector", what)
		return
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", what, err)
		return
	}
	if s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select the worker pods (labels %v)", what, s, podLabels)
	}
}

func TestConfigMap(t *testing.T) {
	m := loadManifests(t)
	cm := m.config(t)
	for k, v := range cm.Data {
		if !slices.Contains(workerEnv, k) && !slices.Contains(jobOnlyEnv, k) {
			t.Errorf("ConfigMap joiner: unknown key %s (not a joiner run setting)", k)
		}
		if strings.TrimSpace(v) == "" {
			t.Errorf("ConfigMap joiner: %s is empty", k)
		}
	}
	for _, k := range []string{"JOINER_BROKERS", "JOINER_MARKET_TOPIC", "JOINER_NOTIFICATIONS_TOPIC",
		"JOINER_ALERTS_TOPIC", "JOINER_DEAD_LETTER_TOPIC", "JOINER_PARTITIONS", "JOINER_REPLICATION_FACTOR",
		"JOINER_STATE_DIR", "JOINER_HTTP_ADDR", "JOINER_REBALANCE_TIMEOUT", "JOINER_SESSION_TIMEOUT"} {
		if _, ok := cm.Data[k]; !ok {
			t.Errorf("ConfigMap joiner: missing %s", k)
		}
	}
	for _, k := range []string{"JOINER_SESSION_TIMEOUT", "JOINER_REBALANCE_TIMEOUT", "JOINER_MAX_TASK_IDLE"} {
		if v, ok := cm.Data[k]; ok {
			if _, err := time.ParseDuration(v); err != nil {
				t.Errorf("ConfigMap joiner: %s=%q is not a duration: %v", k, v, err)
			}
		}
	}
	for _, k := range []string{"JOINER_PARTITIONS", "JOINER_REPLICATION_FACTOR"} {
		if n, err := strconv.Atoi(cm.Data[k]); err != nil || n < 1 {
			t.Errorf("ConfigMap joiner: %s=%q is not a positive integer", k, cm.Data[k])
		}
	}
	for _, k := range []string{"JOINER_INSTANCE_ID", "JOINER_ADVERTISE_ADDR"} {
		if _, ok := cm.Data[k]; ok {
			t.Errorf("ConfigMap joiner: %s is per pod and belongs in the StatefulSet, not the shared ConfigMap", k)
		}
	}
}

func TestStatefulSet(t *testing.T) {
	m := loadManifests(t)
	cm := m.config(t)
	sts, c := m.worker(t)
	spec := sts.Spec
	pod := spec.Template.Spec
	podLabels := spec.Template.Labels

	selects(t, "StatefulSet joiner", spec.Selector, podLabels)
	if spec.ServiceName != "joiner-headless" {
		t.Errorf("serviceName = %q, want joiner-headless", spec.ServiceName)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel", spec.PodManagementPolicy)
	}
	if spec.Replicas == nil || *spec.Replicas < 1 {
		t.Errorf("replicas must be set and positive")
	}

	// Instance id from the pod name via the downward API.
	podName := envVar(c, "POD_NAME")
	if podName == nil || podName.ValueFrom == nil || podName.ValueFrom.FieldRef == nil ||
		podName.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env POD_NAME must come from fieldRef metadata.name")
	}
	if e := envVar(c, "JOINER_INSTANCE_ID"); e == nil || e.Value != "$(POD_NAME)" {
		t.Errorf("env JOINER_INSTANCE_ID must be $(POD_NAME), got %+v", e)
	}
	if e := envVar(c, "JOINER_ADVERTISE_ADDR"); e == nil ||
		!strings.HasPrefix(e.Value, "$(POD_NAME).joiner-headless.") {
		t.Errorf("env JOINER_ADVERTISE_ADDR must be $(POD_NAME).joiner-headless.<ns>..., got %+v", e)
	}
	// $(VAR) references only expand for variables defined earlier.
	defined := map[string]bool{}
	for _, e := range c.Env {
		for _, ref := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(e.Value, -1) {
			if !defined[ref[1]] {
				t.Errorf("env %s references $(%s) before it is defined", e.Name, ref[1])
			}
		}
		defined[e.Name] = true
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "JOINER_") && !slices.Contains(workerEnv, e.Name) {
			t.Errorf("env %s is not a joiner run setting", e.Name)
		}
	}
	if !slices.ContainsFunc(c.EnvFrom, func(s corev1.EnvFromSource) bool {
		return s.ConfigMapRef != nil && s.ConfigMapRef.Name == "joiner"
	}) {
		t.Errorf("container joiner must take envFrom ConfigMap joiner")
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("container args = %v, want [run ...]", c.Args)
	}

	// HTTP port, probes.
	httpAddr, _ := setting(c, cm, "JOINER_HTTP_ADDR")
	_, portStr, _ := strings.Cut(httpAddr, ":")
	port, _ := strconv.Atoi(portStr)
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "http" && int(p.ContainerPort) == port
	}) {
		t.Errorf("container must expose port %d (JOINER_HTTP_ADDR %q) named http; ports %+v", port, httpAddr, c.Ports)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: must be an httpGet probe on %s", name, path)
			return
		}
		if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: httpGet %s on port %s, want %s on port http", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
		}
	}
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	probe("livenessProbe", c.LivenessProbe, "/healthz")

	// Grace period longer than the rebalance timeout.
	rt, ok := setting(c, cm, "JOINER_REBALANCE_TIMEOUT")
	if !ok {
		rt = "30s" // joiner run's default
	}
	rebalance, err := time.ParseDuration(rt)
	if err != nil {
		t.Fatalf("JOINER_REBALANCE_TIMEOUT %q: %v", rt, err)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Errorf("terminationGracePeriodSeconds must be set (> rebalance timeout %s)", rebalance)
	} else if grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace <= rebalance {
		t.Errorf("terminationGracePeriodSeconds %s must exceed the rebalance timeout %s", grace, rebalance)
	}

	// Resources.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("resources.requests.%s must be set", r)
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || q.IsZero() {
		t.Errorf("resources.limits.memory must be set")
	}
	if lim, req := c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory]; lim.Cmp(req) < 0 {
		t.Errorf("memory limit %s below request %s", lim.String(), req.String())
	}

	// Non-root.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext must set runAsNonRoot: true and a non-zero runAsUser")
	}
	if csc := c.SecurityContext; csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext must set allowPrivilegeEscalation: false")
	}

	// State on a volumeClaimTemplate mounted at the state dir.
	stateDir, _ := setting(c, cm, "JOINER_STATE_DIR")
	if !slices.ContainsFunc(spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool {
		q, ok := p.Spec.Resources.Requests[corev1.ResourceStorage]
		return p.Name == "state" && ok && !q.IsZero()
	}) {
		t.Errorf("volumeClaimTemplates must contain state with a storage request")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
		return v.Name == "state" && v.MountPath == stateDir
	}) {
		t.Errorf("volume state must be mounted at JOINER_STATE_DIR %q", stateDir)
	}
	for _, v := range c.VolumeMounts {
		if v.Name == "state" {
			continue
		}
		if !slices.ContainsFunc(pod.Volumes, func(pv corev1.Volume) bool { return pv.Name == v.Name }) {
			t.Errorf("volumeMount %s has no volume", v.Name)
		}
	}
}

func TestServices(t *testing.T) {
	m := loadManifests(t)
	sts, _ := m.worker(t)
	podLabels := sts.Spec.Template.Labels

	h, ok := m.services["joiner-headless"]
	if !ok {
		t.Fatal("no Service joiner-headless")
	}
	if h.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("joiner-headless: clusterIP = %q, want None", h.Spec.ClusterIP)
	}
	if !h.Spec.PublishNotReadyAddresses {
		t.Errorf("joiner-headless: publishNotReadyAddresses must be true (restoring peers still answer lookups)")
	}
	mt, ok := m.services["joiner-metrics"]
	if !ok {
		t.Fatal("no Service joiner-metrics")
	}
	for _, s := range []*corev1.Service{h, mt} {
		selects(t, "Service "+s.Name, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, podLabels)
		if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Name == "http" && p.Port == 8080 && p.TargetPort.String() == "http"
		}) {
			t.Errorf("Service %s: needs port http 8080 -> targetPort http", s.Name)
		}
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	m := loadManifests(t)
	sts, _ := m.worker(t)
	pdb, ok := m.pdbs["joiner"]
	if !ok {
		t.Fatal("no PodDisruptionBudget joiner")
	}
	selects(t, "PodDisruptionBudget joiner", pdb.Spec.Selector, sts.Spec.Template.Labels)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" {
		t.Errorf("PodDisruptionBudget joiner: maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
}

func TestCreateTopicsJob(t *testing.T) {
	m := loadManifests(t)
	cm := m.config(t)
	job, ok := m.jobs["joiner-create-topics"]
	if !ok {
		t.Fatal("no Job joiner-create-topics")
	}
	cs := job.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("Job joiner-create-topics: want one container, got %d", len(cs))
	}
	c := cs[0]
	if !strings.HasPrefix(c.Image, "apache/kafka:") {
		t.Errorf("Job image = %q, want apache/kafka:<version>", c.Image)
	}
	if !slices.ContainsFunc(c.EnvFrom, func(s corev1.EnvFromSource) bool {
		return s.ConfigMapRef != nil && s.ConfigMapRef.Name == "joiner"
	}) {
		t.Errorf("Job must take envFrom ConfigMap joiner (topic names and partition count)")
	}
	if p := job.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyOnFailure && p != corev1.RestartPolicyNever {
		t.Errorf("Job restartPolicy = %q", p)
	}
	script := strings.Join(append(slices.Clone(c.Command), c.Args...), "\n")
	// market and notifications are created by one command, in one loop,
	// with the one partition count from the ConfigMap.
	loop := regexp.MustCompile(`for t in ([^;\n]*); do\s+"\$topics" [^\n]*--create --if-not-exists[^\n]*\\\n\s*--topic "\$t" --partitions "\$JOINER_PARTITIONS"`)
	match := loop.FindStringSubmatch(script)
	if match == nil {
		t.Fatalf("Job script must create the topics in one loop with --partitions \"$JOINER_PARTITIONS\":\n%s", script)
	}
	for _, v := range []string{"JOINER_MARKET_TOPIC", "JOINER_NOTIFICATIONS_TOPIC", "JOINER_ALERTS_TOPIC"} {
		if !strings.Contains(match[1], `"$`+v+`"`) {
			t.Errorf("Job create loop does not include $%s", v)
		}
		if _, ok := cm.Data[v]; !ok {
			t.Errorf("ConfigMap lacks %s used by the Job", v)
		}
	}
	if !strings.Contains(script, "/opt/kafka/bin/kafka-topics.sh") {
		t.Errorf("Job must use /opt/kafka/bin/kafka-topics.sh")
	}
	// The check that fails the Job when existing topics differ.
	if !strings.Contains(script, `if [ "$m" != "$n" ]`) {
		t.Errorf("Job must compare the partition counts of market and notifications")
	}
}

// kustomization is the part of a Kustomization this repository uses;
// UnmarshalStrict rejects anything else, so a new field is a deliberate edit.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	m := loadManifests(t)
	data, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: apiVersion/kind = %s/%s", k.APIVersion, k.Kind)
	}
	got := slices.Sorted(slices.Values(k.Resources))
	want := slices.Sorted(slices.Values(m.files))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want every manifest %v", got, want)
	}
	_, c := m.worker(t)
	image, _, _ := strings.Cut(c.Image, ":")
	for _, im := range k.Images {
		if im.Name != image {
			t.Errorf("kustomization images: %q is not the worker image %q", im.Name, image)
		}
	}
}

func TestNoTabsInYAML(t *testing.T) {
	// A tab in indentation is a YAML error some tools only report late.
	for _, dir := range []string{k8sDir, filepath.Join(repoRoot, "deploy", "prometheus"),
		filepath.Join(repoRoot, "deploy", "grafana", "provisioning")} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range bytes.Split(data, []byte("\n")) {
				if bytes.HasPrefix(bytes.TrimLeft(line, " "), []byte("\t")) {
					t.Errorf("%s:%d: tab in indentation", path, i+1)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
