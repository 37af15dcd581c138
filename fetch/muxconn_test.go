package fetch

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestMuxConnections: 64 idle readers long-polling for a while through
// one Mux open no more than a few connections.
func TestMuxConnections(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(64, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var dials atomic.Int64
	tr := &kafka.Transport{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Timeout: 10 * time.Second, Transport: tr}
	m := NewMux(client)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for p := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := NewReader(m, "t", p, 0, 50*time.Millisecond, nil)
			for ctx.Err() == nil {
				r.Fetch(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d dials", dials.Load())
	if d := dials.Load(); d > MuxInflight+2 {
		t.Errorf("%d connections opened; want at most %d", d, MuxInflight+2)
	}
}
