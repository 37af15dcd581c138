package group

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/segmentio/kafka-go"
)

// joinedMember is one member of a JoinGroup response as the leader sees it.
type joinedMember struct {
	MemberID   string
	InstanceID string // the broker's group instance id, else the subscription's, else the member id
	Sub        subscription
	SubErr     error // the subscription user data did not decode: owns nothing
	// Topics is the member's subscription; TopicsKnown is false for members
	// built without one (tests), which are not checked.
	Topics      []string
	TopicsKnown bool
	// Protocol, when not empty, is why the member's user data is not a
	// subscription the leader understands: it is excluded.
	Protocol string
}

// planInput is everything the leader's computation depends on. It does no
// I/O, so it is tested without a broker.
type planInput struct {
	Assignor string
	Topics   []string       // Config.Topics.Inputs(): the state topic first
	Counts   map[string]int // partition count per topic, from metadata; a missing topic is unknown
	Leader   string         // instance id of the planning member
	Members  []joinedMember

	// The leader's high-availability configuration (Config.Standbys,
	// AcceptableRecoveryLag, MaxWarmupReplicas).
	Standbys              int
	AcceptableRecoveryLag int64
	MaxWarmupReplicas     int
	// Ends maps a task to the end offset of its state partition (the
	// offset of the next record), read by the leader before planning; nil
	// when unknown. With the members' held stores it gives the lags.
	Ends map[int]int64
	// Starts maps a task to the first offset its state partition still
	// holds: a member with no copy of the task is end - start behind.
	Starts map[int]int64
}

// planOutput is the leader's answer.
type planOutput struct {
	// Assignments is keyed by member id, one entry per member.
	Assignments map[string]kafka.GroupProtocolAssignment
	// Tasks is the list of Topics[0] partitions per instance id.
	Tasks map[string][]int
	// Moved is the number of Topics[0] partitions whose owner changed from
	// the owner reported in the subscriptions, without the withheld ones
	// (they are counted by the follow-up plan that assigns them).
	Moved int
	// Err is why the leader could not plan; every member then gets an empty
	// assignment carrying its text.
	Err error
	// Warnings are problems the plan worked around (e.g. a planner error on
	// the reported previous owners), for the leader's log.
	Warnings []string
	// Excluded says, per member id, why a member was left out of the plan.
	Excluded map[string]string
	// Partitions is the number of tasks planned; Unpaired the partition
	// indexes of the larger topics that have no pair (see pairCounts).
	Partitions, Unpaired int
	// Withheld are the tasks given to nobody in this generation because a
	// member other than their planned owner still runs them (cooperative
	// handover: it stops them, rejoins, and the next plan assigns them).
	Withheld []int
	// Standby and Warmup are the standby copies (warm-ups included) and
	// warm-up copies per instance id, as sent to the members.
	Standby, Warmup map[string][]int
	// Standbys and Warmups count them.
	Standbys, Warmups int
	// Lags are the copies' lags the plan used, by instance id (nil
	// without lag information).
	Lags map[string]map[int]int64
}

// computePlan is the leader's pure assignment computation: screen the
// members, pair the topics' counts, run the assignor on the previous
// owners and copies, apply the members' refusals and the cooperative
// handover, then encode each member's assignment.
func computePlan(in planInput) (planOutput, error) {
	if len(in.Topics) == 0 {
		return planOutput{}, errors.New("group: plan: no topics")
	}
	members := slices.Clone(in.Members)
	slices.SortFunc(members, func(a, b joinedMember) int {
		return cmp.Or(cmp.Compare(a.InstanceID, b.InstanceID), cmp.Compare(a.MemberID, b.MemberID))
	})
	out := planOutput{
		Assignments: make(map[string]kafka.GroupProtocolAssignment, len(members)),
		Tasks:       make(map[string][]int, len(members)),
	}
	if len(members) == 0 {
		return out, nil
	}
	all := members
	members, out.Excluded = screen(in.Topics, members)
	table, index, ids, err := memberTable(members)
	if err != nil {
		return planOutput{}, err
	}

	partitions, unpaired, err := pairCounts(in.Topics, in.Counts)
	out.Partitions, out.Unpaired = partitions, unpaired
	if err != nil {
		return unpairedPlan(out, in.Leader, table, all, err)
	}
	if err := excludedAssignments(&out, in.Leader, out.Excluded); err != nil {
		return planOutput{}, err
	}
	if len(members) == 0 {
		return out, nil
	}

	previous, prevOwner, warnings := previousOwners(members, partitions)
	out.Warnings = append(out.Warnings, warnings...)
	plan, perTopic, err := runAssignor(in, &out, members, ids, partitions, previous)
	if err != nil {
		return planOutput{}, err
	}
	if plan.CountsMoves {
		out.Moved = plan.Moved
	}

	refused := refusedBy(members, partitions)
	out.Moved += honorRefusals(perTopic, in.Topics, ids, refused)
	plannedFor := withhold(perTopic, in.Topics, liveOwners(members, partitions))
	out.Withheld = slices.Sorted(maps.Keys(plannedFor))
	owners := make([]uint32, partitions)
	for id, byTopic := range perTopic {
		for _, p := range byTopic[in.Topics[0]] {
			owners[p] = index[id]
		}
		out.Tasks[id] = byTopic[in.Topics[0]]
	}
	if !plan.CountsMoves {
		for p, o := range owners {
			if o == 0 || table[o-1].InstanceID != prevOwner[p] {
				out.Moved++
			}
		}
	}
	// A withheld task moves in the follow-up generation, whose plan counts
	// it (it has no owner then); counting it here too would count every
	// handed-over task twice over the two generations.
	out.Moved = max(0, out.Moved-len(out.Withheld))

	keepWithheldStandbys(&plan, plannedFor, members)
	out.Standby, out.Warmup = copies(plan, owners, index, refused, partitions)
	for _, ts := range out.Standby {
		out.Standbys += len(ts)
	}
	for _, ts := range out.Warmup {
		out.Warmups += len(ts)
	}
	if err := encodeAssignments(&out, in, members, table, owners, perTopic, partitions); err != nil {
		return planOutput{}, err
	}
	return out, nil
}

