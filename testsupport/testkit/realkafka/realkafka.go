// Package realkafka gives tests the real Kafka broker that scripts/kafka
// started, named by JOINER_KAFKA_BROKERS. It imports nothing of joiner, so
// the tests of any package (group, produce) may use it; testsupport/testkit,
// which builds on node, cannot serve the packages node imports.
package realkafka

import (
	"os"
	"strings"
	"testing"
)

// Env names the variable holding the real broker's bootstrap list.
const Env = "JOINER_KAFKA_BROKERS"

// Brokers returns the brokers of JOINER_KAFKA_BROKERS, or skips tb when it
// is not set.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	env := os.Getenv(Env)
	if env == "" {
		tb.Skip(Env + " is not set (scripts/kafka start; see docs/integration.md)")
	}
	return strings.Split(env, ",")
}
