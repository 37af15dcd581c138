package group

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
)

// The partition count history: subscription version 4 (planned counts)
// and assignment version 3 (past counts).

func TestPartitionHistoryRoundTrip(t *testing.T) {
	s := subscription{InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 4}, Planned: []int{6, 8}}
	b, err := encodeSubscription(s)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != userDataVersionPlanned {
		t.Errorf("subscription version %d, want %d", b[0], userDataVersionPlanned)
	}
	got, err := decodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("subscription round trip: got %+v, want %+v", got, s)
	}
	a := testAssignmentData()
	a.Past = []int{3, 4}
	ab, err := encodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	if ab[0] != assignmentVersionPast {
		t.Errorf("assignment version %d, want %d", ab[0], assignmentVersionPast)
	}
	gotA, err := decodeAssignment(ab)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotA, a) {
		t.Errorf("assignment round trip: got %+v, want %+v", gotA, a)
	}
}

// Older members read what they know and ignore the history; without a
// history the blobs are byte for byte what older members write; a newer
// version's trailer after the history is ignored.
func TestPartitionHistoryCompatible(t *testing.T) {
	s := subscription{InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 4}, Live: true, Standby: []int{2}, Planned: []int{6}}
	b, err := encodeSubscription(s)
	if err != nil {
		t.Fatal(err)
	}
	old := s
	old.Planned = nil
	ob, err := encodeSubscription(old)
	if err != nil {
		t.Fatal(err)
	}
	if ob[0] != userDataVersionHA || !bytes.HasPrefix(b[1:], ob[1:]) {
		t.Fatalf("version 4 blob %x does not extend the version 3 one %x", b, ob)
	}
	asV3 := bytes.Clone(b)
	asV3[0] = userDataVersionHA
	if got, err := decodeSubscription(asV3); err != nil || !reflect.DeepEqual(got, old) {
		t.Errorf("as version 3: %+v, %v; want %+v", got, err, old)
	}
	newer := append(bytes.Clone(b), 0xff, 0x01)
	newer[0] = userDataVersionPlanned + 1
	if got, err := decodeSubscription(newer); err != nil || !reflect.DeepEqual(got, s) {
		t.Errorf("as version 5 with a trailer: %+v, %v; want %+v", got, err, s)
	}

	a := testAssignmentData()
	a.Past = []int{6}
	ab, err := encodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := encodeAssignment(testAssignmentData())
	if err != nil {
		t.Fatal(err)
	}
	if v1[0] != userDataVersion || !bytes.HasPrefix(ab[1:], v1[1:]) {
		t.Fatalf("version 3 blob %x does not start with the version 1 fields %x", ab, v1)
	}
	asV2 := bytes.Clone(ab)
	asV2[0] = assignmentVersionHA
	if got, err := decodeAssignment(asV2); err != nil || !reflect.DeepEqual(got, testAssignmentData()) {
		t.Errorf("as version 2: %+v, %v; want %+v", got, err, testAssignmentData())
	}
}

func TestPartitionHistoryRejects(t *testing.T) {
	for _, planned := range [][]int{{0, 6}, {-1}, make([]int, maxPlannedCounts+1)} {
		if len(planned) > maxPlannedCounts {
			for i := range planned {
				planned[i] = i + 1
			}
		}
		if _, err := encodeSubscription(subscription{InstanceID: "a", Planned: planned}); err == nil {
			t.Errorf("planned %v encoded", planned)
		}
		if _, err := encodeAssignment(assignmentData{Past: planned}); err == nil {
			t.Errorf("past %v encoded", planned)
		}
	}
	// A count of 0 in a blob: the history is ignored, the rest decodes.
	b, err := encodeSubscription(subscription{InstanceID: "a", Planned: []int{6}})
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 0
	if got, err := decodeSubscription(b); err != nil || got.InstanceID != "a" || got.Planned != nil {
		t.Errorf("a planned count 0: %+v, %v; want the history ignored", got, err)
	}
}

// The leader sends every member the counts below its plan's that any
// member reported.
func TestPlanSendsThePartitionHistory(t *testing.T) {
	ms := members(3, nil)
	ms[0].Sub.Planned = []int{6, 8}
	ms[1].Sub.Planned = []int{4, 6, 8}
	ms[2].Sub.Planned = []int{12} // a topic recreated with fewer partitions since
	out, err := computePlan(planInput{Assignor: AssignorCopartition, Topics: []string{"market", "notifications"},
		Counts: map[string]int{"market": 8, "notifications": 8}, Leader: "pod-0", Members: ms})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		ad, err := decodeAssignment(out.Assignments[m.MemberID].UserData)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ad.Past, []int{4, 6}) {
			t.Errorf("%s: past counts %v, want [4 6]", m.InstanceID, ad.Past)
		}
	}
}