// memberTable is the owner table of the plan (the members in order), the
// table index + 1 of each instance id, and the instance ids; an instance
// id given twice is an error.
func memberTable(members []joinedMember) (table []Owner, index map[string]uint32, ids []string, err error) {
	table = make([]Owner, len(members))
	index = make(map[string]uint32, len(members)) // instance id -> table index + 1
	ids = make([]string, len(members))
	for i, m := range members {
		table[i] = Owner{InstanceID: m.InstanceID, Addr: m.Sub.Addr}
		ids[i] = m.InstanceID
		if _, dup := index[m.InstanceID]; dup {
			return nil, nil, nil, fmt.Errorf("group: plan: instance id %q appears twice", m.InstanceID)
		}
		index[m.InstanceID] = uint32(i + 1)
	}
	return table, index, ids, nil
}

// unpairedPlan is the plan when the topics' counts cannot be paired:
// every member, excluded ones included, gets an empty assignment carrying
// err's text.
func unpairedPlan(out planOutput, leader string, table []Owner, all []joinedMember, err error) (planOutput, error) {
	out.Err = err
	ud, encErr := encodeAssignment(assignmentData{Leader: leader, Members: table, Err: err.Error()})
	if encErr != nil {
		return planOutput{}, encErr
	}
	for _, m := range all {
		out.Assignments[m.MemberID] = kafka.GroupProtocolAssignment{AssignedPartitions: map[string][]int{}, UserData: ud}
	}
	return out, nil
}

// previousOwners are the tasks each member reported owning, restricted to
// real tasks, and each task's previous owner. A task claimed by several
// members has no previous owner (as in copartition.Assign).
func previousOwners(members []joinedMember, partitions int) (previous map[string][]int, prevOwner []string, warnings []string) {
	previous = make(map[string][]int, len(members))
	prevOwner = make([]string, partitions)
	const contested = "\x00contested"
	for _, m := range members {
		var owned []int
		for _, p := range m.Sub.Owned {
			if p >= 0 && p < partitions {
				owned = append(owned, p)
				if prevOwner[p] == "" {
					prevOwner[p] = m.InstanceID
				} else {
					prevOwner[p] = contested
				}
			}
		}
		if len(owned) != len(m.Sub.Owned) {
			warnings = append(warnings, fmt.Sprintf("member %q reported tasks outside [0, %d); ignored them", m.InstanceID, partitions))
		}
		if len(owned) > 0 {
			previous[m.InstanceID] = owned
		}
	}
	return previous, prevOwner, warnings
}

