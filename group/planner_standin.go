package group

// This file stands in for package copartition until it lands. Delete it then
// and define planner in plan.go as
//
//	var planner = taskPlanner{validate: copartition.Validate, assign: ...copartition.Assign...}
//
// It is deliberately not the sticky recipe: it only keeps the package
// buildable and testable (plannerIsStandIn lets the stickiness tests skip).

import (
	"fmt"
	"sort"
	"strings"
)

const plannerIsStandIn = true

var planner = taskPlanner{
	validate: func(topics map[string]int) error {
		names := make([]string, 0, len(topics))
		for t := range topics {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names[1:] {
			if topics[t] != topics[names[0]] {
				parts := make([]string, len(names))
				for i, n := range names {
					parts[i] = fmt.Sprintf("%s has %d partitions", n, topics[n])
				}
				return fmt.Errorf("topics are not co-partitioned: %s", strings.Join(parts, ", "))
			}
		}
		return nil
	},
	assign: func(partitions int, members []string, previous map[string][]int) (taskPlan, error) {
		sorted := append([]string(nil), members...)
		sort.Strings(sorted)
		prev := map[int]string{}
		for _, m := range sorted {
			for _, p := range previous[m] {
				if _, ok := prev[p]; !ok {
					prev[p] = m
				}
			}
		}
		plan := taskPlan{Assignment: make(map[string][]int, len(sorted))}
		for _, m := range sorted {
			plan.Assignment[m] = []int{}
		}
		for p := range partitions {
			m := sorted[p%len(sorted)]
			plan.Assignment[m] = append(plan.Assignment[m], p)
			if prev[p] != m {
				plan.Moved++
			}
		}
		return plan, nil
	},
}
