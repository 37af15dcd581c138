package main

import (
	"fmt"
	"math"

	"github.com/joiner-dev/joiner/loadgen"
	"github.com/joiner-dev/joiner/record"
)

// backlogRunID is the --run-id of the drain backlog's `joiner loadgen`.
const backlogRunID = "bench"

// workerID is the --instance-id of the i-th joiner worker (from 0) of a
// drain or latency round; joiner writes it in every alert.
func workerID(i int) string { return fmt.Sprintf("w%d", i+1) }

// alertSize sizes the passthrough-alertsize contestant: the mean size of
// the backlog's notification values and of the alerts joiner-1w writes for
// them, and the padding that makes a copied notification as large as its
// alert on average.
type alertSize struct {
	Notification, Alert float64 // mean value sizes, bytes
	Pad                 int     // round(Alert − Notification), at least 0
}

// backlogAlertSize computes alertSize for the backlog `joiner loadgen`
// produces with these counts, backlogRunID and --notification-bytes
// notificationBytes: every notification of it (loadgen.NotificationValue),
// and the alert one worker (workerID(0)) writes for it, spliced from the
// notification's bytes as joiner does (record.AlertEncoder): result
// "local" with its symbol's last price (loadgen.LastPrices; a miss, no
// price, when there are no ticks), and tsMs as both notification_ts_ms and
// price_ts_ms (13 digits for any time between 2001 and 2286).
func backlogAlertSize(symbols, ticksPerSymbol, notificationsPerSymbol, notificationBytes int, tsMs int64) alertSize {
	syms := loadgen.Symbols(symbols)
	prices := loadgen.LastPrices(symbols, ticksPerSymbol, 0)
	cfg := loadgen.Config{NotificationBytes: notificationBytes}
	enc := record.NewAlertEncoder(workerID(0))
	dec := record.NewDecoder(record.Fields{}, 1<<20)
	var nBytes, aBytes, count int64
	var buf, fields []byte
	for k := range notificationsPerSymbol {
		for i := range syms {
			n := loadgen.NotificationOf(backlogRunID, syms, i, k)
			v := loadgen.NotificationValue(cfg, &n, int(count))
			nv, err := dec.Notification(v)
			if err != nil {
				panic(fmt.Sprintf("bench: loadgen wrote a notification joiner refuses: %s: %v", v, err))
			}
			result := record.ResultMiss
			fields = fields[:0]
			if prices != nil {
				fields, result = record.AppendPriceFields(fields, prices[i], tsMs), record.ResultLocal
			}
			buf = enc.AppendPriced(buf[:0], &nv, tsMs, fields, result)
			nBytes += int64(len(v))
			aBytes += int64(len(buf))
			count++
		}
	}
	if count == 0 {
		return alertSize{}
	}
	s := alertSize{Notification: float64(nBytes) / float64(count), Alert: float64(aBytes) / float64(count)}
	s.Pad = max(0, int(math.Round(s.Alert-s.Notification)))
	return s
}
