package produce

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/internal/backoff"
	"github.com/segmentio/kafka-go"
)

// coordinate retries a retriable coordinator error up to Attempts and
// says so; a fencing error stops it at once and fences the producer; a
// success after failures returns nil.
func TestCoordinateAttempts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		errs     []error // what the calls return, in order; nil after
		wantN    int
		wantErr  error
		wantText string
		fenced   bool
		slow     bool // a backoff of a minute: only CONCURRENT_TRANSACTIONS may be retried in the test's time
	}{
		{name: "gives up", errs: []error{kafka.RequestTimedOut, kafka.RequestTimedOut, kafka.RequestTimedOut, kafka.RequestTimedOut},
			wantN: 3, wantErr: kafka.RequestTimedOut, wantText: "AddPartitionsToTxn: giving up after 3 attempts"},
		{name: "recovers", errs: []error{kafka.ConcurrentTransactions, kafka.RequestTimedOut}, wantN: 3},
		// The previous transaction's markers being written: retried
		// past Attempts, and quickly (the test's own backoff is a
		// minute: a wait of it would time the test out).
		{name: "concurrent transactions", errs: []error{kafka.ConcurrentTransactions, kafka.ConcurrentTransactions, kafka.ConcurrentTransactions, kafka.ConcurrentTransactions, kafka.ConcurrentTransactions}, wantN: 6, slow: true},
		{name: "fenced", errs: []error{kafka.RequestTimedOut, kafka.ProducerFenced, kafka.RequestTimedOut},
			wantN: 2, wantErr: ErrFenced, wantText: "AddPartitionsToTxn", fenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Producer{attempts: 3, backoff: fastRetries, txn: &txnState{}}
			ctx := context.Background()
			if tc.slow {
				p.backoff = backoff.Policy{Min: time.Minute, Max: time.Minute}
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
			}
			began := time.Now()
			n := 0
			err := p.coordinate(ctx, "AddPartitionsToTxn", opCoordinator, func(context.Context) error {
				n++
				if n <= len(tc.errs) {
					return tc.errs[n-1]
				}
				return nil
			})
			if tc.slow && time.Since(began) > time.Second {
				t.Errorf("%d calls took %v: CONCURRENT_TRANSACTIONS waited the producer's backoff", n, time.Since(began))
			}
			if n != tc.wantN {
				t.Errorf("%d calls, want %d", n, tc.wantN)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.wantErr, tc.wantText)
			}
			if got := p.txn.fenced != nil; got != tc.fenced {
				t.Errorf("fenced = %v, want %v", got, tc.fenced)
			}
		})
	}
}
