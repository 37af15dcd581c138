package join

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/group"
	"github.com/joiner-dev/joiner/record"
)

// The per-task status of the status page (package statuspage): what each
// task held here is doing and why. Tasks publish it at their state
// changes and per fetch or write (atomics), never per record, so that
// reading it costs the join path nothing measurable; TaskStatuses
// assembles a snapshot on request.

// Guarantee is the processing guarantee of a Processor (see the package
// doc): alerts are acknowledged before their notifications' offsets are
// committed.
const Guarantee = "at-least-once"

// Roles of TaskStatus.Role.
const (
	RoleActive  = roleActive
	RoleStandby = roleStandby
	RoleWarmup  = roleWarmup
	// RoleFailed: the task's store could not be opened or rebuilt here;
	// the member released it (restore_faults.go).
	RoleFailed = "failed"
)

// States of TaskStatus.State.
const (
	// StateStarting: the task is assigned here but reads nothing yet (it
	// asks for its committed offsets, or its store is being retried).
	StateStarting = "starting"
	// StateRestoring: its store is replayed from the market topic
	// (TaskStatus.Restore); a standby or warm-up catching up.
	StateRestoring = "restoring"
	// StateRunning: restored and processing (or, for a copy, tailing).
	StateRunning = "running"
	// StatePaused: paused at a handover (revoked, or changing role): its
	// batches in flight finish and its offsets are committed.
	StatePaused = "paused"
	// StateWaitingMarket: notifications are held because the market has
	// not been read past their time for longer than MaxTaskIdle
	// (TaskStatus.Wait).
	StateWaitingMarket = "waiting-market"
	// StateFailed: see RoleFailed; TaskStatus.Reason holds the error.
	StateFailed = "failed"
)

// TaskStatus is one task held by this member, as the status page shows it.
// Counts are since the task started in its current role on this member.
type TaskStatus struct {
	Task  int    `json:"task"`
	Role  string `json:"role"`
	State string `json:"state"`
	// Reason says in words what the state means for this task.
	Reason string `json:"reason"`
	// Merged: both the task's state and its notifications are here.
	Merged bool `json:"merged"`
	// Processes: this member joins the task's notifications.
	Processes bool             `json:"processes"`
	Restore   *RestoreProgress `json:"restore,omitempty"`
	Wait      *MarketWait      `json:"wait,omitempty"`
	// MarketLag is the market records not yet applied to the task's store
	// (the last fetch's high watermark minus the next offset); -1 when
	// unknown or when the state is not here.
	MarketLag int64 `json:"market_lag"`
	// NotificationLag is joiner_task_lag_records of the task; -1 when
	// unknown or when its notifications are not processed here.
	NotificationLag int64      `json:"notification_lag"`
	Joins           JoinCounts `json:"joins"`
	// DeadLetters counts the malformed records of the task routed to the
	// dead-letter topic, both topics.
	DeadLetters int64     `json:"dead_letters"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// JoinCounts are joins by result (record.Results).
type JoinCounts struct {
	Local  int64 `json:"local"`
	Remote int64 `json:"remote"`
	Miss   int64 `json:"miss"`
	Late   int64 `json:"late"`
}

// Total is the sum of the counts.
func (j JoinCounts) Total() int64 { return j.Local + j.Remote + j.Miss + j.Late }

// RestoreProgress is a restore (or a copy's catch-up) in flight.
type RestoreProgress struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// RatePerSecond is Done over the time since StartedAt.
	RatePerSecond float64   `json:"rate_per_second"`
	StartedAt     time.Time `json:"started_at"`
	// ETASeconds is the time left at RatePerSecond; -1 when unknown.
	ETASeconds float64 `json:"eta_seconds"`
}

// MarketWait is a merged task's notifications held for the market.
type MarketWait struct {
	// NotificationTs is the time of the oldest notification held.
	NotificationTs time.Time `json:"notification_ts"`
	// MarketTopic and Partition name the market partition waited for.
	MarketTopic string `json:"market_topic"`
	Partition   int    `json:"partition"`
	// MarketReadTs is the newest tick time applied from it; zero when none.
	MarketReadTs time.Time `json:"market_read_ts,omitzero"`
	Since        time.Time `json:"since"`
}

// RebalanceEvent is one assignment this member received (or its loss).
type RebalanceEvent struct {
	At         time.Time `json:"at"`
	Generation int32     `json:"generation"`
	Leader     bool      `json:"leader"`
	// Reason is this member's reading of why the group rebalanced: the
	// members that joined or left (by the owners of the plan), a handover's
	// follow-up, a planning error, or a lost membership.
	Reason string `json:"reason"`
	// Moved are the tasks whose owner changed between this member's
	// previous assignment and this one ("" for nobody: a task withheld
	// during a cooperative handover).
	Moved []TaskMove `json:"moved"`
	// Assigned and Revoked are this member's active tasks gained and lost.
	Assigned []int `json:"assigned"`
	Revoked  []int `json:"revoked"`
}

// TaskMove is one task's change of owner.
type TaskMove struct {
	Task int    `json:"task"`
	From string `json:"from"`
	To   string `json:"to"`
}

// rebalanceHistory is how many RebalanceEvents a Processor keeps.
const rebalanceHistory = 20

// Status is this member's part of the status page.
type Status struct {
	Generation  int32  `json:"generation"`
	MemberID    string `json:"member_id"`
	Leader      bool   `json:"leader"`
	Partitions  int    `json:"partitions"`
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"ready_reason"`
	Guarantee   string `json:"guarantee"`
	// Owners[p] is the member owning task p, with its HTTP address.
	Owners     []group.Owner    `json:"-"`
	Tasks      []TaskStatus     `json:"tasks"`
	Rebalances []RebalanceEvent `json:"rebalances"`
}

