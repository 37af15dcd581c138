package group

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

const (
	protocolType = "consumer"
)

// Member is one member of the consumer group. Create it with New, run it
// with Run. Commit, FetchOffsets and Current are safe for concurrent use with
// Run and with each other.
type Member struct {
	cfg Config
	// topics are the input topics, the state topic first.
	topics []string
	client *kafka.Client
	// joinClient is client without its Timeout, for JoinGroup and
	// SyncGroup: the coordinator may hold them for up to RebalanceTimeout,
	// and the member bounds them itself.
	joinClient *kafka.Client
	own        *kafka.Transport // the transport New built, closed when Run returns; nil with Config.Client
	log        *slog.Logger

	started atomic.Bool

	mu sync.Mutex
	// gen is the generation Commit uses: valid from SyncGroup until the
	// JoinGroup response of the next rebalance (the coordinator accepts
	// its commits while it prepares the rebalance), or until the
	// membership is lost.
	gen        generation
	current    Assignment
	hasCurrent bool
	// live is true while the tasks of current run: from Assigned until
	// Lost (or Run returns). joining is true while this member's
	// JoinGroup or SyncGroup is in flight.
	live, joining bool
	// lastAlive is when the coordinator last confirmed the membership (a
	// JoinGroup or SyncGroup response, or a heartbeat answer); see Active.
	lastAlive time.Time
	// warmups is the number of warm-up copies of this member's latest
	// plan as leader, and unbalanced whether its active counts differ by
	// more than one (tasks stayed, or failed over to a copy above its
	// holder's target): either asks for a probing rebalance.
	warmups    atomic.Int64
	unbalanced atomic.Bool

	// unpaired is the unpaired partition count of this member's latest plan
	// as leader (checks.go).
	unpaired atomic.Int64
	// refused are the tasks released by Release; guarded by mu. rejoin
	// wakes the heartbeat loop to rejoin (release.go).
	refused    map[int]bool
	rejoin     chan struct{}
	rejoinOnce sync.Once
	// restart is the reason of a pending Restart (restart.go), asked
	// when losses was restartLosses; losses counts the memberships lost
	// (Handler.Lost calls); released is set by Release until the
	// heartbeat loop rejoins for it. Guarded by mu.
	restart       error
	restartLosses uint64
	losses        uint64
	released      bool
}

type generation struct {
	id       int32
	memberID string
	valid    bool
}

// New validates cfg, fills its defaults and returns a Member that has not
// yet joined. It does no I/O.
func New(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Member{
		cfg:    cfg,
		topics: cfg.Topics.Inputs(),
		client: cfg.Client,
		log:    cfg.Logger.With("group", cfg.GroupID, "instance", cfg.InstanceID),
	}
	if m.client == nil {
		m.own = &kafka.Transport{}
		m.client = &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: m.own}
	}
	jc := *m.client
	jc.Timeout = 0
	m.joinClient = &jc
	return m, nil
}

// Current returns the latest assignment delivered to Handler.Assigned and
// true, or false before the first one. It stays the latest while a
// rebalance runs (its owner map is still the best knowledge of who owns
// what). The returned maps and slices are shared: do not modify them.
func (m *Member) Current() (Assignment, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current, m.hasCurrent
}

