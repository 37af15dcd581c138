// Package statuspage serves a worker's status page on its HTTP listener:
//
//	/            the page: server-rendered HTML (html/template, an inline
//	             stylesheet, no script needed; it reloads itself every few
//	             seconds with a meta refresh)
//	/v1/status   the same data as JSON (Status), which the page renders
//
// The page shows this worker (instance, version, uptime, group membership,
// processing guarantee, state dirs), its tasks one row each (role, state
// and why, restore progress, lags, joins by result, dead letters, the
// last error, sparklines of the lag and the join rate over the last ten
// minutes), the group as a grid of tasks × members built from each
// peer's /v1/assignment, and the last rebalances.
//
// package join exposes the data (Processor.Status, Processor.View); node
// wires a Server to the listener, behind the peer token when one is set
// (the token check, and the login form that turns the token into a
// cookie, are node's: see docs/security.md).
package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/joiner-dev/joiner/internal/buildinfo"
	"github.com/joiner-dev/joiner/join"
)

// Status is the answer of GET /v1/status and what the page renders.
type Status struct {
	GeneratedAt time.Time `json:"generated_at"`
	Worker      Worker    `json:"worker"`
	Tasks       []Task    `json:"tasks"`
	Group       Group     `json:"group"`
	// Rebalances are this worker's last assignments, newest first.
	Rebalances []join.RebalanceEvent `json:"rebalances"`
}

// Worker is this worker.
type Worker struct {
	Instance      string     `json:"instance"`
	Version       string     `json:"version"`
	Commit        string     `json:"commit"`
	StartedAt     time.Time  `json:"started_at"`
	UptimeSeconds float64    `json:"uptime_seconds"`
	Addr          string     `json:"addr"`
	Group         string     `json:"group"`
	Generation    int32      `json:"generation"`
	MemberID      string     `json:"member_id"`
	Leader        bool       `json:"leader"`
	Guarantee     string     `json:"guarantee"`
	Ready         bool       `json:"ready"`
	ReadyReason   string     `json:"ready_reason"`
	StateDirs     []StateDir `json:"state_dirs"`
	// Joins are the worker's joins since it started, by result: the
	// values of joiner_joins_total (the tasks' counts restart with them).
	Joins join.JoinCounts `json:"joins"`
}

// StateDir is one state dir and its free bytes (Error when they cannot be
// read).
type StateDir struct {
	Path      string `json:"path"`
	FreeBytes uint64 `json:"free_bytes"`
	Error     string `json:"error,omitempty"`
}

// Task is one task held here with its recent history.
type Task struct {
	join.TaskStatus
	// History holds the samples of the last ten minutes, oldest first.
	History []Sample `json:"history"`
}

// Group is the group as seen from this worker: every member that owns a
// task (from this worker's assignment) and what each holds, from its
// /v1/assignment.
type Group struct {
	Partitions int      `json:"partitions"`
	Members    []Member `json:"members"`
	// Tasks[p].Roles[i] is what Members[i] holds of task p: "active",
	// "standby", "warmup", "failed" or "".
	Tasks []GroupTask `json:"tasks"`
}

// Member is one member of the group.
type Member struct {
	Instance   string `json:"instance"`
	Addr       string `json:"addr"`
	Self       bool   `json:"self"`
	Generation int32  `json:"generation"`
	Ready      bool   `json:"ready"`
	// Error is why its /v1/assignment could not be read; its roles are
	// then unknown.
	Error string `json:"error,omitempty"`
}

// GroupTask is one row of the group's grid.
type GroupTask struct {
	Task  int      `json:"task"`
	Owner string   `json:"owner"`
	Roles []string `json:"roles"`
}

// Source is what the page shows of the worker: *join.Processor.
type Source interface {
	Status() join.Status
	View() join.AssignmentView
}

// Options configure a Server.
type Options struct {
	Source    Source
	Instance  string
	Group     string
	Addr      string // advertised host:port
	StateDirs []string
	// FreeBytes reads the free bytes of a state dir.
	FreeBytes func(dir string) (uint64, error)
	// Client reads the peers' /v1/assignment (with the peer token and
	// TLS when they are set). Default: a plain client.
	Client    *http.Client
	StartedAt time.Time
	// SampleEvery is the period of the history's samples. Default: 10s;
	// the history covers the last HistoryWindow.
	SampleEvery time.Duration
}

// HistoryWindow is how far back the sparklines go.
const HistoryWindow = 10 * time.Minute

// peerTimeout bounds one peer's /v1/assignment.
const peerTimeout = 2 * time.Second

// Server serves the page and the JSON, and samples the history.
type Server struct {
	o    Options
	hist *history
}

// New returns a Server; call Run to sample the history.
func New(o Options) *Server {
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.StartedAt.IsZero() {
		o.StartedAt = time.Now()
	}
	return &Server{o: o, hist: newHistory(int(HistoryWindow / o.SampleEvery))}
}

