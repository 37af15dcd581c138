package group

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/segmentio/kafka-go"
)

// members builds n joined members pod-0..pod-(n-1) (member ids in reverse
// order, so nothing accidentally depends on them) owning the given tasks.
func members(n int, owned map[string][]int) []joinedMember {
	out := make([]joinedMember, n)
	for i := range n {
		id := fmt.Sprintf("pod-%d", i)
		out[i] = joinedMember{
			MemberID:   fmt.Sprintf("m-%d", n-i),
			InstanceID: id,
			Sub:        subscription{InstanceID: id, Addr: id + ":8080", Owned: owned[id]},
		}
	}
	return out
}

var fourMembersSixPartitions = planInput{
	Topics: []string{"market", "notifications"},
	Counts: map[string]int{"market": 6, "notifications": 6},
	Leader: "pod-0",
}

// ownersByTopic returns, per topic, the instance id owning each partition.
func ownersByTopic(t *testing.T, in planInput, out planOutput) map[string][]string {
	t.Helper()
	idOf := map[string]string{}
	for _, m := range in.Members {
		idOf[m.MemberID] = m.InstanceID
	}
	owners := map[string][]string{}
	for _, topic := range in.Topics {
		owners[topic] = make([]string, in.Counts[topic])
	}
	for mid, ga := range out.Assignments {
		for topic, ps := range ga.AssignedPartitions {
			if !slices.IsSorted(ps) {
				t.Errorf("%s: %s partitions %v not ascending", idOf[mid], topic, ps)
			}
			for _, p := range ps {
				if owners[topic][p] != "" {
					t.Fatalf("%s-%d assigned twice", topic, p)
				}
				owners[topic][p] = idOf[mid]
			}
		}
	}
	for topic, os := range owners {
		for p, o := range os {
			if o == "" {
				t.Fatalf("%s-%d unassigned", topic, p)
			}
		}
	}
	return owners
}

func TestPlanFourMembersSixPartitions(t *testing.T) {
	for _, tc := range []struct {
		assignor  string
		colocated bool
	}{
		{AssignorCopartition, true},
		{AssignorRange, true},
		{AssignorRoundRobin, false},
	} {
		t.Run(tc.assignor, func(t *testing.T) {
			in := fourMembersSixPartitions
			in.Assignor = tc.assignor
			in.Members = members(4, nil)
			out, err := computePlan(in)
			if err != nil || out.Err != nil {
				t.Fatal(err, out.Err)
			}
			owners := ownersByTopic(t, in, out)
			for p := range 6 {
				same := owners["market"][p] == owners["notifications"][p]
				if same != tc.colocated {
					t.Errorf("partition %d: market on %s, notifications on %s", p, owners["market"][p], owners["notifications"][p])
				}
			}
			// Every member decodes the same owner map, for market.
			for mid, ga := range out.Assignments {
				ad, err := decodeAssignment(ga.UserData)
				if err != nil {
					t.Fatal(err)
				}
				got := ad.owners()
				for p, o := range got {
					if o.InstanceID != owners["market"][p] || o.Addr != o.InstanceID+":8080" {
						t.Errorf("%s: owner of task %d = %+v, want %s", mid, p, o, owners["market"][p])
					}
				}
				if ad.Leader != "pod-0" || ad.Partitions != 6 || ad.Moved != out.Moved {
					t.Errorf("user data %+v", ad)
				}
			}
		})
	}
}

func TestPlanRoundRobinFlatList(t *testing.T) {
	in := fourMembersSixPartitions
	in.Assignor = AssignorRoundRobin
	in.Members = members(4, nil)
	out, err := computePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	owners := ownersByTopic(t, in, out)
	// market-0..5 then notifications-0..5, dealt to pod-0..pod-3 in turn.
	want := map[string][]string{
		"market":        {"pod-0", "pod-1", "pod-2", "pod-3", "pod-0", "pod-1"},
		"notifications": {"pod-2", "pod-3", "pod-0", "pod-1", "pod-2", "pod-3"},
	}
	if !reflect.DeepEqual(owners, want) {
		t.Errorf("owners = %v, want %v", owners, want)
	}
}

// TestPlanRangeMatchesKafkaGo compares the range assignor with kafka-go's
// RangeGroupBalancer run on the instance ids. (Its doc comment says 5
// partitions over 2 consumers give C0 [0 1 2]; its code gives C0 [0 1].)
func TestPlanRangeMatchesKafkaGo(t *testing.T) {
	for _, pm := range [][2]int{{5, 2}, {6, 4}, {6, 3}, {3, 5}, {7, 3}} {
		parts, n := pm[0], pm[1]
		in := planInput{Assignor: AssignorRange, Topics: []string{"a", "b"}, Counts: map[string]int{"a": parts, "b": parts}, Members: members(n, nil)}
		out, err := computePlan(in)
		if err != nil {
			t.Fatal(err)
		}
		var gms []kafka.GroupMember
		var tps []kafka.Partition
		for _, m := range in.Members {
			gms = append(gms, kafka.GroupMember{ID: m.InstanceID, Topics: in.Topics})
		}
		for _, topic := range in.Topics {
			for p := range parts {
				tps = append(tps, kafka.Partition{Topic: topic, ID: p})
			}
		}
		want := kafka.RangeGroupBalancer{}.AssignGroups(gms, tps)
		for _, m := range in.Members {
			got := out.Assignments[m.MemberID].AssignedPartitions
			for _, topic := range in.Topics {
				if !slices.Equal(got[topic], want[m.InstanceID][topic]) {
					t.Errorf("P=%d M=%d %s %s: got %v, kafka-go %v", parts, n, m.InstanceID, topic, got[topic], want[m.InstanceID][topic])
				}
			}
		}
	}
}

