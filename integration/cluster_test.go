package integration

// The 3-broker row of issue 8: on the cluster of scripts/kafka-cluster
// (replication factor 3), the broker leading market-0 and notifications-0
// is stopped under load; no alert is lost and the workers keep going
// without a restart. Its exactly-once variant
// (TestIntegrationClusterExactlyOnceLeaderStopped) stops the leader of
// alerts-0, which is also a worker's transaction coordinator.
//
//	scripts/kafka-cluster start
//	JOINER_KAFKA_CLUSTER=1 JOINER_KAFKA_RF=3 JOINER_KAFKA_BROKERS=127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096 \
//	  go test -count=1 -run 'TestIntegrationCluster(ExactlyOnce)?LeaderStopped' ./integration/
//	scripts/kafka-cluster stop
//
// The test stops and restarts the node with scripts/kafka-cluster, with
// the same JOINER_KAFKA_CLUSTER_DIR and JOINER_KAFKA_CLUSTER_PORT as the
// cluster was started with.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/join"
	"github.com/joiner-dev/joiner/testsupport/oracle"
	"github.com/segmentio/kafka-go"
)

// replicationFactor of the test topics: JOINER_KAFKA_RF, default 1.
func replicationFactor() int {
	if n, err := strconv.Atoi(os.Getenv("JOINER_KAFKA_RF")); err == nil && n > 0 {
		return n
	}
	return 1
}

func clusterScript(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "scripts", "kafka-cluster"), args...)
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/kafka-cluster %v: %s", args, out)
	if err != nil {
		t.Fatalf("scripts/kafka-cluster %v: %v", args, err)
	}
}

// leaderOf returns the leader and replicas of partition 0 of topic.
func leaderOf(ctx context.Context, c *kafka.Client, topic string) (int, []int, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, nil, err
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if p.ID == 0 {
				var rs []int
				for _, r := range p.Replicas {
					rs = append(rs, r.ID)
				}
				return p.Leader.ID, rs, nil
			}
		}
	}
	return 0, nil, fmt.Errorf("%s-0 not in metadata", topic)
}

// leadBy makes broker lead partition 0 of topic: its preferred replica,
// then elected.
func leadBy(ctx context.Context, c *cluster, topic string, lead int) {
	t := c.t
	t.Helper()
	if nl, replicas, err := leaderOf(ctx, c.client, topic); err != nil {
		t.Fatal(err)
	} else if nl != lead {
		order := append([]int{lead}, slices.DeleteFunc(slices.Clone(replicas), func(r int) bool { return r == lead })...)
		res, err := c.client.AlterPartitionReassignments(ctx, &kafka.AlterPartitionReassignmentsRequest{
			Topic: topic, Assignments: []kafka.AlterPartitionReassignmentsRequestAssignment{{PartitionID: 0, BrokerIDs: order}},
			Timeout: 30 * time.Second,
		})
		if err == nil {
			err = res.Error
		}
		if err == nil {
			for _, pr := range res.PartitionResults {
				if pr.Error != nil {
					err = pr.Error
				}
			}
		}
		if err != nil {
			t.Fatalf("reassigning %s-0 to %v: %v", topic, order, err)
		}
		c.poll(topic+"-0 led by broker "+strconv.Itoa(lead), 60*time.Second, func() (bool, string) {
			er, eerr := c.client.ElectLeaders(ctx, &kafka.ElectLeadersRequest{Topic: topic, Partitions: []int{0}, Timeout: 10 * time.Second})
			if eerr == nil && er.Error != nil {
				eerr = er.Error
			}
			if eerr == nil {
				for _, pr := range er.PartitionResults {
					if pr.Error != nil {
						eerr = pr.Error
					}
				}
			}
			l, rs, err := leaderOf(ctx, c.client, topic)
			return err == nil && l == lead, fmt.Sprintf("leader %d replicas %v (%v); election: %v", l, rs, err, eerr)
		})
	}
}

