//go:build joiner_rawalerts

package join

// rawAlerts makes a diagnostic build (go build -tags joiner_rawalerts) whose
// tasks write each notification as its own alert, without decoding,
// looking up or encoding it, to measure what the rest of joiner (reading,
// the merge with the market, the outbox, commits) costs against the
// pass-through: bin/bench --joiner with this build (the command is in
// bench/results/2026-11-30-rawalerts-3m.md). Never for production: its
// alerts are not alerts.
const rawAlerts = true