// Run joins the group and stays in it until ctx is cancelled or a fatal
// error occurs. It is blocking and single use.
//
// Sequencing, all on Run's goroutine: after each SyncGroup, the new
// generation becomes the one Commit uses, then Handler.Assigned is called,
// with heartbeats kept up while it runs (assign), then heartbeats go on. When a heartbeat reports a rebalance, heartbeats
// stop, Handler.Rebalancing is called, and the member rejoins; the tasks
// keep running, and Commit keeps using the old generation, which the
// coordinator accepts while it prepares the rebalance, until the JoinGroup
// response arrives (from then until the SyncGroup response Commit returns
// ErrRebalancing). When the new assignment lacks tasks of the previous one
// (the leader moves them: cooperative handover), Handler.Assigned stops
// them and the member rejoins at once, so that their new owner gets them in
// a follow-up rebalance. Every Assigned is followed by exactly one
// Rebalancing or Lost before the next Assigned or before Run returns, and a
// Rebalancing may be followed by Lost when the rejoin finds the membership
// lost; when the membership was already lost (UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, fenced, heartbeats failing for a session timeout) the
// generation is dropped and Lost is called instead of Rebalancing, so its
// commits fail with ErrRebalancing.
//
// On cancellation Run calls Handler.Rebalancing with a context bounded by
// Config.RebalanceTimeout (not the cancelled ctx) and returns nil: the
// member stays in the group until the session timeout, so a restart within
// it takes its place without a rebalance. With Config.LeaveOnShutdown it
// sends LeaveGroup with the instance id (also bounded by RebalanceTimeout)
// and returns nil when the leave succeeded, an error when it did not (the
// coordinator then drops the member after the session timeout). It returns an error wrapping ErrFenced
// when another process took over the instance id, and an error for
// configuration problems the coordinator rejects.
func (m *Member) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("group: Member.Run called more than once")
	}
	if m.own != nil {
		defer m.own.CloseIdleConnections()
	}
	m.log.Info("group: starting", "topics", m.topics, "assignor", m.cfg.Assignor,
		"session_timeout", m.cfg.SessionTimeout, "rebalance_timeout", m.cfg.RebalanceTimeout)

	var (
		memberID string
		retry    = backoff.Retry{Policy: backoff.Default}
	)
	// Not backoff.Do: this is the membership state machine (rejoin, reset, stop, back off by error class; a join resets the backoff), not one retried call.
	for {
		if ctx.Err() != nil {
			return m.leave(ctx, memberID)
		}
		coord, err := m.findCoordinator(ctx)
		if err == nil {
			var a Assignment
			a, err = m.join(ctx, &memberID)
			if err == nil {
				retry.Reset()
				err = m.hold(ctx, a, memberID, coord)
				if err == nil { // cancelled, Rebalancing done
					return m.leave(ctx, memberID)
				}
			}
		}
		if ctx.Err() != nil {
			return m.leave(ctx, memberID)
		}
		m.loseIfGone(ctx, err)
		switch classify(err) {
		case actRejoin:
			m.log.Info("group: rejoining", "reason", err)
		case actReset:
			m.log.Info("group: rejoining with a new member id", "reason", err, "member", memberID)
			memberID = ""
		case actFatal:
			if errors.Is(err, kafka.FencedInstanceID) {
				err = fmt.Errorf("%w (instance %q, group %q): %w", ErrFenced, m.cfg.InstanceID, m.cfg.GroupID, err)
			}
			m.log.Error("group: stopping", "err", err)
			return err
		case actBackoff:
			d := retry.Next()
			m.log.Warn("group: retrying", "err", err, "in", d)
			if backoff.Sleep(ctx, d) != nil {
				return m.leave(ctx, memberID)
			}
		}
	}
}

// hold delivers a, heartbeats until the generation ends, and calls
// Rebalancing. It returns nil when ctx was cancelled, otherwise why the
// generation ended.
func (m *Member) hold(ctx context.Context, a Assignment, memberID string, coord net.Addr) error {
	m.mu.Lock()
	prev, wasLive := m.current, m.live
	m.gen = generation{id: a.Generation, memberID: memberID, valid: true}
	m.current, m.hasCurrent = a, true
	m.live = true
	m.lastAlive = time.Now()
	m.mu.Unlock()

	// A non-nil err: the generation ended while Assigned ran (a rebalance
	// began, or the membership is gone).
	err := m.assign(ctx, a, memberID, coord)
	if revoked := revokedTasks(prev, a); err == nil && wasLive && len(revoked) > 0 {
		// Cooperative handover, second phase: the handler has stopped
		// and committed the revoked tasks; rejoining changes this
		// member's subscription, so the coordinator rebalances and the
		// leader gives them to their new owners.
		m.log.Info("group: tasks revoked and stopped; rejoining at once so that their new owners get them",
			"generation", a.Generation, "revoked", revoked)
		err = errRevoked
	} else if err == nil {
		err = m.heartbeat(ctx, a, memberID, coord)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RebalanceTimeout)
	defer cancel()
	if err != nil && !errors.Is(err, kafka.RebalanceInProgress) && !wantsRejoin(err) {
		m.log.Warn("group: membership lost; every task of this member is lost", "generation", a.Generation, "err", err)
		m.lose(rctx, err)
		return err
	}
	m.cfg.Handler.Rebalancing(rctx)
	if err == nil {
		m.dropGeneration() // cancelled: Run leaves
	}
	return err
}

// assign calls Handler.Assigned with heartbeats kept up meanwhile (every
// HeartbeatInterval, on their own goroutine, which assign stops and waits
// for): an Assigned that opens and restores many tasks may take longer
// than the session timeout, and without them the coordinator would drop
// the member before its first heartbeat (a worker with 2,048 tasks lost
// its membership after every assignment). It returns what ended the
// generation meanwhile: kafka.RebalanceInProgress (the heartbeats go on
// until Assigned returns, keeping the session, and the member then
// rejoins), or the error of a lost membership; nil otherwise.
func (m *Member) assign(ctx context.Context, a Assignment, memberID string, coord net.Addr) error {
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.keepAlive(hctx, a.Generation, memberID, coord) }()
	m.cfg.Handler.Assigned(ctx, a)
	cancel()
	return <-done
}

