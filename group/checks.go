package group

import (
	"fmt"
	"slices"
	"strings"

	"github.com/segmentio/kafka-go"
)

// The leader's checks of the members and the topics, before it plans.
//
// A member whose subscription names other topics than the leader's, or
// whose user data is not a joiner subscription the leader understands
// (empty, or version 0), is excluded: it gets no partitions, and its
// assignment's Error starts with ExcludedPrefix and says why. A higher
// user-data version is planned: the format lets newer members add fields.
//
// Topics with unequal partition counts are planned over the indexes below
// the smallest count; the others are unpaired (counted in the leader's
// Assignment.Unpaired and logged as an ERROR), never planned, and nothing
// is deleted for them.

// ExcludedPrefix starts Assignment.Error when the leader excluded this
// member from the plan.
const ExcludedPrefix = "excluded by the group leader: "

// Excluded returns why the leader excluded this member from the plan, and
// whether it did.
func (a Assignment) Excluded() (string, bool) {
	return strings.CutPrefix(a.Error, ExcludedPrefix)
}

// screen returns the members the leader can plan and, for the others, why
// not (by member id).
func screen(topics []string, members []joinedMember) ([]joinedMember, map[string]string) {
	want := slices.Clone(topics)
	slices.Sort(want)
	var ok []joinedMember
	excluded := map[string]string{}
	for _, m := range members {
		if m.Protocol != "" {
			excluded[m.MemberID] = m.Protocol
			continue
		}
		if m.TopicsKnown {
			got := slices.Clone(m.Topics)
			slices.Sort(got)
			got = slices.Compact(got)
			if !slices.Equal(got, want) {
				excluded[m.MemberID] = fmt.Sprintf("member %q subscribes to topics %v, the leader to %v; give every member of the group the same --market-topic and --notifications-topic, or another --group",
					m.InstanceID, got, want)
				continue
			}
		}
		ok = append(ok, m)
	}
	return ok, excluded
}

// protocolProblem says why user data is not a subscription this leader
// understands, or "" when it is.
func protocolProblem(instance string, ud []byte) string {
	switch {
	case len(ud) == 0:
		return fmt.Sprintf("member %q sent no joiner subscription user data (another client in this group?); use another --group for it", instance)
	case ud[0] == 0:
		return fmt.Sprintf("member %q sent subscription user data version 0, which no joiner writes; use another --group for it", instance)
	}
	return ""
}

// pairCounts returns the number of co-partitioned tasks of topics (the
// smallest partition count) and how many partition indexes of the larger
// topics have no pair. A missing topic or a bad count is an error naming it.
func pairCounts(topics []string, counts map[string]int) (tasks, unpaired int, err error) {
	lo, hi := 0, 0
	for i, t := range topics {
		n, ok := counts[t]
		if !ok {
			return 0, 0, fmt.Errorf("topic %q does not exist", t)
		}
		if n <= 0 {
			return 0, 0, fmt.Errorf("topic %q has no partitions", t)
		}
		if i == 0 {
			lo, hi = n, n
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	if lo > maxTasks {
		return 0, 0, fmt.Errorf("topics have %d partitions, more than the %d supported", lo, maxTasks)
	}
	return lo, hi - lo, nil
}

// excludedAssignments gives each excluded member an empty assignment whose
// user data says why.
func excludedAssignments(out *planOutput, leader string, excluded map[string]string) error {
	for id, why := range excluded {
		ud, err := encodeAssignment(assignmentData{Leader: leader, Err: ExcludedPrefix + why})
		if err != nil {
			return err
		}
		out.Assignments[id] = kafka.GroupProtocolAssignment{AssignedPartitions: map[string][]int{}, UserData: ud}
	}
	return nil
}

// reportChecks logs, on the leader, the members it excluded and the
// partitions it could not pair.
func (m *Member) reportChecks(out planOutput, counts map[string]int, gen int) {
	for id, why := range out.Excluded {
		m.log.Error("group: leader: a member is excluded from the plan and gets no tasks",
			"generation", gen, "member", id, "reason", why)
	}
	if out.Unpaired > 0 {
		m.log.Error("group: leader: topics have unequal partition counts; planning only the co-partitioned tasks, the others are not processed until the counts are equal again",
			"generation", gen, "counts", counts, "tasks", out.Partitions, "unpaired_partitions", out.Unpaired)
	}
	m.unpaired.Store(int64(out.Unpaired))
}