func TestPlanMovedNonSticky(t *testing.T) {
	in := fourMembersSixPartitions
	in.Assignor = AssignorRange
	in.Members = members(2, map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}})
	out, err := computePlan(in)
	if err != nil || out.Moved != 0 {
		t.Fatalf("unchanged group: moved %d, %v", out.Moved, err)
	}
	in.Members = members(3, map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}})
	out, _ = computePlan(in)
	// range 3: pod-0 [0 1], pod-1 [2 3], pod-2 [4 5]: 2, 4 and 5 change owner.
	if out.Moved != 3 {
		t.Errorf("moved = %d, want 3 (tasks %v)", out.Moved, out.Tasks)
	}
}

func TestPlanCopartitionUsesPlanner(t *testing.T) {
	owned := map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}}
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Members = members(3, owned)
	out, err := computePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := copartition.Assign(6, []string{"pod-0", "pod-1", "pod-2"}, owned)
	if err != nil {
		t.Fatal(err)
	}
	if out.Moved != want.Moved || !reflect.DeepEqual(out.Tasks, want.Assignment) {
		t.Errorf("plan = %v moved %d, planner says %v moved %d", out.Tasks, out.Moved, want.Assignment, want.Moved)
	}
	owners := ownersByTopic(t, in, out)
	if !reflect.DeepEqual(owners["market"], owners["notifications"]) {
		t.Errorf("not co-located: %v", owners)
	}
}

func TestPlanNotCopartitioned(t *testing.T) {
	for name, counts := range map[string]map[string]int{
		"missing":          {"market": 6},
		"no partitions":    {"market": 0, "notifications": 0},
		"missing and more": {"notifications": 8},
	} {
		in := planInput{Assignor: AssignorCopartition, Topics: fourMembersSixPartitions.Topics, Counts: counts, Leader: "pod-0", Members: members(2, nil)}
		out, err := computePlan(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out.Err == nil {
			t.Fatalf("%s: no planning error", name)
		}
		if name == "missing" && !strings.Contains(out.Err.Error(), "notifications") {
			t.Errorf("error does not name the missing topic: %v", out.Err)
		}
		if len(out.Assignments) != 2 {
			t.Fatalf("%s: %d assignments, want one per member", name, len(out.Assignments))
		}
		for mid, ga := range out.Assignments {
			if len(ga.AssignedPartitions) != 0 {
				t.Errorf("%s: %s got partitions %v", name, mid, ga.AssignedPartitions)
			}
			ad, err := decodeAssignment(ga.UserData)
			if err != nil || ad.Err != out.Err.Error() {
				t.Errorf("%s: user data %+v, %v", name, ad, err)
			}
		}
	}
}

func TestPlanCorruptSubscriptionOwnsNothing(t *testing.T) {
	good, _ := encodeSubscription(subscription{InstanceID: "pod-0", Owned: []int{0, 1, 2, 3, 4, 5}})
	jm := decodeMembers([]kafka.JoinGroupResponseMember{
		{ID: "m-1", GroupInstanceID: "pod-0", Metadata: kafka.GroupProtocolSubscription{UserData: good}},
		{ID: "m-2", GroupInstanceID: "pod-1", Metadata: kafka.GroupProtocolSubscription{UserData: []byte{1, 0xff, 0xff, 0xff}}},
	})
	if jm[1].SubErr == nil || jm[1].InstanceID != "pod-1" || len(jm[1].Sub.Owned) != 0 {
		t.Fatalf("corrupt member decoded as %+v", jm[1])
	}
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Members = jm
	out, err := computePlan(in)
	if err != nil || out.Err != nil {
		t.Fatal(err, out.Err)
	}
	if len(out.Tasks["pod-0"]) != 3 || len(out.Tasks["pod-1"]) != 3 {
		t.Errorf("tasks = %v, want 3 each", out.Tasks)
	}
}

func TestPlanIgnoresOutOfRangeOwned(t *testing.T) {
	in := fourMembersSixPartitions
	in.Assignor = AssignorCopartition
	in.Members = members(2, map[string][]int{"pod-0": {0, 7, 99}})
	out, err := computePlan(in)
	if err != nil || out.Err != nil {
		t.Fatal(err, out.Err)
	}
	if len(out.Warnings) != 1 {
		t.Errorf("warnings = %q", out.Warnings)
	}
}
