package join

import (
	"context"
	"errors"
	"slices"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
	"github.com/segmentio/kafka-go"
)

// When partitions are added to both input topics (N to M), murmur2 sends
// most symbols to another partition: a moved symbol's ticks before the
// change are in market-(murmur2 % N), the task that held it, and its
// later ones in market-(murmur2 % M). Tasks below N keep their stores, so
// nothing is lost, but a lookup in the symbol's new task alone would miss
// its history (and, while producers switch over one by one, ticks still
// written to the old partition). So a lookup for a moved symbol also
// consults its task under every earlier count this worker planned with,
// and the as-of version is the newest of their as-of versions: every tick
// of the symbol is in one of those partitions.
//
// A notification that is not in its symbol's partition (misrouted, see
// joinInto) is looked up in its own partition's task too when that task
// is merged here: between the change and the group's replan, the
// notification may have been partitioned with the new count, whose ticks
// of its symbol are in that same partition.

// mapping returns the partition count of the current plan and the earlier
// counts this worker planned with (pastParts), oldest first.
func (w *Processor) mapping() (parts int, past []int) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return max(w.assignment.Partitions, 1), w.pastParts
}

// loadPartitionCounts reads the partition counts recorded in the state
// dirs (statestore.Manager.PartitionCounts): the last is the count of the
// last plan, the others past counts. A worker whose state dirs are new
// knows no past count.
func (w *Processor) loadPartitionCounts() {
	counts, err := w.cfg.Stores.PartitionCounts()
	if err != nil {
		w.log.Error("cannot read the partition counts planned before; lookups of symbols moved by an earlier partition change consult only their current task", "err", err)
		return
	}
	if len(counts) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastParts = counts[len(counts)-1]
	w.pastParts = slices.Clone(counts[:len(counts)-1])
	if len(w.pastParts) > 0 {
		w.log.Info("partition counts planned before", "past_counts", w.pastParts, "last", w.lastParts)
	}
}

// notePartitionsLocked records the partition count of an assignment and
// the counts the group planned with before it (group's
// Assignment.PastPartitions, from every member's state dirs): the group's
// past counts this worker did not know are added (a worker on new state
// dirs learns them); and when the count differs from the last one
// planned, the last one becomes a past count (consulted by lookups of
// moved symbols from now on), the change is logged and counted. Any
// change is recorded in the state dirs. w.mu is held.
func (w *Processor) notePartitionsLocked(partitions int, groupPast []int, planErr string) {
	if planErr != "" || partitions <= 0 {
		return
	}
	last := w.lastParts
	w.lastParts = partitions
	changed := last > 0 && last != partitions && !slices.Contains(w.pastParts, last)
	if changed {
		w.pastParts = append(slices.Clone(w.pastParts), last)
		w.metrics.PartitionChanges.Inc()
		w.log.Warn("the input topics' partition count changed: symbols moved to other tasks; a moved symbol's price is looked up in its new task and in the task that held it before, the newer as-of version wins",
			"from", last, "to", partitions, "past_counts", w.pastParts)
	}
	var learnt []int
	for _, n := range groupPast {
		if n > 0 && n < partitions && !slices.Contains(w.pastParts, n) && !slices.Contains(learnt, n) {
			learnt = append(learnt, n)
		}
	}
	if len(learnt) > 0 {
		w.pastParts = slices.Sorted(slices.Values(append(slices.Clone(w.pastParts), learnt...)))
		w.log.Info("partition counts the group planned with before, learnt from the group's assignment; lookups of symbols they moved consult those tasks too", "learnt", learnt, "past_counts", w.pastParts)
	}
	if last == partitions && len(learnt) == 0 {
		return
	}
	if err := w.cfg.Stores.RecordPartitionCounts(append(slices.Clone(w.pastParts), partitions)); err != nil {
		w.log.Error("cannot record the partition counts in the state dir; after a restart, lookups of symbols moved by this change would consult only their current task", "err", err)
	}
}