// keepAlive heartbeats every HeartbeatInterval until ctx ends (assign's
// heartbeats). It returns at once when the membership is lost, and
// remembers a rebalance (returned when ctx ends) while heartbeating on.
func (m *Member) keepAlive(ctx context.Context, gen int32, memberID string, coord net.Addr) error {
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	lastOK := time.Now()
	var rebalancing error
	for {
		select {
		case <-ctx.Done():
			return rebalancing
		case <-tick.C:
		}
		err := m.sendHeartbeat(ctx, gen, memberID, coord)
		switch {
		case err == nil:
			lastOK = time.Now()
			m.alive()
		case ctx.Err() != nil:
			return rebalancing
		case errors.Is(err, kafka.RebalanceInProgress):
			lastOK = time.Now()
			m.alive()
			if rebalancing == nil {
				m.log.Info("group: rebalance started while the assignment was applied; rejoining once it is", "generation", gen)
			}
			rebalancing = err
		case classify(err) != actBackoff:
			return err
		case time.Since(lastOK) >= m.cfg.SessionTimeout:
			return fmt.Errorf("%w: %w", errSessionLost, err)
		}
	}
}

// revokedTasks returns the tasks (partitions of any topic) of prev that a
// lacks, ascending.
func revokedTasks(prev, a Assignment) []int {
	var out []int
	for t, ps := range prev.Topics {
		for _, p := range ps {
			if !slices.Contains(a.Topics[t], p) {
				out = append(out, p)
			}
		}
	}
	return normalizeTasks(out)
}

// lose drops the generation and calls Handler.Lost, once per membership:
// the tasks must stop at once.
func (m *Member) lose(ctx context.Context, err error) {
	m.mu.Lock()
	wasLive := m.live
	m.gen.valid, m.live = false, false
	if wasLive {
		m.losses++
	}
	m.mu.Unlock()
	if wasLive {
		m.cfg.Handler.Lost(ctx, err)
	}
}

// loseIfGone calls lose when err, from a rejoin while the tasks kept
// running, means that the membership is gone: the coordinator does not
// know the member id any more, the instance was fenced, or nothing has
// confirmed the membership for a session timeout.
func (m *Member) loseIfGone(ctx context.Context, err error) {
	m.mu.Lock()
	live, since := m.live, time.Since(m.lastAlive)
	m.mu.Unlock()
	if !live {
		return
	}
	switch a := classify(err); {
	case a == actReset || a == actFatal, a == actBackoff && since >= m.cfg.SessionTimeout:
		m.log.Warn("group: membership lost while rejoining; every task of this member is lost", "err", err)
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RebalanceTimeout)
		defer cancel()
		m.lose(lctx, err)
	}
}

// Active reports whether the member still holds its membership, as far as
// it knows: its tasks are live (assigned and not lost) and the coordinator
// confirmed the membership less than a session timeout ago, or a JoinGroup
// or SyncGroup of this member is in flight (the coordinator keeps a
// joining member) and the last confirmation is less than a rebalance
// timeout old (a coordinator that had the JoinGroup would have answered by
// then). A member that was paused (SIGSTOP, a long GC, a frozen VM) for
// longer than that may have been replaced without knowing it yet: work
// done for its tasks must not be written until a heartbeat answers again
// (then either Active is true, or Handler.Lost has been called).
func (m *Member) Active() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	since := time.Since(m.lastAlive)
	return m.live && (since < m.cfg.SessionTimeout || m.joining && since < m.cfg.RebalanceTimeout)
}

func (m *Member) alive() {
	m.mu.Lock()
	m.lastAlive = time.Now()
	m.mu.Unlock()
}

func (m *Member) dropGeneration() {
	m.mu.Lock()
	m.gen.valid = false
	m.mu.Unlock()
}

func (m *Member) setJoining(j bool) {
	m.mu.Lock()
	m.joining = j
	m.mu.Unlock()
}

