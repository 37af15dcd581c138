package group

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// reverseAssignor gives task p of every topic to member M-1-p%M: a plan no
// registered assignor makes, so a test can see that the leader used it.
type reverseAssignor struct{ badMember, badPartition bool }

func (reverseAssignor) Name() string { return "reverse" }

func (r reverseAssignor) Plan(req PlanRequest) (Plan, error) {
	out := Plan{Assigned: map[string]map[string][]int{}}
	n := len(req.Members)
	for p := range req.Partitions {
		id := req.Members[n-1-p%n]
		if out.Assigned[id] == nil {
			out.Assigned[id] = map[string][]int{}
		}
		for _, t := range req.Topics {
			out.Assigned[id][t] = append(out.Assigned[id][t], p)
		}
	}
	if r.badMember {
		out.Assigned["ghost"] = map[string][]int{req.Topics[0]: {0}}
	}
	if r.badPartition {
		out.Assigned[req.Members[0]][req.Topics[0]] = append(out.Assigned[req.Members[0]][req.Topics[0]], req.Partitions)
	}
	return out, nil
}

// twoTopicsSixPartitions is a plan input over two topics of 6 partitions.
func twoTopicsSixPartitions(assignor string, n int) planInput {
	return planInput{Assignor: assignor, Topics: []string{"market", "notifications"},
		Counts: map[string]int{"market": 6, "notifications": 6}, Leader: "pod-0", Members: members(n, nil)}
}

// withAssignor registers a for the duration of the test: the one line a new
// assignor adds to registry.
func withAssignor(t *testing.T, a Assignor) {
	t.Helper()
	saved := registry
	registry = append(slices.Clone(registry), a)
	t.Cleanup(func() { registry = saved })
}

func TestRegistryNames(t *testing.T) {
	if got, want := AssignorNames(), []string{AssignorCopartition, AssignorRoundRobin, AssignorRange}; !reflect.DeepEqual(got, want) {
		t.Fatalf("AssignorNames() = %v, want %v", got, want)
	}
	if DefaultAssignor() != AssignorCopartition {
		t.Fatalf("DefaultAssignor() = %q", DefaultAssignor())
	}
	if got := AssignorList(); got != "copartition, roundrobin or range" {
		t.Fatalf("AssignorList() = %q", got)
	}
	for _, name := range append(AssignorNames(), "") {
		a, err := LookupAssignor(name)
		if err != nil || (name != "" && a.Name() != name) || (name == "" && a.Name() != DefaultAssignor()) {
			t.Errorf("LookupAssignor(%q) = %v, %v", name, a, err)
		}
	}
	if _, err := LookupAssignor("sticky"); err == nil || !strings.Contains(err.Error(), AssignorList()) {
		t.Errorf("LookupAssignor(sticky) error %v does not list the assignors", err)
	}
}

// TestRegisteredAssignorIsUsed adds an assignor to the registry and checks
// that Config validation accepts it and the leader plans with it.
func TestRegisteredAssignorIsUsed(t *testing.T) {
	cfg := Config{GroupID: "g", InstanceID: "pod-0", Topics: testTopicSet,
		Handler: &recorder{}, Brokers: []string{"127.0.0.1:1"}, Assignor: "reverse"}
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted an unregistered assignor")
	}
	withAssignor(t, reverseAssignor{})
	if _, err := New(cfg); err != nil {
		t.Fatalf("New with a registered assignor: %v", err)
	}
	in := twoTopicsSixPartitions("reverse", 3)
	out, err := computePlan(in)
	if err != nil || out.Err != nil {
		t.Fatalf("computePlan: %v, %v", err, out.Err)
	}
	owners := ownersByTopic(t, in, out)
	want := []string{"pod-2", "pod-1", "pod-0", "pod-2", "pod-1", "pod-0"}
	for _, topic := range in.Topics {
		if !reflect.DeepEqual(owners[topic], want) {
			t.Errorf("%s owners = %v, want %v", topic, owners[topic], want)
		}
	}
	if out.Moved != 6 { // nobody reported owning anything: the leader counts every task as moved
		t.Errorf("Moved = %d, want 6", out.Moved)
	}
}

// TestAssignorOutputChecked: the leader rejects a plan that names a member
// it did not plan for or a partition out of range, instead of sending it.
func TestAssignorOutputChecked(t *testing.T) {
	for name, a := range map[string]reverseAssignor{
		"unknown member":      {badMember: true},
		"partition too large": {badPartition: true},
	} {
		t.Run(name, func(t *testing.T) {
			withAssignor(t, a)
			in := twoTopicsSixPartitions("reverse", 2)
			if _, err := computePlan(in); err == nil {
				t.Fatal("computePlan accepted the plan")
			}
		})
	}
}
