package murmur2

import (
	"sync/atomic"

	"github.com/segmentio/kafka-go"
)

// Balancer is a kafka-go Balancer (set it as kafka.Writer.Balancer) that
// places keyed messages like the Java client's default partitioner.
//
// A message with a non-nil key (an empty one included) goes to
// partitions[Partition(key, len(partitions))]; a message with a nil key goes
// round-robin over partitions, like Java's pre-sticky partitioner for null
// keys (kafka-go's Murmur2Balancer picks one at random instead; for joiner
// every record has a symbol key, so the nil path is a fallback).
//
// Like kafka-go's Murmur2Balancer, Balance indexes into partitions in the
// order given; kafka.Writer passes 0..n-1 ascending, so the index is the
// partition number. Keyed results therefore equal Murmur2Balancer's.
//
// The zero value is ready to use. A Balancer is safe for concurrent use and
// must not be copied after first use; pass a pointer.
type Balancer struct {
	next atomic.Uint32 // round-robin position for nil keys
}

var _ kafka.Balancer = (*Balancer)(nil)

// Balance returns the partition for msg. partitions must not be empty
// (kafka.Writer never calls a Balancer with none).
func (b *Balancer) Balance(msg kafka.Message, partitions ...int) int {
	if msg.Key == nil {
		i := b.next.Add(1) - 1
		return partitions[int(i%uint32(len(partitions)))]
	}
	return partitions[Partition(msg.Key, len(partitions))]
}
