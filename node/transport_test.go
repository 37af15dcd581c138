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

// fanOut runs f n times at once and waits for them.
func fanOut(n int, f func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	wg.Wait()
}

// TestLimitTransport: a thousand tasks' ListOffsets go otherInflight at a
// time (and so over as many connections); the group's heartbeats go
// groupInflight at a time, in their own lane.
func TestLimitTransport(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  kafka.Request
		max  int64
	}{
		{"ListOffsets", &listoffsets.Request{}, otherInflight},
		{"Heartbeat", &heartbeat.Request{}, groupInflight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &slowRT{}
			lt := newLimitTransport(rt)
			fanOut(40, func() { lt.RoundTrip(context.Background(), nil, tc.req) })
			if got := rt.max.Load(); got != tc.max {
				t.Fatalf("%d %s requests in flight at most; want %d", got, tc.name, tc.max)
			}
		})
	}
}

// gateRT holds every request until release is closed, counting the most
// in flight.
type gateRT struct {
	slowRT
	release chan struct{}
}

func (g *gateRT) RoundTrip(ctx context.Context, _ net.Addr, req kafka.Request) (kafka.Response, error) {
	n := g.cur.Add(1)
	defer g.cur.Add(-1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
	<-g.release
	return nil, nil
}

// TestLimitTransportCancelled: callers that give up (their context
// cancelled) return at once, but their requests keep their slots until
// the transport answers them, so the requests in flight, and the
// connections under them, stay at the lane's bound however many callers
// give up.
func TestLimitTransportCancelled(t *testing.T) {
	rt := &gateRT{release: make(chan struct{})}
	lt := newLimitTransport(rt)
	fanOut(40, func() { // every caller gives up
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := lt.RoundTrip(ctx, nil, &listoffsets.Request{}); err == nil {
			t.Error("a request held past its caller's deadline returned no error")
		}
	})
	if got := rt.max.Load(); got != otherInflight {
		t.Fatalf("%d requests in flight after their callers gave up; want %d", got, otherInflight)
	}
	// The lane stays full until the transport answers; a heartbeat still
	// goes, in the group's lane.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := lt.RoundTrip(ctx, nil, &listoffsets.Request{}); err == nil {
		t.Fatal("a ListOffsets went while the lane's requests were unanswered")
	}
	close(rt.release)
	hb, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if _, err := lt.RoundTrip(hb, nil, &heartbeat.Request{}); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if _, err := lt.RoundTrip(hb, nil, &listoffsets.Request{}); err != nil {
		t.Fatalf("ListOffsets after the answers: %v", err)
	}
}

// TestLimitTransportGroupLane: a heartbeat does not queue behind a full
// lane of the tasks' requests.
func TestLimitTransportGroupLane(t *testing.T) {
	rt := &gateRT{release: make(chan struct{})}
	defer close(rt.release)
	lt := newLimitTransport(rt)
	for range otherInflight + produceInflight {
		go lt.RoundTrip(context.Background(), nil, &listoffsets.Request{})
	}
	for rt.cur.Load() < otherInflight {
		time.Sleep(time.Millisecond)
	}
	go lt.RoundTrip(context.Background(), nil, &heartbeat.Request{})
	for deadline := time.Now().Add(5 * time.Second); rt.cur.Load() != otherInflight+1; {
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat was not sent while the ListOffsets lane was full (%d in flight)", rt.cur.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
