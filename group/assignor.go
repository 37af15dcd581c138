package group

import (
	"fmt"
	"strings"
)

// Assignor is the leader's plan: which member gets which partitions of
// which topic. The leader calls it with the members that passed its checks
// and the partition count it can pair; it then honours the tasks members
// refused, builds the owner map and sends every member its part.
//
// To add an assignor, write one file with a type that implements it and
// add one line to registry (below). Config.Assignor, the --assignor
// flags of `joiner run` and `joiner demo`, and their validation all read
// the registry.
type Assignor interface {
	// Name is the protocol name sent in JoinGroup, and the value of
	// Config.Assignor and --assignor that selects it.
	Name() string
	// Plan assigns partitions [0, req.Partitions) of every topic in
	// req.Topics to req.Members. It does no I/O.
	Plan(req PlanRequest) (Plan, error)
}

// PlanRequest is what an Assignor plans from.
type PlanRequest struct {
	// Partitions is the number of tasks: every topic has partitions
	// [0, Partitions) to assign.
	Partitions int
	// Topics are the input topics, Config.Topics.Inputs(): the state topic (Market) first.
	Topics []string
	// Members are the instance ids to plan for, ascending and distinct;
	// at least one.
	Members []string
	// Previous maps an instance id to the tasks (partitions of Topics[0])
	// it reported owning, each in [0, Partitions). Two members may report
	// the same task.
	Previous map[string][]int

	// The high-availability inputs, as in copartition.Options; assignors
	// that do not place standbys ignore them. Standbys is the number of
	// standby copies per task (Config.Standbys of the leader);
	// PreviousStandby maps an instance id to the standby tasks it reported;
	// Lags maps an instance id to every task whose store it reported
	// holding and how many records that copy is behind the end of the
	// task's state partition (nil when the leader has no lag information);
	// AcceptableRecoveryLag and MaxWarmupReplicas are the leader's
	// Config values.
	Standbys              int
	PreviousStandby       map[string][]int
	Lags                  map[string]map[int]int64
	AcceptableRecoveryLag int64
	MaxWarmupReplicas     int
}

// Plan is an Assignor's answer.
type Plan struct {
	// Assigned maps an instance id to topic to partitions, ascending. A
	// member or topic absent from it gets nothing.
	Assigned map[string]map[string][]int
	// CountsMoves is true when Moved is the assignor's own count of the
	// tasks whose owner changed. When false the leader counts the
	// partitions of Topics[0] whose owner differs from the one reported in
	// the subscriptions.
	CountsMoves bool
	Moved       int
	// Warnings are problems the plan worked around, for the leader's log.
	Warnings []string

	// Standby maps an instance id to the tasks it keeps a standby copy of,
	// ascending; Warmup to the tasks it warms up a copy of (a task the
	// plan will move to it once the copy is caught up). Both nil for
	// assignors without standbys.
	Standby map[string][]int
	Warmup  map[string][]int
}

// registry lists the assignors Config.Assignor accepts; the first is the
// default. A new assignor is one file plus one line here.
var registry = []Assignor{
	copartitionAssignor{},
	roundRobinAssignor{},
	rangeAssignor{},
}

// DefaultAssignor is the name of the assignor used when Config.Assignor is
// empty.
func DefaultAssignor() string { return registry[0].Name() }

// AssignorNames returns the names of the registered assignors, the default
// first.
func AssignorNames() []string {
	names := make([]string, len(registry))
	for i, a := range registry {
		names[i] = a.Name()
	}
	return names
}

// AssignorList returns the registered names as an English list, for flag
// help and errors: "copartition, roundrobin or range".
func AssignorList() string {
	names := AssignorNames()
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// LookupAssignor returns the registered assignor called name; the empty
// name is the default. The error lists the registered names.
func LookupAssignor(name string) (Assignor, error) {
	if name == "" {
		return registry[0], nil
	}
	for _, a := range registry {
		if a.Name() == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown assignor %q (want %s)", name, AssignorList())
}
