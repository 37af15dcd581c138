package produce

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	}{
		{name: "gives up", errs: []error{kafka.ConcurrentTransactions, kafka.ConcurrentTransactions, kafka.ConcurrentTransactions, kafka.ConcurrentTransactions},
			wantN: 3, wantErr: kafka.ConcurrentTransactions, wantText: "AddPartitionsToTxn: giving up after 3 attempts"},
		{name: "recovers", errs: []error{kafka.ConcurrentTransactions, kafka.RequestTimedOut}, wantN: 3},
		{name: "fenced", errs: []error{kafka.RequestTimedOut, kafka.ProducerFenced, kafka.RequestTimedOut},
			wantN: 2, wantErr: ErrFenced, wantText: "AddPartitionsToTxn", fenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Producer{attempts: 3, backoff: fastRetries, txn: &txnState{}}
			n := 0
			err := p.coordinate(context.Background(), "AddPartitionsToTxn", opCoordinator, func(context.Context) error {
				n++
				if n <= len(tc.errs) {
					return tc.errs[n-1]
				}
				return nil
			})
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
