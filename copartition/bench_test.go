package copartition

import (
	"fmt"
	"testing"
)

// benchInput builds the benchmark inputs: p tasks owned round-robin by m
// members named member-00000.., of which every churnEvery-th has left and
// been replaced by a new member; churnEvery 0 means from scratch, no previous
// owners at all.
func benchInput(p, m, churnEvery int) ([]string, map[string][]int) {
	members := make([]string, m)
	previous := map[string][]int{}
	if churnEvery == 0 {
		for i := range members {
			members[i] = fmt.Sprintf("member-%05d", i)
		}
		return members, previous
	}
	for i := range members {
		id := fmt.Sprintf("member-%05d", i)
		for t := i; t < p; t += m {
			previous[id] = append(previous[id], t)
		}
		if i%churnEvery == 0 {
			id = fmt.Sprintf("joiner-%05d", i)
		}
		members[i] = id
	}
	return members, previous
}

func BenchmarkAssign(b *testing.B) {
	for _, bc := range []struct {
		name        string
		p, m, every int
	}{
		{"1M×2000/churn1%", 1_000_000, 2000, 100},
		{"1M×2000/scratch", 1_000_000, 2000, 0},
		{"100k×1000/churn1%", 100_000, 1000, 100},
		{"100k×1000/scratch", 100_000, 1000, 0},
	} {
		members, previous := benchInput(bc.p, bc.m, bc.every)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				plan, err := Assign(bc.p, members, previous)
				if err != nil {
					b.Fatal(err)
				}
				if bc.every != 0 && plan.Moved != bc.p/bc.every {
					b.Fatalf("moved %d, want %d", plan.Moved, bc.p/bc.every)
				}
			}
		})
	}
}

// BenchmarkAssignWith is the churn benchmark with one standby per task:
// every member kept the standby of the tasks of the next member, and with
// lags every member reports a copy of its tasks (lag 0) and of its
// standbys (lag 50).
func BenchmarkAssignWith(b *testing.B) {
	for _, bc := range []struct {
		name string
		p, m int
		lags bool
	}{
		{"1M×2000/churn1%/standby1", 1_000_000, 2000, false},
		{"1M×2000/churn1%/standby1+lags", 1_000_000, 2000, true},
		{"100k×1000/churn1%/standby1+lags", 100_000, 1000, true},
	} {
		members, previous := benchInput(bc.p, bc.m, 100)
		opt := Options{Standbys: 1, PreviousStandby: map[string][]int{}, AcceptableRecoveryLag: DefaultAcceptableRecoveryLag, MaxWarmupReplicas: DefaultMaxWarmupReplicas}
		if bc.lags {
			opt.Lags = map[string]map[int]int64{}
		}
		for i := range bc.m {
			id := fmt.Sprintf("member-%05d", i)
			next := fmt.Sprintf("member-%05d", (i+1)%bc.m)
			opt.PreviousStandby[next] = previous[id]
			if bc.lags {
				if opt.Lags[id] == nil {
					opt.Lags[id] = map[int]int64{}
				}
				if opt.Lags[next] == nil {
					opt.Lags[next] = map[int]int64{}
				}
				for _, t := range previous[id] {
					opt.Lags[id][t] = 0
					opt.Lags[next][t] = 50
				}
			}
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				plan, err := AssignWith(bc.p, members, previous, opt)
				if err != nil {
					b.Fatal(err)
				}
				if plan.Moved != bc.p/100 {
					b.Fatalf("moved %d, want %d", plan.Moved, bc.p/100)
				}
			}
		})
	}
}