// heartbeat sends heartbeats every HeartbeatInterval. It returns nil when
// ctx is cancelled, kafka.RebalanceInProgress when a rebalance starts, and
// other errors when the membership is lost. Coordinator and connection
// errors are retried (finding the coordinator again) for up to a session
// timeout.
func (m *Member) heartbeat(ctx context.Context, a Assignment, memberID string, coord net.Addr) error {
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	lastOK := time.Now()
	lastCheck := time.Now()
	planned := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-m.rejoinCh():
			if err := m.rejoinReason(); err != nil { // restart.go, release.go
				return err
			}
			continue
		}
		if a.Leader && (m.warmups.Load() > 0 || m.unbalanced.Load()) && time.Since(planned) >= m.cfg.ProbingRebalanceInterval {
			m.log.Info("group: probing rebalance: the plan has warm-ups or is unbalanced; rejoining to move the tasks whose copies caught up",
				"generation", a.Generation, "warmups", m.warmups.Load(), "unbalanced", m.unbalanced.Load(), "interval", m.cfg.ProbingRebalanceInterval)
			return errProbing
		}
		if a.Leader && time.Since(lastCheck) >= m.cfg.MetadataCheckInterval {
			lastCheck = time.Now()
			if err := m.checkMetadata(ctx, a); err != nil {
				return err
			}
		}
		err := m.sendHeartbeat(ctx, a.Generation, memberID, coord)
		switch {
		case err == nil:
			lastOK = time.Now()
			m.alive()
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, kafka.RebalanceInProgress):
			// The coordinator still knows this generation: it may commit
			// (Handler.Rebalancing) until the member rejoins.
			m.alive()
			m.log.Info("group: rebalance started", "generation", a.Generation)
			return err
		case classify(err) != actBackoff:
			return err
		}
		if time.Since(lastOK) >= m.cfg.SessionTimeout {
			return fmt.Errorf("%w: %w", errSessionLost, err)
		}
		m.log.Warn("group: heartbeat failed, finding the coordinator again", "err", err)
		if c, ferr := m.findCoordinator(ctx); ferr == nil {
			coord = c
		}
	}
}

func (m *Member) sendHeartbeat(ctx context.Context, gen int32, memberID string, coord net.Addr) error {
	hctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	// kafka-go's Transport routes JoinGroup, SyncGroup, LeaveGroup and the
	// offset requests to the coordinator itself, but not Heartbeat: it is
	// sent to the coordinator's address found by FindCoordinator.
	resp, err := m.client.Heartbeat(hctx, &kafka.HeartbeatRequest{
		Addr:            coord,
		GroupID:         m.cfg.GroupID,
		GenerationID:    gen,
		MemberID:        memberID,
		GroupInstanceID: m.cfg.InstanceID,
	})
	if err != nil {
		return fmt.Errorf("group %q: heartbeat: %w", m.cfg.GroupID, err)
	}
	if err := responseError(resp.Error, resp.Throttle); err != nil {
		return fmt.Errorf("group %q: heartbeat: %w", m.cfg.GroupID, err)
	}
	return nil
}

// responseError recovers the top-level error code of a Heartbeat or
// LeaveGroup response. kafka-go v0.4.51 declares ErrorCode before
// ThrottleTimeMs in both response structs, but from version 1 on the wire
// carries the throttle time first (segmentio/kafka-go#1371, open). The
// decoded Throttle then holds the low half of the real throttle time in its
// high 16 bits and the real error code in its low 16 bits, and the decoded
// Error holds the high half of the throttle time (0 unless throttled for
// more than a minute). Version 0 responses have no throttle time and decode
// correctly. Once kafka-go is fixed, Throttle is a real (small) duration
// whose low 16 bits could be misread as an error: drop this then.
func responseError(decoded error, throttle time.Duration) error {
	if code := int16(throttle.Milliseconds() & 0xffff); code != 0 {
		return kafka.Error(code)
	}
	if throttle == 0 {
		return decoded
	}
	return nil
}

// checkMetadata returns errMetadataChanged when the topics' partition counts
// differ from the ones the leader planned for (or the leader could not plan
// and the topics may have been fixed since).
func (m *Member) checkMetadata(ctx context.Context, a Assignment) error {
	counts, err := m.partitionCounts(ctx)
	if err != nil {
		m.log.Warn("group: metadata check failed", "err", err)
		return nil
	}
	p, unpaired, planErr := pairCounts(m.topics, counts)
	changed := a.Error == "" && (planErr != nil || p != a.Partitions || unpaired != a.Unpaired) || // planned, now different
		a.Error != "" && planErr == nil // could not plan, now fixed
	if changed {
		m.log.Info("group: topic partition counts changed, rejoining to replan",
			"counts", counts, "planned_partitions", a.Partitions)
		return errMetadataChanged
	}
	return nil
}

