package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/loadgen"
)

// TestBacklogAlertSize checks the sizes against a count made by hand from
// the alert format: an alert is its notification's JSON without the
// closing brace, then `,"notification_ts_ms":` and 13 digits, (with a
// price) `,"price":` and the price, `,"price_ts_ms":` and 13 digits, then
// `,"result":"local"` (or "miss") and `,"worker":"w1"}`.
func TestBacklogAlertSize(t *testing.T) {
	const ts = 1764500000000 // 13 digits
	// One symbol, one tick, one notification, written out.
	note := `{"id":"nbench-BBCA-0","user":"u0","symbol":"BBCA","text":"BBCA moved"}`
	price := strconv.FormatFloat(loadgen.LastPrices(1, 1, 0)[0], 'f', -1, 64)
	alert := strings.TrimSuffix(note, "}") + `,"notification_ts_ms":1764500000000,"price":` + price + `,"price_ts_ms":1764500000000,"result":"local","worker":"w1"}`
	if got := backlogAlertSize(1, 1, 1, 0, ts); got.Notification != float64(len(note)) || got.Alert != float64(len(alert)) || got.Pad != len(alert)-len(note) {
		t.Errorf("1 symbol: %+v; want notification %d bytes, alert %d (%s), pad %d", got, len(note), len(alert), alert, len(alert)-len(note))
	}

	fixed := len(`,"notification_ts_ms":`) + 13 + len(`,"price":`) + len(`,"price_ts_ms":`) + 13 + len(`,"result":"local"`) + len(`,"worker":"w1"`)
	for _, tt := range []struct{ symbols, ticks, notes int }{{3, 1, 2}, {50, 10, 7}, {1000, 10, 3}, {20, 0, 5}} {
		got := backlogAlertSize(tt.symbols, tt.ticks, tt.notes, 0, ts)
		// The notifications' mean: each one's JSON, as loadgen makes it.
		syms := loadgen.Symbols(tt.symbols)
		var nSum, delta float64
		prices := loadgen.LastPrices(tt.symbols, tt.ticks, 0)
		for k := range tt.notes {
			for i, s := range syms {
				id, user := "nbench-"+s+"-"+strconv.Itoa(k), "u"+strconv.Itoa((i+k)%97)
				nSum += float64(len(`{"id":"` + id + `","user":"` + user + `","symbol":"` + s + `","text":"` + s + ` moved"}`))
				if tt.ticks == 0 {
					delta += float64(len(`,"notification_ts_ms":`) + 13 + len(`,"result":"miss"`) + len(`,"worker":"w1"`))
				} else {
					delta += float64(fixed + len(strconv.FormatFloat(prices[i], 'f', -1, 64)))
				}
			}
		}
		n := float64(tt.symbols * tt.notes)
		wantN, wantA := nSum/n, (nSum+delta)/n
		if math.Abs(got.Notification-wantN) > 1e-9 || math.Abs(got.Alert-wantA) > 1e-9 || got.Pad != int(math.Round(wantA-wantN)) {
			t.Errorf("%+v: %+v; want notification %.3f, alert %.3f, pad %d", tt, got, wantN, wantA, int(math.Round(wantA-wantN)))
		}
		if tt.ticks > 0 && (got.Pad < fixed+4 || got.Pad > fixed+7) { // prices of about 1000 to 10000, in cents: 4 to 8 characters
			t.Errorf("%+v: pad %d; want about %d", tt, got.Pad, fixed+7)
		}
	}
	if got := backlogAlertSize(10, 1, 0, 0, time.Now().UnixMilli()); got != (alertSize{}) {
		t.Errorf("no notifications: %+v; want zeros", got)
	}
}

// TestAlertSizeRatiosAndSummary: with passthrough-alertsize rounds, the
// summary states the padding and its means, and the ratios include joiner
// 1 worker / alert-sized pass-through, of medians and round by round.
func TestAlertSizeRatiosAndSummary(t *testing.T) {
	t0 := time.Unix(1764500000, 0)
	round := func(name string, r int, seconds float64) drainRound {
		return drainRound{Contestant: name, Round: r, N: 1_000_000, Start: t0, Ready: t0,
			First: t0, Last: t0.Add(time.Duration(seconds * float64(time.Second))), CPU: time.Second}
	}
	res := results{backlog: "b", alertSize: &alertSize{Notification: 70.25, Alert: 180.5, Pad: 110}}
	// joiner-1w: 1M/s, 0.5M/s, 1M/s; passthrough-alertsize: 2M/s, 1M/s, 1.25M/s
	// (ratios 0.5, 0.5, 0.8; medians 1M/s and 1.25M/s: 0.8);
	// passthrough: 4M/s every round.
	for r, s := range [][3]float64{{1, 0.5, 0.25}, {2, 1, 0.25}, {1, 0.8, 0.25}} {
		res.drain = append(res.drain, round("joiner-1w", r+1, s[0]), round("passthrough-alertsize", r+1, s[1]), round("passthrough", r+1, s[2]))
	}
	lines := strings.Join(res.ratioLines(), "\n")
	for _, want := range []string{
		"joiner 1 worker / alert-sized pass-through: 0.80× of medians; per round 0.50× (0.50×–0.80×)",
		"alert-sized pass-through / kafka-go pass-through: 0.31× of medians; per round 0.31× (0.25×–0.50×)",
		"joiner 1 worker / kafka-go pass-through (target ≥ 0.8): 0.25× of medians",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("ratios lack %q:\n%s", want, lines)
		}
	}
	sum := res.summary()
	for _, want := range []string{
		"pass-through values padded with 110 bytes = mean alert 180.5 bytes − mean notification 70.2 bytes",
		"  passthrough-alertsize 1250k (1000k–2000k) notifications/s",
		"  joiner-1w             1000k (500k–1000k) notifications/s",
	} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	// Without the contestant: no padding line, no alert-sized ratio.
	res.drain = slices.DeleteFunc(res.drain, func(d drainRound) bool { return d.Contestant == "passthrough-alertsize" })
	if sum := res.summary(); strings.Contains(sum, "alert") {
		t.Errorf("summary without passthrough-alertsize mentions it:\n%s", sum)
	}
}

// TestBacklogAlertSizePadded: with --notification-bytes the notifications
// are that large and an alert adds the same join members as before.
func TestBacklogAlertSizePadded(t *testing.T) {
	plain := backlogAlertSize(50, 10, 7, 0, 1764500000000)
	padded := backlogAlertSize(50, 10, 7, 400, 1764500000000)
	if padded.Notification != 400 || math.Abs((padded.Alert-padded.Notification)-(plain.Alert-plain.Notification)) > 1e-9 {
		t.Errorf("padded %+v, plain %+v: want 400-byte notifications and the same join members", padded, plain)
	}
}
