package group

import (
	"context"
	"errors"

	"github.com/segmentio/kafka-go"
)

var (
	// ErrRebalancing is returned (wrapped) by Member.Commit when the member
	// holds no current generation (before its first assignment, while a
	// rebalance runs, after it left) or when the broker rejects the commit
	// with REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID.
	// The offsets were not committed; commit them again after the next
	// Handler.Assigned if the tasks are still this member's.
	ErrRebalancing = errors.New("group: rebalancing, commit again after the next assignment")

	// ErrFenced is returned (wrapped) by Member.Run when the coordinator
	// answers FENCED_INSTANCE_ID: another process joined the group with the
	// same instance id. Run stops; restarting it would fence the other.
	ErrFenced = errors.New("group: fenced: another member runs with the same instance id")

	// errSyncClosed marks a SyncGroup that failed on the connection. kfake
	// closes the connection of a SyncGroup for a generation that is already
	// rebalancing instead of answering REBALANCE_IN_PROGRESS: rejoin.
	errSyncClosed = errors.New("group: SyncGroup connection closed")

	// errSessionLost means heartbeats failed for a whole session timeout:
	// the coordinator has dropped this member by now.
	errSessionLost = errors.New("group: no successful heartbeat for a session timeout")

	// errMetadataChanged means the leader saw the partition counts change
	// since it planned: it rejoins so that a new plan is made.
	errMetadataChanged error = rejoinNow("group: topic partition counts changed")

	// errRevoked makes the member rejoin at once after an assignment
	// that took tasks away from it (cooperative handover): the follow-up
	// rebalance gives them to their new owners.
	errRevoked error = rejoinNow("group: tasks were revoked")

	// errProbing makes the leader rejoin for a probing rebalance while its
	// plan has warm-ups.
	errProbing error = rejoinNow("group: probing rebalance")
)

// rejoinNow is the error of a generation this member ends itself to
// rejoin at once, keeping its membership (errMetadataChanged, errRevoked,
// errProbing, errReleased); its text is the reason logged. Each is its
// own reason: none wraps another, so a released task is not logged as a
// change of partition counts.
type rejoinNow string

func (e rejoinNow) Error() string { return string(e) }

// wantsRejoin reports whether err is one of the rejoinNow reasons.
func wantsRejoin(err error) bool {
	var r rejoinNow
	return errors.As(err, &r)
}

// action is what the loop does after a failed request.
type action int

const (
	actRejoin  action = iota // join again at once, same member id
	actReset                 // join again at once with no member id
	actBackoff               // wait (bounded exponential with jitter), find the coordinator, join again
	actFatal                 // Run returns the error
)

func classify(err error) action {
	var kerr kafka.Error
	switch {
	// Our sentinels first: they may wrap a Kafka error.
	case errors.Is(err, errSyncClosed), wantsRejoin(err), errors.Is(err, errRestart):
		return actRejoin
	case errors.Is(err, errSessionLost):
		return actReset
	case errors.As(err, &kerr):
		switch kerr {
		case kafka.MemberIDRequired, kafka.RebalanceInProgress, kafka.IllegalGeneration:
			return actRejoin
		case kafka.UnknownMemberId:
			return actReset
		case kafka.FencedInstanceID, kafka.InvalidSessionTimeout, kafka.GroupAuthorizationFailed,
			kafka.InvalidGroupId:
			return actFatal
		}
		// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
		// COORDINATOR_LOAD_IN_PROGRESS and anything unexpected.
		return actBackoff
	}
	return actBackoff
}

// isTransportError reports whether err is a failure of the round trip
// itself (closed connection, reset, refused dial, an undecodable response)
// rather than a Kafka error code or a cancellation.
func isTransportError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var kerr kafka.Error
	return !errors.As(err, &kerr)
}

// isRebalanceError reports whether a commit failed because the generation is
// over.
func isRebalanceError(err error) bool {
	return errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.IllegalGeneration) ||
		errors.Is(err, kafka.UnknownMemberId)
}
