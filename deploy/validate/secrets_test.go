package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// secretName matches setting names that hold a secret value. Names ending
// in _FILE hold a path to one (a mounted Secret) and are fine.
var secretName = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|TOKEN|SECRET|PRIVATE_KEY|API_KEY|CREDENTIALS)`)

func holdsSecret(name string) bool {
	return secretName.MatchString(name) && !strings.HasSuffix(strings.ToUpper(name), "_FILE")
}

// inlinedSecret matches secret material in manifest text: PEM blocks,
// JAAS configs and password assignments.
var inlinedSecret = regexp.MustCompile(`-----BEGIN [A-Z ]+-----|(?i)LoginModule\s+required|(?i)\bpassword\s*[=:]\s*["']?[^"'\s$][^"'\s]*`)

// No secret value is written in the manifests: no Secret object carries
// data, no env var or ConfigMap key that holds a secret has a literal
// value, and no PEM block, JAAS config or password assignment appears in
// any manifest, comments included.
func TestNoSecretValuesInlined(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kindSecret := regexp.MustCompile(`(?m)^kind:\s*Secret\s*$`)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(path)
		for i, doc := range docSep.Split(string(data), -1) {
			if kindSecret.MatchString(doc) {
				t.Errorf("%s document %d is a Secret: create Secrets with kubectl create secret (docs/security.md), never in the repository", base, i)
			}
		}
		for n, line := range strings.Split(string(data), "\n") {
			if m := inlinedSecret.FindString(line); m != "" {
				t.Errorf("%s:%d: looks like an inlined secret: %q", base, n+1, m)
			}
		}
	}
	m := loadManifests(t)
	for name, cm := range m.configMaps {
		for k := range cm.Data {
			if holdsSecret(k) {
				t.Errorf("ConfigMap %s: key %s holds a secret; take it from a Secret in the StatefulSet", name, k)
			}
		}
	}
	var containers []corev1.Container
	for _, s := range m.statefulSets {
		containers = append(containers, s.Spec.Template.Spec.InitContainers...)
		containers = append(containers, s.Spec.Template.Spec.Containers...)
	}
	for _, j := range m.jobs {
		containers = append(containers, j.Spec.Template.Spec.InitContainers...)
		containers = append(containers, j.Spec.Template.Spec.Containers...)
	}
	for _, c := range containers {
		for _, e := range c.Env {
			if holdsSecret(e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
				t.Errorf("container %s: env %s must come from a Secret (valueFrom.secretKeyRef), not a literal", c.Name, e.Name)
			}
		}
	}
}

// The worker reads the SASL password from a Secret as env, and the broker
// CA and the peer token from Secrets mounted as files where the ConfigMap's
// (commented) JOINER_TLS_CA_FILE and JOINER_PEER_TOKEN_FILE point.
func TestWorkerSecrets(t *testing.T) {
	m := loadManifests(t)
	sts, c := m.worker(t)
	pod := sts.Spec.Template.Spec
	pw := envVar(c, "JOINER_SASL_PASSWORD")
	if pw == nil || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Name != "joiner-kafka" {
		t.Errorf("env JOINER_SASL_PASSWORD must come from the Secret joiner-kafka, got %+v", pw)
	}
	cmText, err := os.ReadFile(filepath.Join(k8sDir, "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ secret, key, setting string }{
		{"joiner-kafka", "ca.crt", "JOINER_TLS_CA_FILE"},
		{"joiner-peer", "token", "JOINER_PEER_TOKEN_FILE"},
	} {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == want.secret })
		if i < 0 {
			t.Errorf("no volume from the Secret %s", want.secret)
			continue
		}
		vol := pod.Volumes[i]
		path := ""
		for _, it := range vol.Secret.Items {
			if it.Key == want.key {
				path = it.Path
			}
		}
		if path == "" {
			t.Errorf("volume %s does not project key %s", vol.Name, want.key)
			continue
		}
		j := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == vol.Name })
		if j < 0 {
			t.Errorf("volume %s is not mounted in container %s", vol.Name, c.Name)
			continue
		}
		if !c.VolumeMounts[j].ReadOnly {
			t.Errorf("mount of %s must be read-only", vol.Name)
		}
		file := c.VolumeMounts[j].MountPath + "/" + path
		documented := regexp.MustCompile(`(?m)^\s*#?\s*` + want.setting + `:\s*"` + regexp.QuoteMeta(file) + `"`)
		if !documented.Match(cmText) {
			t.Errorf("configmap.yaml does not show %s: %q, where the Secret %s is mounted", want.setting, file, want.secret)
		}
	}
}
