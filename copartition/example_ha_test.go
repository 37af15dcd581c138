package copartition_test

import (
	"fmt"

	"github.com/joiner-dev/joiner/copartition"
)

// A scale-out from A and B to A, B and C. Every member reports its copies;
// C holds an old copy of task 2, 20,000 records behind. Balance would move
// tasks 2 and 5 to C, which has no caught-up copy: they stay. Without
// standbys C warms up task 2 (one warm-up allowed); with one standby per
// task, C keeps standbys of 2 and 5, which warm them up instead.
func ExampleAssignWith() {
	opt := copartition.Options{
		Lags: map[string]map[int]int64{
			"A": {0: 0, 1: 0, 2: 0},
			"B": {3: 0, 4: 0, 5: 0},
			"C": {2: 20_000},
		},
		AcceptableRecoveryLag: 1_000,
		MaxWarmupReplicas:     1,
	}
	for _, k := range []int{0, 1} {
		opt.Standbys = k
		plan, err := copartition.AssignWith(6, []string{"A", "B", "C"},
			map[string][]int{"A": {0, 1, 2}, "B": {3, 4, 5}}, opt)
		if err != nil {
			panic(err)
		}
		fmt.Printf("K=%d: active %v moved %d, standby %v, warmup %v\n", k, plan.Assignment, plan.Moved, plan.Standby, plan.Warmup)
	}
	// Output:
	// K=0: active map[A:[0 1 2] B:[3 4 5] C:[]] moved 0, standby map[], warmup map[C:[2]]
	// K=1: active map[A:[0 1 2] B:[3 4 5] C:[]] moved 0, standby map[A:[3 4] B:[0 1] C:[2 5]], warmup map[]
}