// Status returns the member's status: its assignment, every task it holds
// and its last rebalances, newest first.
func (w *Processor) Status() Status {
	a := w.currentAssignment()
	ready, why := w.Ready()
	s := Status{
		Generation: a.Generation, MemberID: a.MemberID, Leader: a.Leader, Partitions: a.Partitions,
		Ready: ready, ReadyReason: why, Guarantee: Guarantee, Owners: slices.Clone(a.Owners),
		Tasks: w.TaskStatuses(),
	}
	w.histMu.Lock()
	s.Rebalances = slices.Clone(w.history)
	w.histMu.Unlock()
	slices.Reverse(s.Rebalances)
	return s
}

// taskErr is the last error a task met; guarded by Processor.histMu.
type taskErr struct {
	msg string
	at  time.Time
}

// noteErr records err as task p's last error (on error paths only).
func (w *statusState) noteErr(p int, err error) {
	w.histMu.Lock()
	defer w.histMu.Unlock()
	if w.taskErrs == nil {
		w.taskErrs = map[int]taskErr{}
	}
	w.taskErrs[p] = taskErr{msg: err.Error(), at: time.Now()}
}

// taskCounters are a process task's counts for TaskStatus.
type taskCounters struct {
	joins [len(record.Results)]atomic.Int64
	dead  atomic.Int64
	// nLag is the notification lag of the last fetch, -1 before one.
	nLag atomic.Int64
	// waitSince (Unix ns, 0: not waiting) and waitTsMs: a merged task's
	// notifications held for the market past MaxTaskIdle, the oldest at
	// waitTsMs.
	waitSince atomic.Int64
	waitTsMs  atomic.Int64
}

// restoreCounters are a state task's restore progress and market counts.
type restoreCounters struct {
	from, end atomic.Int64 // -1 until the restore's bounds are read
	done      atomic.Int64 // records read by the restore so far
	began     atomic.Int64 // Unix ns
	hwm       atomic.Int64 // market high watermark of the last fetch, -1 before
	dead      atomic.Int64
}

func (c *restoreCounters) init() {
	c.from.Store(-1)
	c.end.Store(-1)
	c.hwm.Store(-1)
}

