package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want action
	}{
		{kafka.MemberIDRequired, actRejoin},
		{fmt.Errorf("join: %w", kafka.RebalanceInProgress), actRejoin},
		{kafka.IllegalGeneration, actRejoin},
		{kafka.UnknownMemberId, actReset},
		{fmt.Errorf("heartbeat: %w", kafka.FencedInstanceID), actFatal},
		{kafka.InvalidSessionTimeout, actFatal},
		{kafka.NotCoordinatorForGroup, actBackoff},
		{kafka.GroupCoordinatorNotAvailable, actBackoff},
		{kafka.GroupLoadInProgress, actBackoff},
		{fmt.Errorf("join: %w", io.EOF), actBackoff},
		{fmt.Errorf("sync: %w: %w", errSyncClosed, io.ErrUnexpectedEOF), actRejoin},
		{fmt.Errorf("%w: %w", errSessionLost, kafka.NotCoordinatorForGroup), actReset},
		{errMetadataChanged, actRejoin},
		{errReleased, actRejoin},
		{fmt.Errorf("hold: %w", errRevoked), actRejoin},
		{errProbing, actRejoin},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// The reason logged for a rejoin is its own: a released task (a lone
// worker with an unusable state dir logged one per task) is not reported
// as a change of the topics' partition counts.
func TestRejoinReasons(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errReleased, "released"},
		{errRevoked, "revoked"},
		{errProbing, "probing"},
		{errMetadataChanged, "partition counts changed"},
	} {
		msg := tc.err.Error()
		if !strings.Contains(msg, tc.want) || tc.err != errMetadataChanged && strings.Contains(msg, "partition counts") {
			t.Errorf("rejoin reason %q, want it to say %q and nothing of partition counts", msg, tc.want)
		}
		if !wantsRejoin(tc.err) {
			t.Errorf("%q does not make the member rejoin at once", msg)
		}
	}
}

func TestIsTransportError(t *testing.T) {
	for err, want := range map[error]bool{
		nil:                                false,
		io.EOF:                             true,
		fmt.Errorf("x: %w", io.EOF):        true,
		kafka.RebalanceInProgress:          false,
		context.Canceled:                   false,
		context.DeadlineExceeded:           false,
		errors.New("dial tcp: refused"):    true,
		fmt.Errorf("x: %w", kafka.Unknown): false,
	} {
		if got := isTransportError(err); got != want {
			t.Errorf("isTransportError(%v) = %v", err, got)
		}
	}
}

func TestResponseError(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		decoded  error
		throttle time.Duration
		want     error
	}{
		{nil, 0, nil},                                         // v1+, no error, no throttle
		{nil, ms(27), kafka.RebalanceInProgress},              // v1+: the code is in Throttle
		{nil, ms(5<<16 | 25), kafka.UnknownMemberId},          // v1+, throttled 5 ms
		{nil, ms(5 << 16), nil},                               // v1+, throttled, no error
		{kafka.IllegalGeneration, 0, kafka.IllegalGeneration}, // v0
	} {
		if got := responseError(tc.decoded, tc.throttle); !errors.Is(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("responseError(%v, %v) = %v, want %v", tc.decoded, tc.throttle, got, tc.want)
		}
	}
}
