package group

import (
	"cmp"
	"errors"
	"fmt"
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
}

// planOutput is the leader's answer.
type planOutput struct {
	// Assignments is keyed by member id, one entry per member.
	Assignments map[string]kafka.GroupProtocolAssignment
	// Tasks is the list of Topics[0] partitions per instance id.
	Tasks map[string][]int
	// Moved is the number of Topics[0] partitions whose owner changed from
	// the owner reported in the subscriptions.
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
}

// computePlan is the leader's pure assignment computation.
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

	table := make([]Owner, len(members))
	index := make(map[string]uint32, len(members)) // instance id -> table index + 1
	ids := make([]string, len(members))
	for i, m := range members {
		table[i] = Owner{InstanceID: m.InstanceID, Addr: m.Sub.Addr}
		ids[i] = m.InstanceID
		if _, dup := index[m.InstanceID]; dup {
			return planOutput{}, fmt.Errorf("group: plan: instance id %q appears twice", m.InstanceID)
		}
		index[m.InstanceID] = uint32(i + 1)
	}

	partitions, unpaired, err := pairCounts(in.Topics, in.Counts)
	out.Partitions, out.Unpaired = partitions, unpaired
	if err != nil {
		out.Err = err
		ud, encErr := encodeAssignment(assignmentData{Leader: in.Leader, Members: table, Err: err.Error()})
		if encErr != nil {
			return planOutput{}, encErr
		}
		for _, m := range all {
			out.Assignments[m.MemberID] = kafka.GroupProtocolAssignment{AssignedPartitions: map[string][]int{}, UserData: ud}
		}
		return out, nil
	}
	if err := excludedAssignments(&out, in.Leader, out.Excluded); err != nil {
		return planOutput{}, err
	}
	if len(members) == 0 {
		return out, nil
	}

	// Previous owners, from the subscriptions, restricted to real tasks. A
	// task claimed by several members has no previous owner (as in
	// copartition.Assign).
	previous := make(map[string][]int, len(members))
	prevOwner := make([]string, partitions)
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
			out.Warnings = append(out.Warnings, fmt.Sprintf("member %q reported tasks outside [0, %d); ignored them", m.InstanceID, partitions))
		}
		if len(owned) > 0 {
			previous[m.InstanceID] = owned
		}
	}

	// perTopic[instance][topic] = partitions
	perTopic := make(map[string]map[string][]int, len(members))
	for _, id := range ids {
		perTopic[id] = map[string][]int{}
	}
	assignor, err := LookupAssignor(in.Assignor)
	if err != nil {
		return planOutput{}, fmt.Errorf("group: plan: %w", err)
	}
	plan, err := assignor.Plan(PlanRequest{Partitions: partitions, Topics: in.Topics, Members: ids, Previous: previous})
	if err != nil {
		return planOutput{}, fmt.Errorf("group: plan: %s: %w", assignor.Name(), err)
	}
	out.Warnings = append(out.Warnings, plan.Warnings...)
	for id, byTopic := range plan.Assigned {
		if _, ok := perTopic[id]; !ok {
			return planOutput{}, fmt.Errorf("group: plan: %s assigned partitions to unknown member %q", assignor.Name(), id)
		}
		for t, ps := range byTopic {
			if !slices.Contains(in.Topics, t) {
				return planOutput{}, fmt.Errorf("group: plan: %s assigned partitions of unknown topic %q", assignor.Name(), t)
			}
			for _, p := range ps {
				if p < 0 || p >= partitions {
					return planOutput{}, fmt.Errorf("group: plan: %s assigned partition %d of %q, outside [0, %d)", assignor.Name(), p, t, partitions)
				}
			}
			perTopic[id][t] = ps
		}
	}
	if plan.CountsMoves {
		out.Moved = plan.Moved
	}

	out.Moved += honorRefusals(perTopic, in.Topics, ids, refusedBy(members, partitions))
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

	ud, err := encodeAssignment(assignmentData{
		Moved:      out.Moved,
		Partitions: partitions,
		Leader:     in.Leader,
		Members:    table,
		Owners:     owners,
	})
	if err != nil {
		return planOutput{}, err
	}
	for _, m := range members {
		assigned := make(map[string][]int, len(in.Topics))
		for t, ps := range perTopic[m.InstanceID] {
			if len(ps) > 0 {
				assigned[t] = ps
			}
		}
		out.Assignments[m.MemberID] = kafka.GroupProtocolAssignment{AssignedPartitions: assigned, UserData: ud}
	}
	return out, nil
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