// TaskStatuses returns every task held here, ascending by task: active,
// standby and warm-up tasks, tasks paused at a handover, and failed ones.
func (w *Processor) TaskStatuses() []TaskStatus {
	now := time.Now()
	byTask := map[int]*TaskStatus{}
	get := func(p int) *TaskStatus {
		if t := byTask[p]; t != nil {
			return t
		}
		t := &TaskStatus{Task: p, MarketLag: -1, NotificationLag: -1}
		byTask[p] = t
		return t
	}
	w.mu.RLock()
	mt := w.cfg.Topics.Market
	for p, st := range w.states {
		t := get(p)
		t.Role = RoleActive
		st.describe(t, now, mt)
	}
	for p, pt := range w.procs {
		t := get(p)
		t.Role, t.Processes, t.Merged = RoleActive, true, pt.st != nil
		pt.describe(t, now, w.cfg.MaxTaskIdle, mt)
	}
	for p, st := range w.standbys {
		t := get(p)
		t.Role = st.roleName()
		st.describe(t, now, mt)
	}
	for p, h := range w.handover {
		t := get(p)
		t.Role = RoleActive
		if h.st != nil {
			h.st.describe(t, now, mt)
		}
		if h.pt != nil {
			t.Processes, t.Merged = true, h.pt.st != nil
			h.pt.describe(t, now, w.cfg.MaxTaskIdle, mt)
		}
		t.State = StatePaused
		t.Reason = "paused at a handover: its batches in flight finish and its offsets are committed before it stops here"
	}
	w.mu.RUnlock()

	f := &w.faults
	f.mu.Lock()
	for p, err := range f.pending {
		t := get(p)
		t.Role, t.State, t.Reason = RoleActive, StateStarting, "its store cannot be opened; retrying: "+err.Error()
	}
	for p := range f.retries {
		t := get(p)
		t.Role, t.State = RoleActive, StateStarting
		t.Reason = "its store cannot be opened; retrying"
		if err := f.errs[p]; err != nil {
			t.Reason += ": " + err.Error()
		}
	}
	for p, why := range f.failed {
		t := get(p)
		t.Role, t.State, t.Reason = RoleFailed, StateFailed, why
	}
	f.mu.Unlock()

	w.histMu.Lock()
	for p, e := range w.taskErrs {
		if t := byTask[p]; t != nil {
			t.LastError, t.LastErrorAt = e.msg, e.at
		}
	}
	w.histMu.Unlock()
	out := make([]TaskStatus, 0, len(byTask))
	for _, p := range sortedKeys(byTask) {
		out = append(out, *byTask[p])
	}
	return out
}

// describe fills t with what the state task knows: restore progress, the
// market lag and the market's dead letters.
func (s *stateTask) describe(t *TaskStatus, now time.Time, market string) {
	c := &s.rc
	t.DeadLetters += c.dead.Load()
	if hwm := c.hwm.Load(); hwm >= 0 {
		t.MarketLag = max(hwm-(s.appliedOffset()+1), 0)
	}
	from, end := c.from.Load(), c.end.Load()
	switch {
	case s.isRestored():
		t.State = StateRunning
		switch {
		case s.isStandby():
			t.Reason = fmt.Sprintf("tailing %s-%d into its %s copy", market, s.p, s.roleName())
		case !s.merged:
			t.Reason = fmt.Sprintf("tailing %s-%d; its notifications are processed by another member", market, s.p)
		}
	case end < 0:
		t.State, t.Reason = StateStarting, "reading the offsets to restore from"
	default:
		done, total := c.done.Load(), max(end-from, 0)
		r := &RestoreProgress{Done: done, Total: total, StartedAt: time.Unix(0, c.began.Load()), ETASeconds: -1}
		if secs := now.Sub(r.StartedAt).Seconds(); secs > 0 {
			r.RatePerSecond = float64(done) / secs
		}
		if r.RatePerSecond > 0 {
			r.ETASeconds = float64(max(total-done, 0)) / r.RatePerSecond
		}
		t.State, t.Restore = StateRestoring, r
		t.Reason = fmt.Sprintf("restoring %s-%d: %d of %d records", market, s.p, done, total)
	}
}

// describe fills t with what the process task knows: joins, dead letters,
// the notification lag, a wait for the market and a pause.
func (pt *processTask) describe(t *TaskStatus, now time.Time, idle time.Duration, market string) {
	c := &pt.counters
	for i, r := range record.Results {
		n := c.joins[i].Load()
		switch r {
		case record.ResultLocal:
			t.Joins.Local = n
		case record.ResultRemote:
			t.Joins.Remote = n
		case record.ResultMiss:
			t.Joins.Miss = n
		case record.ResultLate:
			t.Joins.Late = n
		}
	}
	t.DeadLetters += c.dead.Load()
	t.NotificationLag = c.nLag.Load()
	if t.State == "" || t.State == StateRunning {
		t.State = StateRunning
		if pt.st != nil {
			t.Reason = fmt.Sprintf("joining notifications merged with %s-%d in time order", market, pt.p)
		} else {
			t.Reason = "joining notifications; their prices are looked up from the tasks' owners"
		}
	}
	if since := c.waitSince.Load(); since != 0 && pt.st != nil && t.State == StateRunning {
		wt := &MarketWait{NotificationTs: time.UnixMilli(c.waitTsMs.Load()), MarketTopic: market, Partition: pt.p, Since: time.Unix(0, since)}
		pt.st.pmu.Lock()
		read := pt.st.lastTsMs
		pt.st.pmu.Unlock()
		if read >= 0 {
			wt.MarketReadTs = time.UnixMilli(read)
		}
		t.State, t.Wait = StateWaitingMarket, wt
		t.Reason = wt.String()
	}
	if pt.gate.isShut() {
		t.State = StatePaused
		t.Reason = "paused at a handover: its batches in flight finish and its offsets are committed"
	}
}

