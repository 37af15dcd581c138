package join

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func TestMetricsFollowPrometheusNaming(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.TaskLag.WithLabelValues("0").Set(1)
	m.Records.WithLabelValues("market").Inc()
	m.StandbyLag.WithLabelValues("0").Set(1)
	m.TaskStalled.WithLabelValues("0").Set(1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	for _, name := range []string{
		"joiner_joins_total", "joiner_tasks", "joiner_rebalances_total", "joiner_tasks_moved_total",
		"joiner_restore_records_total", "joiner_restore_seconds", "joiner_task_lag_records", "joiner_dead_letters_total",
		"joiner_rebalance_pause_seconds", "joiner_rebalance_tasks_revoked_total", "joiner_rebalance_tasks_assigned_total",
		"joiner_standby_lag_records", "joiner_notifications_misrouted_total", "joiner_task_stalled",
		"joiner_partition_changes_total", "joiner_market_partitions_ahead", "joiner_dead_letters_truncated_total", "joiner_dead_letters_dropped_total",
		"joiner_output_blocked", "joiner_alert_field_conflicts_total", "joiner_ticks_late_total",
		"joiner_transactions_total", "joiner_transaction_seconds", "joiner_producer_fenced_total",
		"joiner_transaction_open_records",
	} {
		found := false
		for _, mf := range mfs {
			found = found || mf.GetName() == name
		}
		if !found {
			t.Errorf("metric %s is not exported", name)
		}
	}
}
