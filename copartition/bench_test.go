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
