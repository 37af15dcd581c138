package murmur2

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/segmentio/kafka-go"
)

// Vectors from Kafka's UtilsTest.testMurmur2 (signed, as Java returns them).
var kafkaVectors = []struct {
	key  string
	want int32
}{
	{"21", -973932308},
	{"foobar", -790332482},
	{"a-little-bit-long-string", -985981536},
	{"a-little-bit-longer-string", -1486304829},
	{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
	{"abc", 479470107},
}

// Vectors of the Java results published with librdkafka's rdmurmur2.c (and
// reused by kafka-go's balancer_test.go), as unsigned 32-bit values. They
// cover every tail length.
var librdkafkaVectors = []struct {
	key  string
	want uint32
}{
	{"kafka", 0xd067cf64},
	{"giberish123456789", 0x8f552b0c},
	{"1234", 0x9fc97b14},
	{"234", 0xe7c009ca},
	{"34", 0x873930da},
	{"4", 0x5a4b5ca1},
	{"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x78424f1c},
	{"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62b377},
	{"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4e09e},
	{"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8b43f},
	{"", 0x106e08d9},
}

func TestHashKafkaVectors(t *testing.T) {
	for _, v := range kafkaVectors {
		if got := Hash([]byte(v.key)); got != v.want {
			t.Errorf("Hash(%q) = %d, want %d", v.key, got, v.want)
		}
	}
}

func TestHashLibrdkafkaVectors(t *testing.T) {
	for _, v := range librdkafkaVectors {
		if got := uint32(Hash([]byte(v.key))); got != v.want {
			t.Errorf("Hash(%q) = %#x, want %#x", v.key, got, v.want)
		}
	}
}

func TestNilAndEmptyKey(t *testing.T) {
	const empty = int32(0x106e08d9) // murmur2 of zero bytes
	if got := Hash(nil); got != empty {
		t.Errorf("Hash(nil) = %#x, want %#x", got, empty)
	}
	if got := Hash([]byte{}); got != empty {
		t.Errorf("Hash([]byte{}) = %#x, want %#x", got, empty)
	}
	if got, want := Partition([]byte{}, 6), int(empty)%6; got != want {
		t.Errorf("Partition(empty, 6) = %d, want %d", got, want)
	}

	// The Balancer hashes an empty non-nil key but spreads nil keys.
	var b Balancer
	parts := []int{0, 1, 2, 3, 4, 5}
	for i := 0; i < 3; i++ {
		if got, want := b.Balance(kafka.Message{Key: []byte{}}, parts...), int(empty)%6; got != want {
			t.Errorf("Balance(empty key) = %d, want %d", got, want)
		}
	}
	for i := 0; i < 12; i++ {
		if got, want := b.Balance(kafka.Message{}, parts...), i%6; got != want {
			t.Errorf("Balance(nil key) call %d = %d, want %d (round-robin)", i, got, want)
		}
	}
}

func TestPartitionKnownKeys(t *testing.T) {
	// "21" hashes to -973932308; & 0x7fffffff gives 1173551340.
	if got := Partition([]byte("21"), 6); got != 1173551340%6 {
		t.Errorf("Partition(21, 6) = %d, want %d", got, 1173551340%6)
	}
	if got := Partition([]byte("anything"), 1); got != 0 {
		t.Errorf("Partition(_, 1) = %d, want 0", got)
	}
}

func TestPartitionPanicsBelowOne(t *testing.T) {
	for _, n := range []int{0, -1, -6} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Partition(key, %d) did not panic", n)
				}
			}()
			Partition([]byte("k"), n)
		}()
	}
}

// TestMatchesKafkaGoMurmur2Balancer cross-checks against kafka-go's own
// implementation on seeded random keys over several partition counts.
func TestMatchesKafkaGoMurmur2Balancer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := []int{1, 2, 3, 6, 8, 12, 17, 64, 1000}
	theirs := kafka.Murmur2Balancer{}
	var ours Balancer
	for _, n := range counts {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		for i := 0; i < 10000; i++ {
			key := make([]byte, rng.IntN(65)) // includes empty, non-nil keys
			for j := range key {
				key[j] = byte(rng.Uint32())
			}
			msg := kafka.Message{Key: key}
			want := theirs.Balance(msg, parts...)
			if got := ours.Balance(msg, parts...); got != want {
				t.Fatalf("n=%d key=%x: Balance = %d, kafka-go Murmur2Balancer = %d", n, key, got, want)
			}
			if got := Partition(key, n); got != want {
				t.Fatalf("n=%d key=%x: Partition = %d, kafka-go Murmur2Balancer = %d", n, key, got, want)
			}
		}
	}
}

// refHash is a second, deliberately literal transcription of Java's
// Utils.murmur2: signed 32-bit arithmetic, >>> as a shift of the unsigned
// value, and the tail written as Java's switch.
func refHash(data []byte) int32 {
	const seed32 = int32(-1756908916) // 0x9747b28c
	const m32 = int32(0x5bd1e995)
	ushr := func(x int32, s uint) int32 { return int32(uint32(x) >> s) }
	length := int32(len(data))
	h := seed32 ^ length
	length4 := length / 4
	for i := int32(0); i < length4; i++ {
		i4 := i * 4
		k := int32(data[i4+0]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m32
		k ^= ushr(k, 24)
		k *= m32
		h *= m32
		h ^= k
	}
	rem := length % 4
	if rem == 3 {
		h ^= int32(data[(length&^3)+2]) << 16
	}
	if rem >= 2 {
		h ^= int32(data[(length&^3)+1]) << 8
	}
	if rem >= 1 {
		h ^= int32(data[length&^3])
		h *= m32
	}
	h ^= ushr(h, 13)
	h *= m32
	h ^= ushr(h, 15)
	return h
}

func TestRefHashAgreesWithVectors(t *testing.T) {
	for _, v := range kafkaVectors {
		if got := refHash([]byte(v.key)); got != v.want {
			t.Errorf("refHash(%q) = %d, want %d", v.key, got, v.want)
		}
	}
}

func FuzzHash(f *testing.F) {
	for _, v := range kafkaVectors {
		f.Add([]byte(v.key), uint16(6))
	}
	f.Add([]byte{}, uint16(1))
	f.Add([]byte{0xff, 0x80, 0x7f}, uint16(1000))
	f.Fuzz(func(t *testing.T, key []byte, n16 uint16) {
		if got, want := Hash(key), refHash(key); got != want {
			t.Fatalf("Hash(%x) = %d, reference = %d", key, got, want)
		}
		n := int(n16) + 1
		if p := Partition(key, n); p < 0 || p >= n {
			t.Fatalf("Partition(%x, %d) = %d, out of range", key, n, p)
		}
	})
}

func BenchmarkHash(b *testing.B) {
	for _, size := range []int{4, 16, 64} {
		key := make([]byte, size)
		for i := range key {
			key[i] = byte('A' + i%26)
		}
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				Hash(key)
			}
		})
	}
}

func BenchmarkBalance(b *testing.B) {
	var bal Balancer
	msg := kafka.Message{Key: []byte("AAPL")}
	parts := []int{0, 1, 2, 3, 4, 5}
	for b.Loop() {
		bal.Balance(msg, parts...)
	}
}