func TestIntegrationClusterLeaderStopped(t *testing.T) {
	requireKafka(t)
	if os.Getenv("JOINER_KAFKA_CLUSTER") == "" || replicationFactor() != 3 {
		t.Skip("needs the 3-node cluster of scripts/kafka-cluster: set JOINER_KAFKA_CLUSTER=1 and JOINER_KAFKA_RF=3 (see the file comment)")
	}
	c := newCluster(t, partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// One broker must lead both market-0 and notifications-0: make the
	// leader of market-0 the preferred replica of notifications-0 too.
	lead, _, err := leaderOf(ctx, c.client, c.market)
	if err != nil {
		t.Fatal(err)
	}
	leadBy(ctx, c, c.notifs, lead)

	ws := []*worker{c.start("w1"), c.start("w2")}
	st := c.waitStable(ws, 0, 90*time.Second)
	l := c.startLoad("leader", 20, 3, 2, 300)
	c.waitRuns(l, 2, 60*time.Second)

	t.Logf("stopping broker %d, the leader of %s-0 and %s-0, at generation %d", lead, c.market, c.notifs, st.gen)
	clusterScript(t, "stop-node", strconv.Itoa(lead))
	t.Cleanup(func() { clusterScript(t, "start-node", strconv.Itoa(lead)) })
	c.poll("a new leader of market-0 and notifications-0", 60*time.Second, func() (bool, string) {
		fresh := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: &kafka.Transport{}}
		ml, _, merr := leaderOf(ctx, fresh, c.market)
		nl, _, nerr := leaderOf(ctx, fresh, c.notifs)
		return merr == nil && nerr == nil && ml != lead && nl != lead && ml > 0 && nl > 0,
			fmt.Sprintf("leaders %d and %d (%v, %v)", ml, nl, merr, nerr)
	})
	c.waitRuns(l, l.completed()+3, 120*time.Second)

	runs := c.end(l)
	ids, last := merge(runs...)
	dups := c.waitAlerts(ids, 2*time.Minute)
	c.checkAlertResults()
	_ = last
	// Each run's notifications follow all its ticks, so each must join its
	// run's last price of the symbol. While the market partition has no
	// leader, a notification waits for it (it is never joined before the
	// market is read past it), so none may carry an older price.
	older := 0
	for _, r := range runs {
		for _, id := range r.NotificationIDs {
			if al, ok := c.alerts.alert(id); ok && (al.Price == nil || *al.Price != r.LastPrice[al.Symbol]) {
				older++
			}
		}
	}
	t.Logf("%d of %d alerts joined an older price", older, len(ids))
	if older != 0 {
		t.Errorf("%d alerts joined an older price than the one their notification followed", older)
	}
	for _, w := range ws {
		if !w.running() {
			t.Errorf("worker %s exited after the broker stopped: %v", w.id, w.err)
		}
	}
	c.waitCaughtUp(90 * time.Second)
	t.Logf("broker %d stopped under load: %d runs, %d notifications, every one alerted, %d duplicates; workers kept running",
		lead, len(runs), len(ids), dups)
	c.stopAll(ws)
}

// TestIntegrationClusterExactlyOnceLeaderStopped: the exactly-once oracle
// on the 3-node cluster. The broker that is w1's transaction coordinator
// is made the leader of alerts-0 too, and stopped under load: both move
// to another broker, and the alerts, read read_committed, have 0 lost,
// 0 wrong and 0 duplicates, with no worker restart.
func TestIntegrationClusterExactlyOnceLeaderStopped(t *testing.T) {
	requireKafka(t)
	if os.Getenv("JOINER_KAFKA_CLUSTER") == "" || replicationFactor() != 3 {
		t.Skip("needs the 3-node cluster of scripts/kafka-cluster: set JOINER_KAFKA_CLUSTER=1 and JOINER_KAFKA_RF=3 (see the file comment)")
	}
	runOracle(t, oracleScenario{workers: []string{"w1", "w2", "w3"}, exactlyOnce: true, maxDuplicates: 0,
		disturb: func(c *cluster, ws map[string]*worker, at func(float64)) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := join.TransactionalID(c.group, "w1")
			coordinator := func(cl *kafka.Client) (int, error) {
				res, err := cl.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: id, KeyType: kafka.CoordinatorKeyTypeTransaction})
				if err == nil && res.Error != nil {
					err = res.Error
				}
				if err != nil {
					return -1, err
				}
				return res.Coordinator.NodeID, nil
			}
			lead, err := coordinator(c.client)
			if err != nil {
				c.t.Fatalf("the transaction coordinator of %s: %v", id, err)
			}
			leadBy(ctx, c, c.alertsT, lead)
			at(0.3)
			c.t.Logf("stopping broker %d, the leader of %s-0 and the transaction coordinator of %s", lead, c.alertsT, id)
			clusterScript(c.t, "stop-node", strconv.Itoa(lead))
			c.t.Cleanup(func() { clusterScript(c.t, "start-node", strconv.Itoa(lead)) })
			c.poll("a new leader of alerts-0 and a new transaction coordinator of w1", 60*time.Second, func() (bool, string) {
				fresh := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: &kafka.Transport{}}
				al, _, aerr := leaderOf(ctx, fresh, c.alertsT)
				co, cerr := coordinator(fresh)
				return aerr == nil && cerr == nil && al != lead && co != lead && al > 0 && co > 0,
					fmt.Sprintf("alerts-0 leader %d (%v), coordinator %d (%v)", al, aerr, co, cerr)
			})
		},
		after: func(c *cluster, ws map[string]*worker, _ *oracle.Workload) {
			for id, w := range ws {
				if !w.running() {
					c.t.Errorf("worker %s exited after the broker stopped: %v", id, w.err)
				}
			}
			c.t.Logf("%d transactions aborted over the broker stop", c.countLogLines("transaction aborted"))
		}})
}
