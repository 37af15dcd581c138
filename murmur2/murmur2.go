// Package murmur2 is Kafka's murmur2 key hash and default partition choice,
// bit-identical to the Java client (org.apache.kafka.common.utils.Utils.murmur2
// and the default partitioner's toPositive(hash) % n).
//
// Producers that key records with this hash land each key on the same
// partition index as Java, librdkafka ("murmur2_random") and kafka-go's
// Murmur2Balancer producers do, which is what makes the market and
// notifications topics co-partitioned.
//
// Nil and empty keys: Hash and Partition treat a nil key exactly like an
// empty one (murmur2 of zero bytes, 0x106e08d9), because a byte slice has no
// separate "null" in Go. Java only ever hashes non-null keys; a null key
// takes its sticky/round-robin path. Balancer reproduces that split: a nil
// key is spread round-robin, an empty non-nil key is hashed.
//
// This file depends on nothing; balancer.go holds the kafka-go Balancer.
package murmur2

const (
	seed = 0x9747b28c
	m    = 0x5bd1e995
	r    = 24
)

// Hash returns the Java client's murmur2 hash of key as a signed 32-bit
// integer, as Java's Utils.murmur2 returns it. A nil key hashes like an
// empty one.
func Hash(key []byte) int32 {
	n := len(key)
	h := uint32(seed) ^ uint32(n)

	body := n &^ 3
	for i := 0; i < body; i += 4 {
		k := uint32(key[i]) | uint32(key[i+1])<<8 | uint32(key[i+2])<<16 | uint32(key[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}

	// Java's switch on length%4 falls through from case 3 to case 1.
	switch n & 3 {
	case 3:
		h ^= uint32(key[body+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[body+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[body])
		h *= m
	}

	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Partition returns the partition in [0, n) that Kafka's default
// partitioner picks for a non-null key: (Hash(key) & 0x7fffffff) % n.
//
// Precondition: n >= 1. Partition panics when n < 1, as an out-of-range
// index would; code that takes n from user input must validate it first (the
// joiner partition command does).
func Partition(key []byte, n int) int {
	if n < 1 {
		panic("murmur2: Partition called with n < 1 partitions")
	}
	return int(Hash(key)&0x7fffffff) % n
}