func (m *Member) findCoordinator(ctx context.Context) (net.Addr, error) {
	fctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	resp, err := m.client.FindCoordinator(fctx, &kafka.FindCoordinatorRequest{
		Key:     m.cfg.GroupID,
		KeyType: kafka.CoordinatorKeyTypeConsumer,
	})
	if err != nil {
		return nil, fmt.Errorf("group %q: find coordinator: %w", m.cfg.GroupID, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("group %q: find coordinator: %w", m.cfg.GroupID, resp.Error)
	}
	c := resp.Coordinator
	return kafka.TCP(net.JoinHostPort(c.Host, strconv.Itoa(c.Port))), nil
}

// ownedTasks is what the subscription reports: the tasks of the latest
// assignment while they run (live), or Config.Owned before the first one
// and after the membership was lost.
func (m *Member) ownedTasks() (owned []int, live bool) {
	m.mu.Lock()
	cur, ok, live := m.current, m.hasCurrent, m.live
	m.mu.Unlock()
	if ok && live {
		return cur.Topics[m.topics[0]], true
	}
	if m.cfg.Owned != nil {
		return m.cfg.Owned(), false
	}
	if ok {
		return cur.Topics[m.topics[0]], false
	}
	return nil, false
}

// subscription builds this member's subscription user data.
func (m *Member) subscription() subscription {
	owned, live := m.ownedTasks()
	owned = normalizeTasks(m.withoutRefused(owned))
	owned = slices.DeleteFunc(owned, func(t int) bool { return t < 0 || t >= maxTasks })
	s := subscription{InstanceID: m.cfg.InstanceID, Addr: m.cfg.QueryAddr, Owned: owned, Refused: m.refusedTasks(), Live: live}
	if m.cfg.Held != nil {
		for t, next := range m.cfg.Held() {
			if t < 0 || t >= maxTasks || next < 0 || next > maxOffset {
				m.log.Warn("group: Config.Held reported an impossible task or offset; not reported", "task", t, "next_offset", next)
				continue
			}
			if s.Held == nil {
				s.Held = map[int]int64{}
			}
			s.Held[t] = next
		}
	}
	m.mu.Lock()
	if m.live {
		s.Standby = m.current.Standby
	}
	m.mu.Unlock()
	if m.cfg.PartitionCounts != nil {
		planned := slices.DeleteFunc(normalizeTasks(m.cfg.PartitionCounts()), func(n int) bool { return n < 1 || n >= maxTasks })
		if len(planned) > maxPlannedCounts {
			planned = planned[len(planned)-maxPlannedCounts:] // the newest
		}
		s.Planned = planned
	}
	return s
}

// join runs JoinGroup and SyncGroup and returns this member's assignment,
// decoded from its own SyncGroup response. *memberID is updated from the
// JoinGroup response.
func (m *Member) join(ctx context.Context, memberID *string) (Assignment, error) {
	sub := m.subscription()
	userData, err := encodeSubscription(sub)
	if err != nil {
		return Assignment{}, fmt.Errorf("group %q: encode subscription: %w", m.cfg.GroupID, err)
	}
	owned := sub.Owned
	m.setJoining(true)
	defer m.setJoining(false)
	bound := m.cfg.RebalanceTimeout + m.cfg.SessionTimeout
	jctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	m.log.Debug("group: joining", "member", *memberID, "owned", owned)
	jresp, err := m.joinClient.JoinGroup(jctx, &kafka.JoinGroupRequest{
		GroupID:          m.cfg.GroupID,
		SessionTimeout:   m.cfg.SessionTimeout,
		RebalanceTimeout: m.cfg.RebalanceTimeout,
		MemberID:         *memberID,
		GroupInstanceID:  m.cfg.InstanceID,
		ProtocolType:     protocolType,
		Protocols: []kafka.GroupProtocol{{
			Name: m.cfg.Assignor,
			Metadata: kafka.GroupProtocolSubscription{
				Topics:   m.topics,
				UserData: userData,
				// Only the state topic: kafka-go encodes this map in
				// random order, and the coordinator compares metadata
				// bytes to let a static member rejoin without a
				// rebalance. The tasks are the same for every topic.
				OwnedPartitions: map[string][]int{m.topics[0]: owned},
			},
		}},
	})
	// The old generation is over once the coordinator answers: its
	// commits would be rejected.
	m.dropGeneration()
	if err != nil {
		return Assignment{}, fmt.Errorf("group %q: join: %w", m.cfg.GroupID, err)
	}
	if jresp.Error == nil {
		m.alive()
	}
	if jresp.Error != nil {
		if errors.Is(jresp.Error, kafka.MemberIDRequired) && jresp.MemberID != "" {
			*memberID = jresp.MemberID
		}
		return Assignment{}, fmt.Errorf("group %q: join: %w", m.cfg.GroupID, jresp.Error)
	}
	*memberID = jresp.MemberID
	leader := jresp.LeaderID == jresp.MemberID
	m.log.Info("group: joined", "generation", jresp.GenerationID, "member", jresp.MemberID,
		"leader", leader, "protocol", jresp.ProtocolName, "members", len(jresp.Members))

	var assignments []kafka.SyncGroupRequestAssignment
	if leader {
		// kfake may tell every member of a generation that it leads when
		// the previous leader was dropped; each then plans and sends its
		// plan, and only the coordinator's chosen leader's counts. The
		// plans are identical, and members act only on their own
		// SyncGroup response.
		assignments, err = m.lead(jctx, jresp)
		if err != nil {
			return Assignment{}, err
		}
	}
	sresp, err := m.joinClient.SyncGroup(jctx, &kafka.SyncGroupRequest{
		GroupID:         m.cfg.GroupID,
		GenerationID:    jresp.GenerationID,
		MemberID:        jresp.MemberID,
		GroupInstanceID: m.cfg.InstanceID,
		ProtocolType:    protocolType,
		ProtocolName:    jresp.ProtocolName,
		Assignments:     assignments,
	})
	if err != nil {
		if isTransportError(err) {
			return Assignment{}, fmt.Errorf("group %q: sync generation %d: %w: %w", m.cfg.GroupID, jresp.GenerationID, errSyncClosed, err)
		}
		return Assignment{}, fmt.Errorf("group %q: sync generation %d: %w", m.cfg.GroupID, jresp.GenerationID, err)
	}
	if sresp.Error != nil {
		return Assignment{}, fmt.Errorf("group %q: sync generation %d: %w", m.cfg.GroupID, jresp.GenerationID, sresp.Error)
	}
	a := m.decodeOwn(int32(jresp.GenerationID), jresp.MemberID, sresp.Assignment)
	if a.Leader {
		a.Unpaired = int(m.unpaired.Load())
	}
	tasks := a.Topics[m.topics[0]]
	if a.Error != "" {
		m.log.Error("group: the leader could not plan; this member has no tasks",
			"generation", a.Generation, "leader_error", a.Error)
	}
	m.log.Info("group: assigned", "generation", a.Generation, "leader", a.Leader,
		"tasks", tasks, "partitions", a.Partitions, "moved", a.Moved)
	return a, nil
}

// decodeOwn builds this member's Assignment from its SyncGroup response.
func (m *Member) decodeOwn(gen int32, memberID string, ga kafka.GroupProtocolAssignment) Assignment {
	a := Assignment{
		Generation: gen,
		MemberID:   memberID,
		Topics:     make(map[string][]int, len(m.topics)),
	}
	for _, t := range m.topics {
		a.Topics[t] = normalizeTasks(ga.AssignedPartitions[t])
	}
	for t := range ga.AssignedPartitions {
		if !slices.Contains(m.topics, t) {
			m.log.Warn("group: assignment names a topic this member does not consume", "topic", t)
		}
	}
	ad, err := decodeAssignment(ga.UserData)
	if err != nil {
		m.log.Error("group: undecodable assignment user data; no owner map", "generation", gen, "err", err)
		return a
	}
	a.Partitions = ad.Partitions
	a.Owners = ad.owners()
	a.Moved = ad.Moved
	a.Leader = ad.Leader == m.cfg.InstanceID
	a.Error = ad.Err
	a.Standby, a.Warmup = ad.Standby, ad.Warmup
	a.PastPartitions = ad.Past
	return a
}

// lead computes every member's assignment for a JoinGroup response that
// names this member the leader.
func (m *Member) lead(ctx context.Context, jresp *kafka.JoinGroupResponse) ([]kafka.SyncGroupRequestAssignment, error) {
	counts, err := m.partitionCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("group %q: leader: %w", m.cfg.GroupID, err)
	}
	members := decodeMembers(jresp.Members)
	for _, jm := range members {
		if jm.SubErr != nil {
			m.log.Warn("group: undecodable subscription user data; the member is treated as owning nothing",
				"member", jm.MemberID, "member_instance", jm.InstanceID, "err", jm.SubErr)
		} else if jm.Sub.InstanceID != jm.InstanceID {
			m.log.Warn("group: subscription instance id differs from the coordinator's",
				"member", jm.MemberID, "coordinator", jm.InstanceID, "subscription", jm.Sub.InstanceID)
		}
	}
	starts, ends := m.logOffsets(ctx, members, counts)
	out, err := computePlan(planInput{
		Starts:                starts,
		Ends:                  ends,
		Assignor:              jresp.ProtocolName,
		Topics:                m.topics,
		Counts:                counts,
		Leader:                m.cfg.InstanceID,
		Members:               members,
		Standbys:              m.cfg.Standbys,
		AcceptableRecoveryLag: m.cfg.AcceptableRecoveryLag,
		MaxWarmupReplicas:     m.cfg.MaxWarmupReplicas,
	})
	if err != nil {
		return nil, fmt.Errorf("group %q: leader: %w", m.cfg.GroupID, err)
	}
	for _, w := range out.Warnings {
		m.log.Warn("group: leader: " + w)
	}
	m.reportChecks(out, counts, int(jresp.GenerationID))
	if out.Err != nil {
		m.log.Error("group: leader cannot plan; every member gets no tasks",
			"generation", jresp.GenerationID, "err", out.Err, "counts", counts)
	} else {
		m.log.Info("group: leader planned", "generation", jresp.GenerationID,
			"assignor", jresp.ProtocolName, "tasks", out.Tasks, "moved", out.Moved,
			"withheld", len(out.Withheld), "standbys", out.Standbys, "warmups", out.Warmups)
		if len(out.Withheld) > 0 {
			m.log.Debug("group: leader withheld tasks still running elsewhere until their owners give them up",
				"generation", jresp.GenerationID, "withheld", out.Withheld)
		}
	}
	m.warmups.Store(int64(out.Warmups))
	m.unbalanced.Store(unbalanced(out.Tasks))
	assignments := make([]kafka.SyncGroupRequestAssignment, 0, len(out.Assignments))
	for id, ga := range out.Assignments {
		assignments = append(assignments, kafka.SyncGroupRequestAssignment{MemberID: id, Assignment: ga})
	}
	return assignments, nil
}

