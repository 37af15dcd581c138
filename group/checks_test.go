package group

import (
	"slices"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

// Unequal counts: the tasks below the smaller count are planned as usual
// (sticky, co-located), the rest are counted as unpaired.
func TestPlanUnequalCountsPlansPairedTasks(t *testing.T) {
	for _, counts := range []map[string]int{
		{"market": 6, "notifications": 8},
		{"market": 9, "notifications": 6},
	} {
		in := planInput{Assignor: AssignorCopartition, Topics: fourMembersSixPartitions.Topics, Counts: counts, Leader: "pod-0",
			Members: members(2, map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}})}
		out, err := computePlan(in)
		if err != nil || out.Err != nil {
			t.Fatal(err, out.Err)
		}
		hi := max(counts["market"], counts["notifications"])
		if out.Partitions != 6 || out.Unpaired != hi-6 {
			t.Errorf("%v: %d tasks, %d unpaired; want 6 and %d", counts, out.Partitions, out.Unpaired, hi-6)
		}
		if !slices.Equal(out.Tasks["pod-0"], []int{0, 1, 2}) || !slices.Equal(out.Tasks["pod-1"], []int{3, 4, 5}) || out.Moved != 0 {
			t.Errorf("%v: plan %v moved %d, want the previous owners kept", counts, out.Tasks, out.Moved)
		}
		for mid, ga := range out.Assignments {
			for topic, ps := range ga.AssignedPartitions {
				if len(ps) > 0 && ps[len(ps)-1] >= 6 {
					t.Errorf("%v: %s got %s %v beyond the paired tasks", counts, mid, topic, ps)
				}
			}
		}
	}
}

func joinMember(id, instance string, topics []string, ud []byte) kafka.JoinGroupResponseMember {
	return kafka.JoinGroupResponseMember{ID: id, GroupInstanceID: instance,
		Metadata: kafka.GroupProtocolSubscription{Topics: topics, UserData: ud}}
}

