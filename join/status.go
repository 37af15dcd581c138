package join

import (
	"fmt"
	"slices"

	"github.com/joiner-dev/joiner/record"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Registry returns the registry the metrics went to when
// Config.Registerer was nil, else nil.
func (w *Processor) Registry() *prometheus.Registry { return w.reg }

// counterValue reads a counter of the worker's own Metrics.
func counterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}

// Ready reports whether the worker has an assignment, every state task it
// holds has been restored and no process task is stalled (progress.go):
// the /readyz condition.
func (w *Processor) Ready() (bool, string) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.assigned {
		return false, "no assignment yet"
	}
	if why := w.faultsLocked(); why != "" {
		return false, why
	}
	if why := w.outputFault(); why != "" {
		return false, why
	}
	var waiting []int
	for p, st := range w.states {
		if !st.isRestored() {
			waiting = append(waiting, p)
		}
	}
	if len(waiting) > 0 {
		slices.Sort(waiting)
		return false, fmt.Sprintf("restoring tasks %v", waiting)
	}
	if why := w.stalledLocked(); why != "" {
		return false, why
	}
	return true, "ok"
}

// Stats is a snapshot of one worker's joins.
type Stats struct {
	Instance   string `json:"-"`
	Generation int32  `json:"-"`
	// Tasks are the notification partitions this worker processes.
	Tasks []int `json:"-"`
	// StateTasks are the market partitions whose state it holds.
	StateTasks []int `json:"-"`
	// StandbyTasks are the tasks it keeps a standby copy of, warm-ups
	// included; WarmupTasks the warm-ups among them.
	StandbyTasks []int `json:"-"`
	WarmupTasks  []int `json:"-"`
	Local        int64 `json:"local"`
	Remote       int64 `json:"remote"`
	Miss         int64 `json:"miss"`
	Late         int64 `json:"late"`
	// RestoredRecords counts market records read by restores; Restores
	// counts the state tasks started (each restores before it tails).
	RestoredRecords int64 `json:"restored_records"`
	Restores        int64 `json:"restores"`
	// The market records applied outside an active tail, by reason (as
	// joiner_restore_records_total): restores of tasks this member did
	// not hold a copy of (move), restores of the tail after a standby or
	// warm-up copy (failover), and the catch-up and tail of standby and
	// warm-up copies.
	RestoredMove     int64 `json:"restored_move"`
	RestoredFailover int64 `json:"restored_failover"`
	RestoredStandby  int64 `json:"restored_standby"`
	RestoredWarmup   int64 `json:"restored_warmup"`
	// MovedTotal sums the moved counts of the plans this worker computed
	// as leader.
	MovedTotal int64 `json:"moved_total"`
	// Misrouted counts the notifications joined that were not in their
	// symbol's murmur2 partition (joiner_notifications_misrouted_total).
	Misrouted int64 `json:"misrouted"`
	// TicksLate counts the late ticks (joiner_ticks_late_total).
	TicksLate int64 `json:"ticks_late"`
}

// Stats returns a snapshot of the worker's assignment and join counts.
func (w *Processor) Stats() Stats {
	w.mu.RLock()
	a := w.assignment
	w.mu.RUnlock()
	return Stats{
		Instance:         w.cfg.InstanceID,
		Generation:       a.Generation,
		Tasks:            slices.Clone(a.Topics[w.cfg.Topics.Notifications]),
		StateTasks:       slices.Clone(a.Topics[w.cfg.Topics.Market]),
		StandbyTasks:     slices.Clone(a.Standby),
		WarmupTasks:      slices.Clone(a.Warmup),
		Local:            counterValue(w.metrics.Joins.WithLabelValues(string(record.ResultLocal))),
		Remote:           counterValue(w.metrics.Joins.WithLabelValues(string(record.ResultRemote))),
		Miss:             counterValue(w.metrics.Joins.WithLabelValues(string(record.ResultMiss))),
		Late:             counterValue(w.metrics.Joins.WithLabelValues(string(record.ResultLate))),
		RestoredRecords:  w.restoredRecords.Load(),
		Restores:         w.restores.Load(),
		MovedTotal:       counterValue(w.metrics.TasksMoved),
		RestoredMove:     counterValue(w.metrics.RestoreRecords.WithLabelValues(ReasonMove)),
		RestoredFailover: counterValue(w.metrics.RestoreRecords.WithLabelValues(ReasonFailover)),
		RestoredStandby:  counterValue(w.metrics.RestoreRecords.WithLabelValues(ReasonStandby)),
		RestoredWarmup:   counterValue(w.metrics.RestoreRecords.WithLabelValues(ReasonWarmup)),
		Misrouted:        counterValue(w.metrics.Misrouted),
		TicksLate:        counterValue(w.metrics.TicksLate),
	}
}

// AssignmentView is the answer of GET /v1/assignment (Processor.View).
type AssignmentView struct {
	Instance   string `json:"instance"`
	Generation int32  `json:"generation"`
	Leader     bool   `json:"leader"`
	Partitions int    `json:"partitions"`
	// Tasks are the notification partitions processed here; StateTasks
	// the market partitions whose state is held here.
	Tasks      []int `json:"tasks"`
	StateTasks []int `json:"state_tasks"`
	// StandbyTasks are the tasks with a standby copy here (warm-ups
	// included), WarmupTasks the warm-ups among them.
	StandbyTasks []int `json:"standby_tasks"`
	WarmupTasks  []int `json:"warmup_tasks"`
	// FailedTasks are the tasks that failed on this member (their store
	// could not be opened or rebuilt; see TaskStatus).
	FailedTasks []int `json:"failed_tasks"`
	// Owners[p] is the instance id owning task p's state.
	Owners []string `json:"owners"`
	// Moved is the moved count of this generation's plan.
	Moved int  `json:"moved"`
	Ready bool `json:"ready"`
	Stats
}

// View returns this member's assignment and join counts (GET
// /v1/assignment).
func (w *Processor) View() AssignmentView {
	w.mu.RLock()
	a := w.assignment
	w.mu.RUnlock()
	v := AssignmentView{
		Instance: w.cfg.InstanceID, Generation: a.Generation, Leader: a.Leader, Partitions: a.Partitions,
		Moved: a.Moved, Stats: w.Stats(), Owners: make([]string, len(a.Owners)),
	}
	v.Tasks, v.StateTasks = v.Stats.Tasks, v.Stats.StateTasks
	if v.Tasks == nil {
		v.Tasks = []int{}
	}
	if v.StateTasks == nil {
		v.StateTasks = []int{}
	}
	v.StandbyTasks, v.WarmupTasks = v.Stats.StandbyTasks, v.Stats.WarmupTasks
	if v.StandbyTasks == nil {
		v.StandbyTasks = []int{}
	}
	if v.WarmupTasks == nil {
		v.WarmupTasks = []int{}
	}
	for i, o := range a.Owners {
		v.Owners[i] = o.InstanceID
	}
	w.faults.mu.Lock()
	v.FailedTasks = sortedKeys(w.faults.failed)
	w.faults.mu.Unlock()
	if v.FailedTasks == nil {
		v.FailedTasks = []int{}
	}
	v.Ready, _ = w.Ready()
	return v
}