// logOffsets returns the first and the end offset of every partition of
// the state topic when some member reports held stores, so that the plan
// knows their lags; nil when none does or the offsets cannot be read
// (logged: the plan is then made without lags).
func (m *Member) logOffsets(ctx context.Context, members []joinedMember, counts map[string]int) (starts, ends map[int]int64) {
	held := false
	for _, jm := range members {
		held = held || len(jm.Sub.Held) > 0
	}
	n := counts[m.topics[0]]
	if !held || n == 0 {
		return nil, nil
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*n)
	for p := range n {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	lctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	resp, err := m.client.ListOffsets(lctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{m.topics[0]: reqs}})
	if err != nil {
		m.log.Warn("group: leader cannot read the end offsets of the state topic; planning without lags",
			"topic", m.topics[0], "err", err)
		return nil, nil
	}
	starts, ends = make(map[int]int64, n), make(map[int]int64, n)
	var failed []int
	var firstErr error
	for _, po := range resp.Topics[m.topics[0]] {
		if po.Error != nil || po.LastOffset < 0 {
			failed = append(failed, po.Partition)
			firstErr = cmp.Or(firstErr, po.Error)
			continue
		}
		ends[po.Partition] = po.LastOffset
		if po.FirstOffset >= 0 {
			starts[po.Partition] = po.FirstOffset
		}
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		m.log.Warn("group: leader cannot read some end offsets of the state topic; planning without the lags of those tasks",
			"topic", m.topics[0], "partitions", failed, "err", firstErr)
	}
	m.log.Debug("group: leader read the offsets of the state topic", "topic", m.topics[0], "starts", starts, "ends", ends)
	return starts, ends
}

