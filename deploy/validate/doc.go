// Package validate checks the deployment files under deploy/ and the
// docker-compose.yml at the repository root without a cluster: the
// Kubernetes manifests decode strictly into the API types and keep the
// invariants joiner relies on, and every metric the Prometheus rules and the
// Grafana dashboard use is one the worker exports.
//
// It is a separate module so that k8s.io/api stays out of the worker binary.
// Run it with: cd deploy/validate && go test ./...
package validate