// runAssignor runs in.Assignor and checks its plan: partitions of known
// topics, within [0, partitions), to known members. It returns the plan
// and its partitions by instance and topic (perTopic[instance][topic]),
// and records the copies' lags and the assignor's warnings in out.
func runAssignor(in planInput, out *planOutput, members []joinedMember, ids []string, partitions int, previous map[string][]int) (Plan, map[string]map[string][]int, error) {
	perTopic := make(map[string]map[string][]int, len(members))
	for _, id := range ids {
		perTopic[id] = map[string][]int{}
	}
	assignor, err := LookupAssignor(in.Assignor)
	if err != nil {
		return Plan{}, nil, fmt.Errorf("group: plan: %w", err)
	}
	prevStandby, lags := haInputs(members, partitions, in.Starts, in.Ends, in.AcceptableRecoveryLag)
	out.Lags = lags
	plan, err := assignor.Plan(PlanRequest{
		Partitions: partitions, Topics: in.Topics, Members: ids, Previous: previous,
		Standbys: in.Standbys, PreviousStandby: prevStandby, Lags: lags,
		AcceptableRecoveryLag: in.AcceptableRecoveryLag, MaxWarmupReplicas: in.MaxWarmupReplicas,
	})
	if err != nil {
		return Plan{}, nil, fmt.Errorf("group: plan: %s: %w", assignor.Name(), err)
	}
	out.Warnings = append(out.Warnings, plan.Warnings...)
	for id, byTopic := range plan.Assigned {
		if _, ok := perTopic[id]; !ok {
			return Plan{}, nil, fmt.Errorf("group: plan: %s assigned partitions to unknown member %q", assignor.Name(), id)
		}
		for t, ps := range byTopic {
			if !slices.Contains(in.Topics, t) {
				return Plan{}, nil, fmt.Errorf("group: plan: %s assigned partitions of unknown topic %q", assignor.Name(), t)
			}
			for _, p := range ps {
				if p < 0 || p >= partitions {
					return Plan{}, nil, fmt.Errorf("group: plan: %s assigned partition %d of %q, outside [0, %d)", assignor.Name(), p, t, partitions)
				}
			}
			perTopic[id][t] = ps
		}
	}
	return plan, perTopic, nil
}

// keepWithheldStandbys: the planned owner of a withheld task keeps its
// standby copy of it, if it has one, until the task reaches it.
func keepWithheldStandbys(plan *Plan, plannedFor map[int]string, members []joinedMember) {
	for p, id := range plannedFor {
		for _, m := range members {
			if m.InstanceID == id && slices.Contains(m.Sub.Standby, p) {
				if plan.Standby == nil {
					plan.Standby = map[string][]int{}
				}
				plan.Standby[id] = append(slices.Clone(plan.Standby[id]), p)
			}
		}
	}
}

// encodeAssignments sets out.Assignments: each member's partitions and
// the user data (owner table, owners, its standby and warm-up copies, the
// past partition counts).
func encodeAssignments(out *planOutput, in planInput, members []joinedMember, table []Owner, owners []uint32, perTopic map[string]map[string][]int, partitions int) error {
	past := pastCounts(members, partitions)
	for _, m := range members {
		ud, err := encodeAssignment(assignmentData{
			Moved:      out.Moved,
			Partitions: partitions,
			Leader:     in.Leader,
			Members:    table,
			Owners:     owners,
			Standby:    out.Standby[m.InstanceID],
			Warmup:     out.Warmup[m.InstanceID],
			Past:       past,
		})
		if err != nil {
			return err
		}
		assigned := make(map[string][]int, len(in.Topics))
		for t, ps := range perTopic[m.InstanceID] {
			if len(ps) > 0 {
				assigned[t] = ps
			}
		}
		out.Assignments[m.MemberID] = kafka.GroupProtocolAssignment{AssignedPartitions: assigned, UserData: ud}
	}
	return nil
}

// pastCounts returns the partition counts below partitions that any
// member reported having been planned with (subscription version 4),
// ascending: the group's partition count history, which every member
// receives (Assignment.PastPartitions). Counts at or above partitions are
// left out (a topic recreated with fewer partitions: their tasks do not
// exist).
func pastCounts(members []joinedMember, partitions int) []int {
	var past []int
	for _, m := range members {
		for _, n := range m.Sub.Planned {
			if n >= 1 && n < partitions {
				past = append(past, n)
			}
		}
	}
	past = normalizeTasks(past)
	if len(past) > maxPlannedCounts {
		past = past[len(past)-maxPlannedCounts:]
	}
	return past
}

// haInputs collects the standbys the members reported and, when the end
// offsets are known, the lag of every copy they hold: max(0, end - next
// offset the copy lacks), by instance id. A member without a copy of a
// task is as far behind as the partition is long (end - start): when that
// is at most acceptable, it counts as a caught-up copy too, so a task with
// little history moves at once instead of warming up (with the start
// unknown, no such entry is made). Tasks outside [0, partitions) are
// dropped; lags is nil when no member holds a copy with a known end.
func haInputs(members []joinedMember, partitions int, starts, ends map[int]int64, acceptable int64) (prevStandby map[string][]int, lags map[string]map[int]int64) {
	defer func() {
		if lags == nil {
			return
		}
		for _, m := range members {
			for t := range partitions {
				start, okS := starts[t]
				end, okE := ends[t]
				if !okS || !okE || end-start > acceptable {
					continue
				}
				if _, has := lags[m.InstanceID][t]; has {
					continue
				}
				if lags[m.InstanceID] == nil {
					lags[m.InstanceID] = map[int]int64{}
				}
				lags[m.InstanceID][t] = max(0, end-start)
			}
		}
	}()
	for _, m := range members {
		for _, t := range m.Sub.Standby {
			if t < partitions {
				if prevStandby == nil {
					prevStandby = map[string][]int{}
				}
				prevStandby[m.InstanceID] = append(prevStandby[m.InstanceID], t)
			}
		}
		for t, next := range m.Sub.Held {
			end, ok := ends[t]
			if !ok || t >= partitions {
				continue
			}
			if lags == nil {
				lags = map[string]map[int]int64{}
			}
			if lags[m.InstanceID] == nil {
				lags[m.InstanceID] = map[int]int64{}
			}
			lags[m.InstanceID][t] = max(0, end-next)
		}
	}
	return prevStandby, lags
}

