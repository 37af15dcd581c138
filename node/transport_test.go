package node

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
)

// slowRT holds every request for a while, counting the most in flight.
type slowRT struct{ cur, max atomic.Int64 }

func (s *slowRT) RoundTrip(context.Context, net.Addr, kafka.Request) (kafka.Response, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for m := s.max.Load(); n > m && !s.max.CompareAndSwap(m, n); m = s.max.Load() {
	}
	time.Sleep(20 * time.Millisecond)
	return nil, nil
}

// TestLimitTransport: a thousand tasks' ListOffsets go otherInflight at a
// time (and so over as many connections); heartbeats are not held behind
// them.
func TestLimitTransport(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  kafka.Request
		max  int64
	}{
		{"ListOffsets", &listoffsets.Request{}, otherInflight},
		{"Heartbeat", &heartbeat.Request{}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &slowRT{}
			lt := newLimitTransport(rt)
			var wg sync.WaitGroup
			for range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lt.RoundTrip(context.Background(), nil, tc.req)
				}()
			}
			wg.Wait()
			if got := rt.max.Load(); got > tc.max || (tc.max == 40 && got <= otherInflight) {
				t.Fatalf("%d %s requests in flight at once; want at most %d (and heartbeats not limited)", got, tc.name, tc.max)
			}
		})
	}
}
