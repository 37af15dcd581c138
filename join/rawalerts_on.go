//go:build joiner_rawalerts

package join

// rawAlerts makes a diagnostic build (go build -tags joiner_rawalerts) whose
// tasks write each notification as its own alert, without decoding,
// looking up or encoding it: scripts/bench drains with it to measure what
// the rest of joiner (reading, the merge with the market, the outbox,
// commits) costs against the pass-through. Never for production: its
// alerts are not alerts.
const rawAlerts = true