// Run samples every task's lags and join rate each SampleEvery until ctx
// is done.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.o.SampleEvery)
	defer t.Stop()
	s.hist.record(time.Now(), s.o.Source.Status().Tasks)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.hist.record(now, s.o.Source.Status().Tasks)
		}
	}
}

// Status assembles the status now; the peers' assignments are read with
// ctx.
func (s *Server) Status(ctx context.Context) Status {
	now := time.Now()
	js, view := s.o.Source.Status(), s.o.Source.View()
	bi := buildinfo.Get()
	st := Status{
		GeneratedAt: now,
		Worker: Worker{
			Instance: s.o.Instance, Version: bi.Version, Commit: bi.Revision, StartedAt: s.o.StartedAt,
			UptimeSeconds: now.Sub(s.o.StartedAt).Seconds(), Addr: s.o.Addr, Group: s.o.Group,
			Generation: js.Generation, MemberID: js.MemberID, Leader: js.Leader, Guarantee: js.Guarantee,
			Ready: js.Ready, ReadyReason: js.ReadyReason, StateDirs: []StateDir{},
			Joins: join.JoinCounts{Local: view.Local, Remote: view.Remote, Miss: view.Miss, Late: view.Late},
		},
		Tasks:      make([]Task, 0, len(js.Tasks)),
		Rebalances: js.Rebalances,
	}
	for _, d := range s.o.StateDirs {
		sd := StateDir{Path: d}
		if s.o.FreeBytes != nil {
			free, err := s.o.FreeBytes(d)
			if err != nil {
				sd.Error = err.Error()
			}
			sd.FreeBytes = free
		}
		st.Worker.StateDirs = append(st.Worker.StateDirs, sd)
	}
	for _, t := range js.Tasks {
		st.Tasks = append(st.Tasks, Task{TaskStatus: t, History: s.hist.series(t.Task)})
	}
	st.Group = s.group(ctx, js, view)
	return st
}

// group builds the grid from this worker's view and every other owner's
// /v1/assignment, read concurrently.
func (s *Server) group(ctx context.Context, js join.Status, self join.AssignmentView) Group {
	g := Group{Partitions: js.Partitions}
	addrs := map[string]string{s.o.Instance: s.o.Addr}
	names := []string{s.o.Instance}
	for _, o := range js.Owners {
		if _, ok := addrs[o.InstanceID]; !ok && o.InstanceID != "" {
			addrs[o.InstanceID] = o.Addr
			names = append(names, o.InstanceID)
		}
	}
	slices.Sort(names[1:])
	views := make([]*join.AssignmentView, len(names))
	errs := make([]error, len(names))
	views[0] = &self
	var wg sync.WaitGroup
	for i := 1; i < len(names); i++ {
		wg.Go(func() { views[i], errs[i] = s.peerView(ctx, addrs[names[i]]) })
	}
	wg.Wait()
	for i, name := range names {
		m := Member{Instance: name, Addr: addrs[name], Self: i == 0}
		if errs[i] != nil {
			m.Error = errs[i].Error()
		} else {
			m.Generation, m.Ready = views[i].Generation, views[i].Ready
		}
		g.Members = append(g.Members, m)
	}
	for p := range js.Partitions {
		row := GroupTask{Task: p, Roles: make([]string, len(names))}
		if p < len(js.Owners) {
			row.Owner = js.Owners[p].InstanceID
		}
		for i, v := range views {
			if v != nil {
				row.Roles[i] = roleIn(v, p)
			}
		}
		g.Tasks = append(g.Tasks, row)
	}
	return g
}

// roleIn is what the member of view v holds of task p.
func roleIn(v *join.AssignmentView, p int) string {
	switch {
	case slices.Contains(v.FailedTasks, p):
		return join.RoleFailed
	case slices.Contains(v.Tasks, p) || slices.Contains(v.StateTasks, p):
		return join.RoleActive
	case slices.Contains(v.WarmupTasks, p):
		return join.RoleWarmup
	case slices.Contains(v.StandbyTasks, p):
		return join.RoleStandby
	}
	return ""
}

func (s *Server) peerView(ctx context.Context, addr string) (*join.AssignmentView, error) {
	if addr == "" {
		return nil, fmt.Errorf("no address known")
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/assignment", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading its /v1/assignment: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("its /v1/assignment answered %s", resp.Status)
	}
	var v join.AssignmentView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding its /v1/assignment: %w", err)
	}
	return &v, nil
}

// Handler serves GET / (the page) and GET /v1/status (the JSON).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, r *http.Request) {
		st := s.Status(r.Context())
		opts := pageOptions{Refresh: 5, LayoutCheck: r.URL.Query().Get("check") == "layout"}
		if r.URL.Query().Get("refresh") == "0" {
			opts.Refresh = 0
		}
		writePage(rw, st, opts)
	})
	mux.HandleFunc("GET /v1/status", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(rw).Encode(s.Status(r.Context()))
	})
	return mux
}
