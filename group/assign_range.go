package group

// AssignorRange assigns per topic, as kafka-go's RangeGroupBalancer does.
// It co-locates equal partition numbers but is not sticky.
const AssignorRange = "range"

type rangeAssignor struct{}

func (rangeAssignor) Name() string { return AssignorRange }

// Plan gives, per topic, member i of M (sorted by instance id) the
// partitions [i*P/M, (i+1)*P/M), as kafka-go's RangeGroupBalancer.
func (rangeAssignor) Plan(req PlanRequest) (Plan, error) {
	out := Plan{Assigned: make(map[string]map[string][]int, len(req.Members))}
	n := len(req.Members)
	for i, id := range req.Members {
		byTopic := make(map[string][]int, len(req.Topics))
		for _, t := range req.Topics {
			for p := i * req.Partitions / n; p < (i+1)*req.Partitions/n; p++ {
				byTopic[t] = append(byTopic[t], p)
			}
		}
		out.Assigned[id] = byTopic
	}
	return out, nil
}
