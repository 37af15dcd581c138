//go:build !joiner_rawalerts

package join

// rawAlerts is false in every real build; see rawalerts_on.go.
const rawAlerts = false
