package join

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Offset resets. A fetch answered OFFSET_OUT_OF_RANGE means the log no
// longer holds the offset a reader wanted (retention deleted it, or the
// topic was recreated): the reader goes on from the first offset the log
// holds, and the records in between are lost to this group. That is
// counted (joiner_offset_resets_total{topic}) and logged at WARN with both
// offsets.
//
// Partition readers are built by the task code with newPartitionReader,
// which knows only the worker's Client (a Fetcher); the worker registers its reporter
// for that Client here.

var offsetResetReporters sync.Map // Fetcher → *offsetResetReporter

type offsetResetReporter struct {
	counter *prometheus.CounterVec
	log     *slog.Logger
}

func (w *Processor) registerOffsetResets(reg prometheus.Registerer) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "joiner_offset_resets_total",
		Help: "Fetches answered OFFSET_OUT_OF_RANGE, by topic: the reader jumped to the first offset the log still holds and the records in between were never processed (data loss).",
	}, []string{"topic"})
	reg.MustRegister(c)
	c.WithLabelValues(w.cfg.Topics.Market)
	c.WithLabelValues(w.cfg.Topics.Notifications)
	offsetResetReporters.Store(w.cfg.Client, &offsetResetReporter{counter: c, log: w.log})
}

// forgetOffsetResets drops the worker's reporter; called when Run ends.
func (w *Processor) forgetOffsetResets() { offsetResetReporters.Delete(w.cfg.Client) }

// reportOffsetReset is called by a partition reader that jumped from
// offset from to offset to.
func reportOffsetReset(c Fetcher, topic string, partition int, from, to int64) {
	v, ok := offsetResetReporters.Load(c)
	if !ok {
		slog.Default().Warn("offset out of range; continuing from the first offset the log holds",
			"topic", topic, "partition", partition, "offset", from, "first_offset", to, "records_lost", max(to-from, 0))
		return
	}
	r := v.(*offsetResetReporter)
	r.counter.WithLabelValues(topic).Inc()
	r.log.Warn("offset out of range (retention or a recreated topic); continuing from the first offset the log holds: the records in between are not processed",
		"topic", topic, "partition", partition, "offset", from, "first_offset", to, "records_lost", max(to-from, 0))
}