// A member subscribed to other topics, or speaking no joiner user data, is
// excluded: no partitions, and its assignment says why; the others share
// every task.
func TestPlanExcludesForeignMembers(t *testing.T) {
	sub := func(id string) []byte {
		b, err := encodeSubscription(subscription{InstanceID: id})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	newer := append(sub("pod-3"), 0x7f) // a newer version with a field we do not know
	newer[0] = 2
	jm := decodeMembers([]kafka.JoinGroupResponseMember{
		joinMember("m-0", "pod-0", []string{"market", "notifications"}, sub("pod-0")),
		joinMember("m-1", "pod-1", []string{"prices", "notifications"}, sub("pod-1")),
		joinMember("m-2", "pod-2", []string{"notifications", "market"}, nil),
		joinMember("m-3", "pod-3", []string{"notifications", "market"}, newer),
		joinMember("m-4", "pod-4", []string{"market", "notifications"}, []byte{0, 1}),
	})
	out, err := computePlan(planInput{Assignor: AssignorCopartition, Topics: fourMembersSixPartitions.Topics, Counts: fourMembersSixPartitions.Counts, Leader: "pod-0", Members: jm})
	if err != nil || out.Err != nil {
		t.Fatal(err, out.Err)
	}
	if len(out.Tasks["pod-0"])+len(out.Tasks["pod-3"]) != 6 || len(out.Tasks["pod-0"]) != 3 {
		t.Errorf("tasks = %v, want pod-0 and pod-3 sharing all 6", out.Tasks)
	}
	for _, id := range []string{"m-1", "m-2", "m-4"} {
		ga, ok := out.Assignments[id]
		if !ok {
			t.Fatalf("%s has no assignment", id)
		}
		if len(ga.AssignedPartitions) != 0 {
			t.Errorf("%s got %v", id, ga.AssignedPartitions)
		}
		ad, err := decodeAssignment(ga.UserData)
		if err != nil {
			t.Fatal(err)
		}
		a := Assignment{Error: ad.Err}
		why, excluded := a.Excluded()
		if !excluded || why != out.Excluded[id] {
			t.Errorf("%s: assignment error %q, want the exclusion %q", id, ad.Err, out.Excluded[id])
		}
	}
	if why := out.Excluded["m-1"]; !strings.Contains(why, "[notifications prices]") || !strings.Contains(why, "[market notifications]") {
		t.Errorf("reason %q does not name both topic lists", why)
	}
	if len(out.Excluded) != 3 {
		t.Errorf("excluded %v, want m-1, m-2 and m-4", out.Excluded)
	}
}

// Refused tasks go to a member that did not refuse them; a task every
// member refused stays unassigned.
func TestPlanHonorsRefusedTasks(t *testing.T) {
	ms := members(2, map[string][]int{"pod-0": {0, 1, 2}, "pod-1": {3, 4, 5}})
	ms[0].Sub.Refused = []int{1, 4}
	ms[1].Sub.Refused = []int{4}
	out, err := computePlan(planInput{Assignor: AssignorCopartition, Topics: fourMembersSixPartitions.Topics, Counts: fourMembersSixPartitions.Counts, Leader: "pod-0", Members: ms})
	if err != nil || out.Err != nil {
		t.Fatal(err, out.Err)
	}
	if slices.Contains(out.Tasks["pod-0"], 1) || !slices.Contains(out.Tasks["pod-1"], 1) {
		t.Errorf("task 1, refused by pod-0, planned as %v", out.Tasks)
	}
	if slices.Contains(out.Tasks["pod-0"], 4) || slices.Contains(out.Tasks["pod-1"], 4) {
		t.Errorf("task 4, refused by both, planned as %v", out.Tasks)
	}
	for mid, ga := range out.Assignments {
		if !slices.Equal(ga.AssignedPartitions["market"], ga.AssignedPartitions["notifications"]) {
			t.Errorf("%s: not co-located: %v", mid, ga.AssignedPartitions)
		}
	}
}

func TestSubscriptionRefusedRoundTrip(t *testing.T) {
	in := subscription{InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 3}, Refused: []int{2, 7}}
	b, err := encodeSubscription(in)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != userDataVersionRefused {
		t.Errorf("version %d, want %d with refused tasks", b[0], userDataVersionRefused)
	}
	out, err := decodeSubscription(b)
	if err != nil || !slices.Equal(out.Refused, in.Refused) || !slices.Equal(out.Owned, in.Owned) {
		t.Fatalf("decoded %+v, %v; want %+v", out, err, in)
	}
	plain, _ := encodeSubscription(subscription{InstanceID: "pod-1"})
	if plain[0] != userDataVersion {
		t.Errorf("version %d without refused tasks, want 1", plain[0])
	}
}

// With roundrobin a member holds partition t of one topic only: a refusal
// moves just that one, and every topic-partition stays assigned once.
func TestPlanHonorsRefusedTasksRoundRobin(t *testing.T) {
	ms := members(2, nil)
	ms[0].Sub.Refused = []int{0, 1, 2, 3, 4}
	// 5 partitions: the flat list deals pod-0 market 0,2,4 and
	// notifications 1,3.
	in := planInput{Assignor: AssignorRoundRobin, Topics: fourMembersSixPartitions.Topics, Counts: map[string]int{"market": 5, "notifications": 5}, Leader: "pod-0", Members: ms}
	out, err := computePlan(in)
	if err != nil || out.Err != nil {
		t.Fatal(err, out.Err)
	}
	owners := ownersByTopic(t, in, out) // fails on a partition assigned twice
	for topic, os := range owners {
		for p, o := range os {
			if o != "pod-1" {
				t.Errorf("%s-%d owned by %q, want pod-1 (pod-0 refused every task)", topic, p, o)
			}
		}
	}
}
