package copartition

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The recipe's worked trace (docs/planner.md): W crashed, Z is new.
func TestAssignTraceMemberCrashedAndNew(t *testing.T) {
	previous := map[string][]int{"W": {0, 1, 2}, "X": {3, 4, 5, 6}, "Y": {7, 8}}
	var b strings.Builder
	plan, err := AssignExplain(9, []string{"X", "Y", "Z"}, previous, &b)
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{Assignment: map[string][]int{"X": {3, 4, 5}, "Y": {2, 7, 8}, "Z": {0, 1, 6}}, Moved: 4}
	if !reflect.DeepEqual(plan, want) {
		t.Errorf("plan = %v, want %v", plan, want)
	}
	const trace = `P = 9, M = 3 -> floor 3, remainder 0: every target is 3
current: X=[3,4,5,6] Y=[7,8] Z=[]
orphans (W left): 0,1,2
shed: X has 4 > 3, gives up its highest id: 6
pool = [0,1,2,6]
fill 0 -> Z (owns 0, fewest; next Y owns 2)
fill 1 -> Z (owns 1, fewest; next Y owns 2)
fill 2 -> Y (owns 2, ties with Z, smaller id wins)
fill 6 -> Z (owns 2, the only one below target)
result: X=[3,4,5] Y=[2,7,8] Z=[0,1,6]
moved = 4 (0,1,2,6)
`
	if b.String() != trace {
		t.Errorf("explanation:\n%s\nwant:\n%s", b.String(), trace)
	}
	plain, err := Assign(9, []string{"X", "Y", "Z"}, previous)
	if err != nil || !reflect.DeepEqual(plain, want) {
		t.Errorf("Assign = %v, %v; want %v", plain, err, want)
	}
}

func TestExplainExtrasUnownedDropped(t *testing.T) {
	previous := map[string][]int{"W": {0, 1, 2, 9}, "X": {3, 4, 5, 6, 9, 20, 20}, "Y": {7, 8, 0}, "my pod": {}}
	var b strings.Builder
	if _, err := AssignExplain(11, []string{"Z", "X", "Y", "my pod"}, previous, &b); err != nil {
		t.Fatal(err)
	}
	const trace = `P = 11, M = 4 -> floor 2, remainder 3: extras to the members that own the most: X (owns 4), Y (owns 2), Z (owns 0)
targets: X=3 Y=3 Z=3 "my pod"=2
current: X=[3,4,5,6] Y=[7,8] Z=[] "my pod"=[]
orphans (W left): 1,2
unowned (never claimed): 10
unowned (claimed by more than one member): 0,9
dropped claims (task >= 11): X:20
shed: X has 4 > 3, gives up its highest id: 6
pool = [0,1,2,6,9,10]
fill 0 -> Z (owns 0, ties with "my pod", smaller id wins)
fill 1 -> "my pod" (owns 0, fewest; next Z owns 1)
fill 2 -> Z (owns 1, ties with "my pod", smaller id wins)
fill 6 -> "my pod" (owns 1, fewest; next Y owns 2)
fill 9 -> Y (owns 2, ties with Z, smaller id wins)
fill 10 -> Z (owns 2, the only one below target)
result: X=[3,4,5] Y=[7,8,9] Z=[0,2,10] "my pod"=[1,6]
moved = 6 (0,1,2,6,9,10)
`
	if b.String() != trace {
		t.Errorf("explanation:\n%s\nwant:\n%s", b.String(), trace)
	}
}

