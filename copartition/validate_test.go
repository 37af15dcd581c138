package copartition

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		topics map[string]int
		want   string // "" means valid
		is     error
	}{
		{"equal", map[string]int{"market": 6, "notifications": 6}, "", nil},
		{"single topic", map[string]int{"market": 1}, "", nil},
		{"more notifications than market partitions", map[string]int{"notifications": 8, "market": 6},
			"not co-partitioned: market has 6 partitions, notifications has 8 (indexes 6..7 have no pair)", ErrNotCopartitioned},
		{"one index without pair", map[string]int{"b": 7, "a": 6},
			"not co-partitioned: a has 6 partitions, b has 7 (index 6 has no pair)", ErrNotCopartitioned},
		{"three topics", map[string]int{"c": 4, "a": 4, "b": 6},
			"not co-partitioned: a has 4 partitions, b has 6, c has 4 (indexes 4..5 have no pair)", ErrNotCopartitioned},
		{"singular", map[string]int{"x": 1, "y": 3},
			"not co-partitioned: x has 1 partition, y has 3 (indexes 1..2 have no pair)", ErrNotCopartitioned},
		{"bytewise order", map[string]int{"b": 2, "B": 3},
			"not co-partitioned: B has 3 partitions, b has 2 (index 2 has no pair)", ErrNotCopartitioned},
		{"no topics", map[string]int{}, "no topics", ErrNoTopics},
		{"nil map", nil, "no topics", ErrNoTopics},
		{"zero", map[string]int{"x": 0}, `bad partition count: topic "x" has 0 partitions, need at least 1`, ErrBadCount},
		{"negative first by name", map[string]int{"z": -1, "y": -2, "a": 3},
			`bad partition count: topic "y" has -2 partitions, need at least 1`, ErrBadCount},
		{"too many", map[string]int{"x": MaxPartitions + 1},
			`bad partition count: topic "x" has 16777217 partitions, at most 16777216 are supported`, ErrBadCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.topics)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate(%v) = %v, want nil", tt.topics, err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate(%v) = %v, want %q", tt.topics, err, tt.want)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
		})
	}
}

func TestCopartitionErrorAs(t *testing.T) {
	err := Validate(map[string]int{"market": 6, "notifications": 8})
	var ce *CopartitionError
	if !errors.As(err, &ce) {
		t.Fatalf("errors.As(%v, *CopartitionError) = false", err)
	}
	want := []TopicCount{{"market", 6}, {"notifications", 8}}
	if len(ce.Topics) != 2 || ce.Topics[0] != want[0] || ce.Topics[1] != want[1] {
		t.Errorf("Topics = %v, want %v", ce.Topics, want)
	}
}

func TestPartitions(t *testing.T) {
	n, err := Partitions(map[string]int{"market": 12, "notifications": 12})
	if n != 12 || err != nil {
		t.Errorf("Partitions = %d, %v; want 12, nil", n, err)
	}
}