// PlannedPartitions returns the partition counts this worker's plans had
// so far, ascending: the past ones and the last. The group member reports
// them to the leader (group.Config.PartitionCounts), which hands the
// group's history to every member.
func (w *Processor) PlannedPartitions() []int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := slices.Clone(w.pastParts)
	if w.lastParts > 0 && !slices.Contains(out, w.lastParts) {
		out = append(out, w.lastParts)
	}
	slices.Sort(out)
	return out
}

// extraTasks returns the tasks other than q (symbol's task among parts)
// that may hold ticks of symbol, for a notification of task p: its task
// under each past count, and p itself when the notification is not in its
// symbol's partition and p's state is merged here (own).
func extraTasks(symbol string, q, p int, own bool, past []int) []int {
	var out []int
	add := func(c int) {
		if c != q && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, n := range past {
		add(murmur2.Partition([]byte(symbol), n))
	}
	if own && q != p {
		add(p)
	}
	return out
}

// newerJoin reports whether the join result b (from another task) beats a
// for the same notification: an as-of price beats a late one and a miss,
// the newer of two as-of prices wins, and of two late ones (both stores
// kept nothing at or before the time) the older.
func newerJoin(a, b *record.Alert) bool {
	rank := func(r record.Result) int {
		switch r {
		case record.ResultLocal, record.ResultRemote:
			return 2
		case record.ResultLate:
			return 1
		}
		return 0
	}
	ra, rb := rank(a.Result), rank(b.Result)
	switch {
	case ra != rb:
		return rb > ra
	case ra == 2:
		return b.PriceTsMs > a.PriceTsMs
	case ra == 1:
		return b.PriceTsMs < a.PriceTsMs
	}
	return false
}

// errRepartitioning fails a batch while both input topics have more
// partitions than the plan: the group is about to replan, and until then
// a notification written with the new count could miss a tick written
// with it too (in a partition no lookup under the old count asks).
var errRepartitioning = errors.New("the input topics have more partitions than the group planned; waiting for the replan")

// metadataClient is what checkGrowth needs of Config.Client: a
// *kafka.Client (whose Metadata is kafka-go's cached view, refreshed every
// few seconds). Fakes without it are never checked.
type metadataClient interface {
	Metadata(ctx context.Context, req *kafka.MetadataRequest) (*kafka.MetadataResponse, error)
}

// checkGrowth reads the input topics' partition counts (every progress
// interval, watchProgress). When both have more partitions than the
// current plan, joins wait for the replan (repartitioning), which the
// group leader starts when it sees the same (docs/group.md, metadata
// watch); the plan it makes is a partition change (notePartitionsLocked).
// Only both topics together: with one grown the plan stays (unpaired
// partitions).
func (w *Processor) checkGrowth(ctx context.Context) {
	mc, ok := w.cfg.Client.(metadataClient)
	if !ok {
		return
	}
	w.mu.RLock()
	parts, planned := w.assignment.Partitions, w.assigned && w.assignment.Error == ""
	w.mu.RUnlock()
	if !planned || parts <= 0 {
		return
	}
	res, err := mc.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{w.cfg.Topics.Market, w.cfg.Topics.Notifications}})
	if err != nil {
		return // the next round asks again; the leader's watch goes on too
	}
	counts := map[string]int{}
	for _, t := range res.Topics {
		if t.Error == nil {
			counts[t.Name] = len(t.Partitions)
		}
	}
	if counts[w.cfg.Topics.Market] > parts && counts[w.cfg.Topics.Notifications] > parts {
		w.noteGrowth(parts, counts)
	}
}

// noteGrowth records that both input topics were seen with more
// partitions (counts) than the plan of parts: joins wait for the replan.
// (Counts never shrink, and a new plan has another count: nothing resets
// it.)
func (w *Processor) noteGrowth(parts int, counts map[string]int) {
	if w.grownFrom.Swap(int64(parts)) != int64(parts) {
		w.log.Warn("partitions were added to both input topics; joins wait for the group's replan", "planned", parts, "counts", counts)
	}
}

// repartitioning reports whether the plan of parts partitions is known to
// be outdated (checkGrowth).
func (w *Processor) repartitioning(parts int) bool { return w.grownFrom.Load() == int64(parts) }
