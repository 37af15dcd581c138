package group

import (
	"fmt"
	"slices"

	"github.com/joiner-dev/joiner/copartition"
)

// AssignorCopartition gives each partition index (a task) of all topics to
// one member, balanced and sticky (the copartition planner), with the
// standbys, lag-aware placement and warm-ups of copartition.AssignWith.
const AssignorCopartition = "copartition"

type copartitionAssignor struct{}

func (copartitionAssignor) Name() string { return AssignorCopartition }

func (copartitionAssignor) Plan(req PlanRequest) (Plan, error) {
	out := Plan{Assigned: make(map[string]map[string][]int, len(req.Members)), CountsMoves: true}
	opt := copartition.Options{
		Standbys:              req.Standbys,
		PreviousStandby:       req.PreviousStandby,
		Lags:                  req.Lags,
		AcceptableRecoveryLag: req.AcceptableRecoveryLag,
		MaxWarmupReplicas:     req.MaxWarmupReplicas,
	}
	plan, err := copartition.AssignWith(req.Partitions, req.Members, req.Previous, opt)
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("planner rejected the reported owned tasks or options (%v); planned from scratch without them", err))
		plan, err = copartition.Assign(req.Partitions, req.Members, nil)
	}
	if err != nil {
		return Plan{}, err
	}
	for id, tasks := range plan.Assignment {
		byTopic := make(map[string][]int, len(req.Topics))
		for _, t := range req.Topics {
			byTopic[t] = slices.Clone(tasks)
		}
		out.Assigned[id] = byTopic
	}
	out.Moved = plan.Moved
	out.Standby, out.Warmup = plan.Standby, plan.Warmup
	return out, nil
}
