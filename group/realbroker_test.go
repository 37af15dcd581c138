package group

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/joiner-dev/joiner/testsupport/testkit/realkafka"
	"github.com/segmentio/kafka-go"
)

// freshTopics creates a market and a notifications topic of testPartitions
// partitions with names no other test uses, and returns them with a group
// id of the same prefix.
func freshTopics(t *testing.T, addrs []string, name string) (record.Topics, string) {
	t.Helper()
	prefix := fmt.Sprintf("group-%s-%d", name, time.Now().UnixNano())
	topics := record.Topics{Market: prefix + "-market", Notifications: prefix + "-notifications"}
	client := &kafka.Client{Addr: kafka.TCP(addrs...), Timeout: 30 * time.Second}
	resp, err := client.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: topics.Market, NumPartitions: testPartitions, ReplicationFactor: 1},
		{Topic: topics.Notifications, NumPartitions: testPartitions, ReplicationFactor: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range resp.Errors {
		if err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
	}
	return topics, prefix
}

// TestCommitDuringRebalanceRealBroker: Kafka accepts the old generation's
// commits while it prepares a rebalance.
func TestCommitDuringRebalanceRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	topics, groupID := freshTopics(t, addrs, "commit")
	commitDuringRebalance(t, addrs, func(c *Config) { c.Topics, c.GroupID = topics, groupID })
}

// TestCooperativeScaleOutRealBroker is TestCooperativeScaleOut on a real
// Kafka broker, with fresh topics and group: the follow-up rebalance of the
// handover relies on the coordinator rebalancing when a known member
// rejoins a stable group with changed metadata.
func TestCooperativeScaleOutRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	for _, k := range []int{0, 1} {
		t.Run(fmt.Sprint("standbys ", k), func(t *testing.T) {
			topics, prefix := freshTopics(t, addrs, fmt.Sprint("coop-", k))
			cooperativeScaleOut(t, addrs, func(c *Config) {
				c.Topics, c.GroupID = topics, prefix
			}, k)
		})
	}
}

// TestLeaderComputesLagsRealBroker: the leader's ListOffsets and lags on a
// real broker.
func TestLeaderComputesLagsRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	topics, groupID := freshTopics(t, addrs, "lags")
	leaderComputesLags(t, addrs, topics, groupID, false)
}

// TestProbingRebalanceRealBroker: the leader's probing rejoin rebalances a
// real broker's group, and caught-up warm-ups move.
func TestProbingRebalanceRealBroker(t *testing.T) {
	addrs := realkafka.Brokers(t)
	topics, groupID := freshTopics(t, addrs, "probe")
	probingRebalance(t, addrs, func(c *Config) { c.Topics, c.GroupID = topics, groupID })
}
