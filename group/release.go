package group

import (
	"slices"
)

// Releasing tasks. A member that cannot run a task (its store is unusable
// in every state dir) calls Release: the task leaves the owned list of its
// subscription and goes into a refused list, and the member rejoins, so the
// leader plans again and gives the task to a member that did not refuse it.
//
// The refused list travels in the subscription user data as version 2: the
// version 1 fields, then
//
//	nRefused  uvarint (at most maxTasks)
//	refused   nRefused uvarints, encoded as the owned tasks are
//
// A version 1 leader ignores it (the format lets newer members append
// fields). Version 1 is still written when nothing is refused.

const userDataVersionRefused = 2

// errReleased makes the heartbeat loop rejoin after Release: the
// generation is not lost, the member rejoins at once (rejoinNow).
var errReleased error = rejoinNow("group: a task this member cannot run was released")

// Release stops claiming task: it is not reported as owned, it is reported
// as refused, and the member rejoins the group at the next heartbeat so
// that the leader moves it. A refusal lasts until Run returns. Safe for
// concurrent use.
func (m *Member) Release(task int) {
	m.mu.Lock()
	if m.refused == nil {
		m.refused = map[int]bool{}
	}
	m.refused[task] = true
	m.released = true
	m.mu.Unlock()
	m.log.Warn("group: releasing a task this member cannot run; rejoining so that the leader moves it", "task", task)
	select {
	case m.rejoinCh() <- struct{}{}:
	default:
	}
}

func (m *Member) rejoinCh() chan struct{} {
	m.rejoinOnce.Do(func() { m.rejoin = make(chan struct{}, 1) })
	return m.rejoin
}

// refusedTasks returns the released tasks, ascending.
func (m *Member) refusedTasks() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.refused))
	for t := range m.refused {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// withoutRefused drops the released tasks from owned.
func (m *Member) withoutRefused(owned []int) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.refused) == 0 {
		return owned
	}
	return slices.DeleteFunc(slices.Clone(owned), func(t int) bool { return m.refused[t] })
}

// honorRefusals moves every task given to a member that refused it to the
// member with the fewest tasks that did not refuse it (ties: smaller id),
// in every topic. A task every member refused stays unassigned. It returns
// the number of tasks moved.
func honorRefusals(perTopic map[string]map[string][]int, topics []string, ids []string, refused map[string][]int) int {
	if len(refused) == 0 || len(topics) == 0 {
		return 0
	}
	state := topics[0]
	moved := 0
	for _, id := range ids {
		for _, t := range refused[id] {
			held := false
			for _, topic := range topics {
				held = held || slices.Contains(perTopic[id][topic], t)
			}
			if !held {
				continue
			}
			best := ""
			for _, other := range ids {
				if other == id || slices.Contains(refused[other], t) {
					continue
				}
				if best == "" || len(perTopic[other][state]) < len(perTopic[best][state]) {
					best = other
				}
			}
			for _, topic := range topics {
				if !slices.Contains(perTopic[id][topic], t) {
					continue // with roundrobin, another member holds t of this topic
				}
				perTopic[id][topic] = slices.DeleteFunc(perTopic[id][topic], func(p int) bool { return p == t })
				if best != "" {
					ps := append(perTopic[best][topic], t)
					slices.Sort(ps)
					perTopic[best][topic] = ps
				}
			}
			moved++
		}
	}
	return moved
}

// refusedBy collects the members' refused tasks below partitions, by
// instance id.
func refusedBy(members []joinedMember, partitions int) map[string][]int {
	out := map[string][]int{}
	for _, m := range members {
		for _, t := range m.Sub.Refused {
			if t >= 0 && t < partitions {
				out[m.InstanceID] = append(out[m.InstanceID], t)
			}
		}
	}
	return out
}
