package join

import (
	"fmt"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/statestore"
	"github.com/prometheus/client_golang/prometheus"
)

// Faults this member reports on /readyz and in metrics besides the ones of
// its tasks: an assignment the leader could not plan or that excludes this
// member, and (on the planning leader) partitions with no pair.

// registerFaultMetrics adds the gauges read from the current assignment.
func (w *Processor) registerFaultMetrics(reg prometheus.Registerer) {
	reg.MustRegister(storeCollector{w.cfg.Stores})
	w.registerOffsetResets(reg)
	w.metrics.Tasks.WithLabelValues("failed")
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "joiner_group_excluded",
			Help: "1 when the group leader excluded this member from the plan (its topics or user data differ from the leader's; see /readyz and the ERROR log), else 0.",
		}, func() float64 {
			if _, ex := w.currentAssignment().Excluded(); ex {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "joiner_group_unpaired_partitions",
			Help: "On the planning leader: partition indexes of the larger input topic that have no pair because the topics' partition counts differ; they are not processed. 0 on other members.",
		}, func() float64 {
			return float64(w.currentAssignment().Unpaired)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "joiner_group_partitions",
			Help: "Tasks the group planned in this member's latest assignment (the co-partitioned partition count); the group's sum of joiner_tasks{role=\"active\"} should equal it.",
		}, func() float64 {
			return float64(w.currentAssignment().Partitions)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "joiner_group_plan_errors",
			Help: "1 when the latest assignment carries the leader's planning error (e.g. a topic is missing), so this member holds no tasks, else 0.",
		}, func() float64 {
			a := w.currentAssignment()
			if _, ex := a.Excluded(); a.Error != "" && !ex {
				return 1
			}
			return 0
		}),
	)
}

// faultsLocked is the /readyz reason of a fault that keeps this member
// from its work, or "". w.mu must be held.
func (w *Processor) faultsLocked() string {
	a := w.assignment
	if a.Error == "" {
		return w.storeFaultReason()
	}
	if why, ex := a.Excluded(); ex {
		return "excluded from the group's plan: " + why
	}
	return fmt.Sprintf("the group leader could not plan (generation %d): %s", a.Generation, a.Error)
}

func (w *Processor) currentAssignment() group.Assignment {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.assignment
}

// storeCollector exports the Manager's own counts: rebuilds by reason and
// the moved-aside stores kept.
type storeCollector struct{ m *statestore.Manager }

var (
	rebuildsDesc = prometheus.NewDesc("joiner_store_rebuilds_total",
		"Task stores moved aside and rebuilt from Kafka, by reason: open_failed (it did not open), corruption (Pebble reported corruption at run time; the process exited and the next start rebuilt it), unusable (it could not be written).",
		[]string{"reason"}, nil)
	corruptDirsDesc = prometheus.NewDesc("joiner_store_corrupt_dirs",
		"Moved-aside task stores (task-<p>.corrupt-*) kept for inspection; deleted after --corrupt-retention.",
		nil, nil)
	stuckOpensDesc = prometheus.NewDesc("joiner_store_opens_stuck",
		"Task store opens given up on (a full or failing disk, --state-open-timeout) that have not returned yet; /healthz fails while it is above 0, and the worker exits 1 when it stops.",
		nil, nil)
)

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rebuildsDesc
	ch <- corruptDirsDesc
	ch <- stuckOpensDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range statestore.RebuildReasons {
		ch <- prometheus.MustNewConstMetric(rebuildsDesc, prometheus.CounterValue, float64(c.m.RebuildsFor(r)), r)
	}
	ch <- prometheus.MustNewConstMetric(corruptDirsDesc, prometheus.GaugeValue, float64(c.m.CorruptDirs()))
	ch <- prometheus.MustNewConstMetric(stuckOpensDesc, prometheus.GaugeValue, float64(c.m.StuckOpens()))
}

// Healthy answers /healthz: false while a task store open that was given
// up on has not returned, since the process cannot clean it up (a restart
// can: the free-space check then fails the task at once).
func (w *Processor) Healthy() (bool, string) {
	if n := w.cfg.Stores.StuckOpens(); n > 0 {
		return false, fmt.Sprintf("%d task store opens hang (a full or failing disk?); restart the worker", n)
	}
	return true, "ok"
}
