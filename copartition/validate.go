// Package copartition plans which member of a consumer group owns which task.
//
// A task is a partition index p: the member that owns task p consumes
// partition p of every topic in a co-partition group. Validate checks that the
// topics of such a group can be joined partition by partition, and Assign
// computes a balanced, sticky assignment of tasks to members by the sticky
// co-partition recipe (see Assign for the exact rules).
//
// The package is pure: it imports no Kafka client and does no I/O except
// writing an explanation to a caller-supplied io.Writer (AssignExplain).
// Every result is deterministic: it depends only on the values passed in,
// never on the order of slices or the iteration order of maps, so every
// leader that runs it on the same subscriptions sends the same plan.
package copartition

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors. Each error returned by this package wraps exactly one of
// them, so callers can classify failures with errors.Is.
var (
	// ErrNotCopartitioned is returned by Validate when the topics do not
	// all have the same partition count. The error is a *CopartitionError.
	ErrNotCopartitioned = errors.New("not co-partitioned")

	// ErrNoTopics is returned by Validate for an empty topic map.
	ErrNoTopics = errors.New("no topics")

	// ErrBadCount is returned when a partition count is below 1, either a
	// topic's count in Validate or the partitions argument of Assign, or
	// above MaxPartitions.
	ErrBadCount = errors.New("bad partition count")

	// ErrDuplicateMember is returned by Assign when a member id occurs more
	// than once in members. The message names the member.
	ErrDuplicateMember = errors.New("duplicate member")

	// ErrNegativeTask is returned by Assign when previous claims a task
	// below 0. The message names the member and the task. (Claims of tasks
	// at or above the partition count are not an error; they are dropped.)
	ErrNegativeTask = errors.New("negative task")
)

// MaxPartitions is the largest partition count Validate and Assign accept.
// It bounds the memory a single plan can ask for (Assign allocates a few
// words per task); Kafka topics are orders of magnitude smaller.
const MaxPartitions = 1 << 24

// TopicCount is one topic and its partition count.
type TopicCount struct {
	Topic      string
	Partitions int
}

// CopartitionError reports topics whose partition counts differ. Topics is
// sorted by topic name. It unwraps to ErrNotCopartitioned.
type CopartitionError struct {
	Topics []TopicCount
}

// Error names every topic with its count and the task indexes that exist in
// some topics but not in all, for example
// "not co-partitioned: market has 6 partitions, notifications has 8 (indexes 6..7 have no pair)".
func (e *CopartitionError) Error() string {
	lo, hi := e.Topics[0].Partitions, e.Topics[0].Partitions
	var b strings.Builder
	b.WriteString(ErrNotCopartitioned.Error())
	b.WriteString(": ")
	for i, tc := range e.Topics {
		lo, hi = min(lo, tc.Partitions), max(hi, tc.Partitions)
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tc.Topic)
		b.WriteString(" has ")
		b.WriteString(strconv.Itoa(tc.Partitions))
		if i == 0 {
			if tc.Partitions == 1 {
				b.WriteString(" partition")
			} else {
				b.WriteString(" partitions")
			}
		}
	}
	if hi-lo == 1 {
		fmt.Fprintf(&b, " (index %d has no pair)", lo)
	} else {
		fmt.Fprintf(&b, " (indexes %d..%d have no pair)", lo, hi-1)
	}
	return b.String()
}

// Unwrap returns ErrNotCopartitioned.
func (e *CopartitionError) Unwrap() error { return ErrNotCopartitioned }

// Validate checks that topics, a map from topic name to partition count, can
// be joined task by task: it must be non-empty, every count must be in
// 1..MaxPartitions, and all counts must be equal. Unequal counts give a
// *CopartitionError naming every topic (sorted by name) with its count.
// A bad count is reported for the first offending topic in name order, so
// the error is deterministic.
func Validate(topics map[string]int) error {
	_, err := Partitions(topics)
	return err
}

// Partitions is Validate that also returns the common partition count of
// topics, i.e. the number of tasks.
func Partitions(topics map[string]int) (int, error) {
	if len(topics) == 0 {
		return 0, ErrNoTopics
	}
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkCount("topic "+strconv.Quote(name)+" has ", topics[name]); err != nil {
			return 0, err
		}
	}
	n := topics[names[0]]
	for _, name := range names[1:] {
		if topics[name] != n {
			e := &CopartitionError{Topics: make([]TopicCount, len(names))}
			for i, name := range names {
				e.Topics[i] = TopicCount{name, topics[name]}
			}
			return 0, e
		}
	}
	return n, nil
}

// checkCount rejects a partition count outside 1..MaxPartitions; prefix
// names what is counted ("topic \"x\" has ") or is empty.
func checkCount(prefix string, n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("%w: %s%d partitions, need at least 1", ErrBadCount, prefix, n)
	case n > MaxPartitions:
		return fmt.Errorf("%w: %s%d partitions, at most %d are supported", ErrBadCount, prefix, n, MaxPartitions)
	}
	return nil
}