// liveOwners returns, per task below partitions, the instance ids of the
// members that report running it (owned tasks of a live subscription).
func liveOwners(members []joinedMember, partitions int) map[int][]string {
	out := map[int][]string{}
	for _, m := range members {
		if !m.Sub.Live {
			continue
		}
		for _, t := range m.Sub.Owned {
			if t >= 0 && t < partitions {
				out[t] = append(out[t], m.InstanceID)
			}
		}
	}
	return out
}

// withhold is the first phase of the cooperative handover (as in KIP-429):
// a task of the state topic planned for member X while another member
// still runs it (live) is given to nobody in this generation, in every
// topic X would have received it in. The member running it sees it
// missing from its assignment, stops it, commits its final offsets and
// rejoins at once; in that follow-up rebalance nobody runs it any more and
// the plan gives it to its new owner. A task whose previous owner left or
// crashed (nobody reports it live) is assigned directly. It returns the
// withheld tasks and the member each was planned for.
func withhold(perTopic map[string]map[string][]int, topics []string, live map[int][]string) map[int]string {
	if len(live) == 0 {
		return nil
	}
	out := map[int]string{}
	for id, byTopic := range perTopic {
		var mine []int
		for _, p := range byTopic[topics[0]] {
			if slices.ContainsFunc(live[p], func(o string) bool { return o != id }) {
				mine = append(mine, p)
			}
		}
		for _, p := range mine {
			out[p] = id
			for _, t := range topics {
				byTopic[t] = slices.DeleteFunc(byTopic[t], func(q int) bool { return q == p })
			}
		}
	}
	return out
}

// copies returns the plan's standby copies (warm-ups included) and warm-up
// copies per instance id, without those of a task the member owns (after
// refusals moved tasks) or refused.
func copies(plan Plan, owners []uint32, index map[string]uint32, refused map[string][]int, partitions int) (standby, warmup map[string][]int) {
	keep := func(id string, ts []int) []int {
		var out []int
		for _, t := range ts {
			if t >= 0 && t < partitions && owners[t] != index[id] && !slices.Contains(refused[id], t) {
				out = append(out, t)
			}
		}
		return out
	}
	for id, ts := range plan.Warmup {
		if _, ok := index[id]; !ok {
			continue
		}
		if w := keep(id, ts); len(w) > 0 {
			if warmup == nil {
				warmup = map[string][]int{}
			}
			warmup[id] = normalizeTasks(w)
		}
	}
	for id := range index {
		s := keep(id, append(slices.Clone(plan.Standby[id]), warmup[id]...))
		if len(s) > 0 {
			if standby == nil {
				standby = map[string][]int{}
			}
			standby[id] = normalizeTasks(s)
		}
	}
	return standby, warmup
}

// checkCounts returns the number of co-partitioned tasks of topics (the
// smallest count; see pairCounts), or an error naming a missing topic.
func checkCounts(topics []string, counts map[string]int) (int, error) {
	p, _, err := pairCounts(topics, counts)
	return p, err
}

// decodeMembers turns a JoinGroup response's members into joinedMembers.
// Undecodable user data is recorded in SubErr and means "owns nothing".
func decodeMembers(members []kafka.JoinGroupResponseMember) []joinedMember {
	out := make([]joinedMember, 0, len(members))
	for _, jm := range members {
		m := joinedMember{MemberID: jm.ID, InstanceID: jm.GroupInstanceID,
			Topics: jm.Metadata.Topics, TopicsKnown: len(jm.Metadata.Topics) > 0}
		sub, err := decodeSubscription(jm.Metadata.UserData)
		if err != nil {
			m.SubErr = err
		} else {
			m.Sub = sub
		}
		if m.InstanceID == "" {
			m.InstanceID = cmp.Or(m.Sub.InstanceID, m.MemberID)
		}
		m.Protocol = protocolProblem(m.InstanceID, jm.Metadata.UserData)
		out = append(out, m)
	}
	return out
}
