package join

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Offset resets. A fetch answered OFFSET_OUT_OF_RANGE means the log no
// longer holds the offset a reader wanted (retention deleted it, or the
// topic was recreated): the reader goes on from the first offset the log
// holds, and the records in between are lost to this group. That is
// counted (joiner_offset_resets_total{topic}) and logged at WARN with both
// offsets.
//
// A task's readers (taskEnv.reader) report their resets to the worker
// through fetch.Reader's OnReset callback.

func (w *Processor) registerOffsetResets(reg prometheus.Registerer) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "joiner_offset_resets_total",
		Help: "Fetches answered OFFSET_OUT_OF_RANGE, by topic: the reader jumped to the first offset the log still holds and the records in between were never processed (data loss).",
	}, []string{"topic"})
	reg.MustRegister(c)
	c.WithLabelValues(w.topics.Market)
	c.WithLabelValues(w.topics.Notifications)
	w.offsetResets = c
}

// offsetReset is a task reader's fetch.ResetFunc: it jumped from offset
// from to offset to.
func (w *taskEnv) offsetReset(topic string, partition int, from, to int64) {
	if w.offsetResets != nil {
		w.offsetResets.WithLabelValues(topic).Inc()
	}
	w.log.Warn("offset out of range (retention or a recreated topic); continuing from the first offset the log holds: the records in between are not processed",
		"topic", topic, "partition", partition, "offset", from, "first_offset", to, "records_lost", max(to-from, 0))
}
