package group

import (
	"slices"
	"sort"
)

// AssignorRoundRobin deals every topic-partition from one flat list, as
// kafka-go's RoundRobinGroupBalancer does. It does not co-locate.
const AssignorRoundRobin = "roundrobin"

type roundRobinAssignor struct{}

func (roundRobinAssignor) Name() string { return AssignorRoundRobin }

// Plan deals one flat list of every topic-partition, topics by name and
// then partitions ascending, in turn to the members sorted by instance id
// (the Java RoundRobinAssignor's order).
func (roundRobinAssignor) Plan(req PlanRequest) (Plan, error) {
	out := Plan{Assigned: make(map[string]map[string][]int, len(req.Members))}
	for _, id := range req.Members {
		out.Assigned[id] = map[string][]int{}
	}
	topics := slices.Clone(req.Topics)
	sort.Strings(topics)
	topics = slices.Compact(topics)
	i := 0
	for _, t := range topics {
		for p := range req.Partitions {
			id := req.Members[i%len(req.Members)]
			out.Assigned[id][t] = append(out.Assigned[id][t], p)
			i++
		}
	}
	return out, nil
}
