package group

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// ErrNoSuchInstance is returned by RemoveMember when the group has no
// member with the instance id.
var ErrNoSuchInstance = errors.New("no member with this instance id")

// RemoveMember removes the static member instanceID from group groupID for
// good, as KIP-345's admin removal (Kafka's
// Admin.removeMembersFromConsumerGroup) does: a LeaveGroup that names the
// instance id and no member id. The coordinator rebalances at once and the
// member's tasks move to the others. Use it after stopping a worker that
// will not come back (a scale-down without --leave-on-shutdown). The
// error wraps ErrNoSuchInstance when the group has no such member.
func RemoveMember(ctx context.Context, client *kafka.Client, groupID, instanceID string) error {
	switch {
	case groupID == "":
		return errors.New("group: RemoveMember: no group id")
	case instanceID == "":
		return errors.New("group: RemoveMember: no instance id")
	}
	err := leaveGroup(ctx, client, groupID, kafka.LeaveGroupRequestMember{GroupInstanceID: instanceID})
	switch {
	case errors.Is(err, kafka.UnknownMemberId):
		return fmt.Errorf("group %q: remove instance %q: %w (%w)", groupID, instanceID, ErrNoSuchInstance, err)
	case err != nil:
		return fmt.Errorf("group %q: remove instance %q: %w", groupID, instanceID, err)
	}
	return nil
}

// leaveGroup sends a LeaveGroup for member of group groupID and returns
// the first error of the response: its top-level code or the member's.
func leaveGroup(ctx context.Context, client *kafka.Client, groupID string, member kafka.LeaveGroupRequestMember) error {
	resp, err := client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{
		GroupID: groupID,
		Members: []kafka.LeaveGroupRequestMember{member},
	})
	if err != nil {
		return err
	}
	if err := responseError(resp.Error, resp.Throttle); err != nil {
		return err
	}
	for _, r := range resp.Members {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}
