package produce

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// txnAPIs are the requests of idempotence, transactions and read_committed,
// with the lowest version each feature needs.
var txnAPIs = []struct {
	key  protocol.ApiKey
	need int16
	why  string
}{
	{protocol.Produce, 3, "transactional id (v3)"},
	{protocol.Fetch, 4, "isolation level and aborted transactions (v4)"},
	{protocol.FindCoordinator, 1, "key type transaction (v1)"},
	{protocol.InitProducerId, 3, "epoch bump with the current producer id and epoch (v3, KIP-360)"},
	{protocol.AddPartitionsToTxn, 0, ""},
	{protocol.AddOffsetsToTxn, 0, ""},
	{protocol.TxnOffsetCommit, 3, "generation, member and instance id (v3, KIP-447)"},
	{protocol.EndTxn, 0, ""},
}

// testVersions logs the version kafka-go's Transport negotiates for each
// request (the highest both kafka-go and the broker support) and checks
// that it has what the feature needs. docs/kafka.md lists the result.
func testVersions(t *testing.T, e *txnEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.admin.ApiVersions(ctx, &kafka.ApiVersionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	broker := map[protocol.ApiKey][2]int16{}
	for _, k := range res.ApiKeys {
		broker[protocol.ApiKey(k.ApiKey)] = [2]int16{int16(k.MinVersion), int16(k.MaxVersion)}
	}
	for _, api := range txnAPIs {
		b, ok := broker[api.key]
		if !ok {
			t.Errorf("%s: the broker does not support it", api.key)
			continue
		}
		v := api.key.SelectVersion(b[0], b[1])
		t.Logf("%-20s kafka-go v%d-v%d, broker v%d-v%d: v%d", api.key, api.key.MinVersion(), api.key.MaxVersion(), b[0], b[1], v)
		if v < api.need || v < b[0] || v > b[1] {
			t.Errorf("%s: negotiated v%d (broker v%d-v%d); %s needs v%d", api.key, v, b[0], b[1], api.why, api.need)
		}
	}
}

func TestVersions(t *testing.T)           { testVersions(t, kfakeEnv(t)) }
func TestVersionsRealBroker(t *testing.T) { testVersions(t, realEnv(t)) }