func TestExplainNoMembers(t *testing.T) {
	var b strings.Builder
	if _, err := AssignExplain(3, nil, map[string][]int{"W": {0}}, &b); err != nil {
		t.Fatal(err)
	}
	if want := "P = 3, M = 0 -> no members: empty plan\nmoved = 0\n"; b.String() != want {
		t.Errorf("explanation = %q, want %q", b.String(), want)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestExplainWriteError(t *testing.T) {
	plan, err := AssignExplain(2, []string{"A"}, nil, failWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("err = %v, want the write error", err)
	}
	if len(plan.Assignment["A"]) != 2 {
		t.Errorf("plan = %v, want a valid plan with the write error", plan)
	}
}

// Each "precise addition" of the contract, and each step of the recipe.
func TestAssignRules(t *testing.T) {
	tests := []struct {
		name     string
		p        int
		members  []string
		previous map[string][]int
		want     map[string][]int
		moved    int
	}{
		{"ids compare bytewise: B < a < b", 4, []string{"b", "B", "a"}, nil,
			map[string][]int{"B": {0, 3}, "a": {1}, "b": {2}}, 4},
		{"no previous owner counts as moved", 3, []string{"X"}, nil,
			map[string][]int{"X": {0, 1, 2}}, 3},
		{"claim >= P is dropped", 2, []string{"X", "Y"}, map[string][]int{"X": {0, 5}},
			map[string][]int{"X": {0}, "Y": {1}}, 1},
		{"dropped claims do not count towards the extras", 3, []string{"X", "Y"},
			map[string][]int{"X": {7, 8, 9}, "Y": {0}},
			map[string][]int{"X": {1}, "Y": {0, 2}}, 2},
		{"task claimed twice is unowned and moved", 2, []string{"X", "Y"},
			map[string][]int{"X": {0, 1}, "Y": {0}},
			map[string][]int{"X": {1}, "Y": {0}}, 1},
		{"claimed by a member and a departed one is unowned", 2, []string{"X", "Y"},
			map[string][]int{"X": {0}, "W": {0, 1}},
			map[string][]int{"X": {0}, "Y": {1}}, 2},
		{"a member listing a task twice still owns it", 2, []string{"X", "Y"},
			map[string][]int{"X": {0, 0}, "Y": {1, 1}},
			map[string][]int{"X": {0}, "Y": {1}}, 0},
		{"no members gives an empty plan", 3, nil, map[string][]int{"W": {0, 1, 2}},
			map[string][]int{}, 0},
		{"extras go to the heaviest, ties to the smaller id", 7, []string{"A", "B", "C"},
			map[string][]int{"A": {0}, "B": {1, 2, 3}, "C": {4, 5, 6}},
			map[string][]int{"A": {0, 6}, "B": {1, 2, 3}, "C": {4, 5}}, 1},
		{"shed the highest ids first", 4, []string{"X", "Y"}, map[string][]int{"X": {3, 0, 2, 1}},
			map[string][]int{"X": {0, 1}, "Y": {2, 3}}, 2},
		{"more members than tasks", 2, []string{"A", "B", "C"}, map[string][]int{"C": {1}},
			map[string][]int{"A": {0}, "B": {}, "C": {1}}, 1},
		{"fill stops at the target, not at equal counts", 5, []string{"X", "Y"},
			map[string][]int{"X": {0, 1, 2}, "Y": {3}},
			map[string][]int{"X": {0, 1, 2}, "Y": {3, 4}}, 1},
		{"orphans go to the pool", 4, []string{"X", "Y"},
			map[string][]int{"X": {0, 1}, "W": {2, 3}},
			map[string][]int{"X": {0, 1}, "Y": {2, 3}}, 2},
		{"nothing changes when nothing has to", 4, []string{"X", "Y"},
			map[string][]int{"X": {1, 3}, "Y": {0, 2}},
			map[string][]int{"X": {1, 3}, "Y": {0, 2}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Assign(tt.p, tt.members, tt.previous)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plan.Assignment, tt.want) || plan.Moved != tt.moved {
				t.Errorf("Assign = %v moved %d, want %v moved %d", plan.Assignment, plan.Moved, tt.want, tt.moved)
			}
			for id, tasks := range plan.Assignment {
				if tasks == nil {
					t.Errorf("Assignment[%q] is nil, want an empty slice", id)
				}
			}
		})
	}
}

func TestAssignErrors(t *testing.T) {
	tests := []struct {
		name     string
		p        int
		members  []string
		previous map[string][]int
		want     string
		is       error
	}{
		{"duplicate member", 3, []string{"X", "Y", "X"}, nil, `duplicate member "X"`, ErrDuplicateMember},
		{"negative task", 3, []string{"X"}, map[string][]int{"W": {1, -1, -4}},
			`negative task: previous owner "W" claims task -4`, ErrNegativeTask},
		{"zero partitions", 0, []string{"X"}, nil, "bad partition count: 0 partitions, need at least 1", ErrBadCount},
		{"negative partitions, no members", -2, nil, nil, "bad partition count: -2 partitions, need at least 1", ErrBadCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			_, err := AssignExplain(tt.p, tt.members, tt.previous, &b)
			if err == nil || err.Error() != tt.want || !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %q wrapping %v", err, tt.want, tt.is)
			}
			if b.Len() != 0 {
				t.Errorf("explanation written on error: %q", b.String())
			}
		})
	}
}

func TestAssignDoesNotModifyInput(t *testing.T) {
	members := []string{"b", "a"}
	previous := map[string][]int{"a": {3, 1}}
	if _, err := Assign(4, members, previous); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(members, []string{"b", "a"}) || !reflect.DeepEqual(previous, map[string][]int{"a": {3, 1}}) {
		t.Errorf("inputs modified: %v %v", members, previous)
	}
}