// partitionCounts returns the partition count of every configured topic that
// exists.
func (m *Member) partitionCounts(ctx context.Context) (map[string]int, error) {
	md, err := m.client.Metadata(ctx, &kafka.MetadataRequest{Topics: m.topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	counts := make(map[string]int, len(md.Topics))
	for _, t := range md.Topics {
		switch {
		case t.Error == nil:
			counts[t.Name] = len(t.Partitions)
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
			// missing: the plan reports it
		default:
			return nil, fmt.Errorf("metadata of topic %q: %w", t.Name, t.Error)
		}
	}
	return counts, nil
}

// leave sends LeaveGroup, bounded by RebalanceTimeout, when
// Config.LeaveOnShutdown is set; otherwise the member stops as a static
// member that will come back (KIP-345). Rebalancing was already called by
// the time it runs.
func (m *Member) leave(ctx context.Context, memberID string) error {
	m.mu.Lock()
	m.gen.valid, m.live = false, false
	m.mu.Unlock()
	if memberID == "" {
		m.log.Info("group: stopped before joining")
		return nil
	}
	if !m.cfg.LeaveOnShutdown {
		m.log.Info("group: stopped without leaving the group (static member): its tasks wait for it until the session timeout; "+
			"use --leave-on-shutdown to scale down, or joiner leave to remove it", "member", memberID, "session_timeout", m.cfg.SessionTimeout)
		return nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RebalanceTimeout)
	defer cancel()
	err := leaveGroup(lctx, m.client, m.cfg.GroupID, kafka.LeaveGroupRequestMember{ID: memberID, GroupInstanceID: m.cfg.InstanceID})
	if errors.Is(err, kafka.UnknownMemberId) {
		// The coordinator dropped the member already (its session expired,
		// say while it stopped): what leaving is for is done.
		m.log.Info("group: the coordinator had already dropped this member; nothing to leave", "member", memberID)
		return nil
	}
	if err != nil {
		err = fmt.Errorf("group %q: leave (instance %q): %w", m.cfg.GroupID, m.cfg.InstanceID, err)
		m.log.Warn("group: leave failed; the coordinator drops the member after the session timeout", "err", err)
		return err
	}
	m.log.Info("group: left", "member", memberID)
	return nil
}

// Commit commits offsets (topic → partition → next offset to read, the
// Kafka convention) with the current generation, member id and instance id.
// It returns an error wrapping ErrRebalancing when the member holds no
// current generation or the coordinator says the generation is over; see
// ErrRebalancing. Safe for concurrent use with Run.
func (m *Member) Commit(ctx context.Context, offsets map[string]map[int]int64) error {
	m.mu.Lock()
	g := m.gen
	m.mu.Unlock()
	if !g.valid {
		return fmt.Errorf("group %q: commit: %w", m.cfg.GroupID, ErrRebalancing)
	}
	return m.commit(ctx, g, offsets)
}

func (m *Member) commit(ctx context.Context, g generation, offsets map[string]map[int]int64) error {
	topics := make(map[string][]kafka.OffsetCommit, len(offsets))
	for t, parts := range offsets {
		for p, off := range parts {
			topics[t] = append(topics[t], kafka.OffsetCommit{Partition: p, Offset: off})
		}
	}
	if len(topics) == 0 {
		return nil
	}
	resp, err := m.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{
		GroupID:      m.cfg.GroupID,
		GenerationID: int(g.id),
		MemberID:     g.memberID,
		InstanceID:   m.cfg.InstanceID,
		Topics:       topics,
	})
	if err != nil {
		return fmt.Errorf("group %q: commit generation %d: %w", m.cfg.GroupID, g.id, err)
	}
	var first error
	for t, parts := range resp.Topics {
		for _, p := range parts {
			if p.Error == nil {
				continue
			}
			if isRebalanceError(p.Error) {
				return fmt.Errorf("group %q: commit generation %d: %w: %w", m.cfg.GroupID, g.id, ErrRebalancing, p.Error)
			}
			if first == nil {
				first = fmt.Errorf("group %q: commit %s-%d: %w", m.cfg.GroupID, t, p.Partition, p.Error)
			}
		}
	}
	return first
}

// FetchOffsets returns the committed offsets (next offset to read) of the
// given partitions of topic, -1 for partitions with no committed offset.
func (m *Member) FetchOffsets(ctx context.Context, topic string, partitions []int) (map[int]int64, error) {
	out := make(map[int]int64, len(partitions))
	if len(partitions) == 0 {
		return out, nil
	}
	resp, err := m.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: m.cfg.GroupID,
		Topics:  map[string][]int{topic: partitions},
	})
	if err != nil {
		return nil, fmt.Errorf("group %q: fetch offsets of %q: %w", m.cfg.GroupID, topic, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("group %q: fetch offsets of %q: %w", m.cfg.GroupID, topic, resp.Error)
	}
	for _, p := range partitions {
		out[p] = -1
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("group %q: fetch offset of %s-%d: %w", m.cfg.GroupID, topic, p.Partition, p.Error)
		}
		if _, asked := out[p.Partition]; asked {
			out[p.Partition] = max(p.CommittedOffset, -1)
		}
	}
	return out, nil
}

// unbalanced reports whether the active task counts of a plan differ by
// more than one.
func unbalanced(tasks map[string][]int) bool {
	lo, hi := -1, 0
	for _, ts := range tasks {
		if lo < 0 || len(ts) < lo {
			lo = len(ts)
		}
		hi = max(hi, len(ts))
	}
	return lo >= 0 && hi-lo > 1
}