// String is the wait in words, for example "notification at 12:00:01.250
// waits for market-3 to be read past it; market read to 12:00:01.100".
func (m MarketWait) String() string {
	const layout = "15:04:05.000"
	s := fmt.Sprintf("notification at %s waits for %s-%d to be read past it", m.NotificationTs.UTC().Format(layout), m.MarketTopic, m.Partition)
	if m.MarketReadTs.IsZero() {
		return s + "; nothing read from the market yet"
	}
	return s + "; market read to " + m.MarketReadTs.UTC().Format(layout)
}

// handoverTask is a task paused by Assigned while it is handed over.
type handoverTask struct {
	pt *processTask
	st *stateTask
	// final: its final offsets were committed (commitFinal), or their
	// commit failed; the periodic commits leave it out from then on.
	final bool
}

// recordRebalance adds the event of assignment a (prev the one before)
// to the history; assigned and revoked are this member's active tasks
// gained and lost.
func (w *Processor) recordRebalance(prev, a group.Assignment, assigned, revoked []int) {
	ev := RebalanceEvent{At: time.Now(), Generation: a.Generation, Leader: a.Leader,
		Assigned: assigned, Revoked: revoked, Moved: []TaskMove{}}
	slices.Sort(ev.Assigned)
	slices.Sort(ev.Revoked)
	for p := range max(len(prev.Owners), len(a.Owners)) {
		from, to := ownerAt(prev.Owners, p), ownerAt(a.Owners, p)
		if from != to {
			ev.Moved = append(ev.Moved, TaskMove{Task: p, From: from, To: to})
		}
	}
	ev.Reason = rebalanceReason(prev, a)
	w.addHistory(ev)
}

func (w *Processor) addHistory(ev RebalanceEvent) {
	w.histMu.Lock()
	defer w.histMu.Unlock()
	w.history = append(w.history, ev)
	if len(w.history) > rebalanceHistory {
		w.history = slices.Delete(w.history, 0, len(w.history)-rebalanceHistory)
	}
}

func ownerAt(owners []group.Owner, p int) string {
	if p < len(owners) {
		return owners[p].InstanceID
	}
	return ""
}

// rebalanceReason is this member's reading of why the group went from
// prev to a.
func rebalanceReason(prev, a group.Assignment) string {
	if a.Error != "" {
		if why, ex := a.Excluded(); ex {
			return "this member is excluded from the plan: " + why
		}
		return "the leader could not plan: " + a.Error
	}
	if prev.Generation == 0 {
		return "this member joined the group"
	}
	before, after := ownerSet(prev.Owners), ownerSet(a.Owners)
	joined, left := missing(after, before), missing(before, after)
	var parts []string
	if len(joined) > 0 {
		parts = append(parts, "members now owning tasks: "+strings.Join(joined, ", "))
	}
	if len(left) > 0 {
		parts = append(parts, "members owning no task any more: "+strings.Join(left, ", "))
	}
	if withheld := unowned(a.Owners); len(withheld) > 0 {
		parts = append(parts, fmt.Sprintf("tasks %v withheld until their owners give them up (cooperative handover)", withheld))
	} else if was := unowned(prev.Owners); len(was) > 0 {
		parts = append(parts, fmt.Sprintf("handover completed: tasks %v have their new owners", was))
	}
	if len(parts) == 0 {
		return "no owner changed (a member rejoined, or a probing rebalance)"
	}
	return strings.Join(parts, "; ")
}

func ownerSet(owners []group.Owner) map[string]bool {
	m := map[string]bool{}
	for _, o := range owners {
		if o.InstanceID != "" {
			m[o.InstanceID] = true
		}
	}
	return m
}

func unowned(owners []group.Owner) []int {
	var ps []int
	for p, o := range owners {
		if o.InstanceID == "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// statusState is the Processor's part of the status page: the rebalance
// history and the tasks' last errors, guarded by histMu.
type statusState struct {
	histMu   sync.Mutex
	history  []RebalanceEvent
	taskErrs map[int]taskErr
	// handover holds the tasks Assigned pauses while it hands them over
	// (guarded by Processor.mu).
	handover map[int]handoverTask
}

// sortedKeys returns the keys of m, ascending.
func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
