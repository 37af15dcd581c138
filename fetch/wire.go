package fetch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// # The Mux's Fetch on the wire
//
// A MuxRequest goes through the client's kafka-go Transport like any
// request: to the partitions' leader (kafka-go's fetch.Request.Broker),
// on a pooled connection that the Transport dialed, with its TLS and
// SASL, and negotiated the API versions of. It is a
// protocol.RawExchanger, so on that connection it writes kafka-go's
// encoding of the request and reads the response itself: the header
// fields in order, and each partition's record set into a buffer of
// exactly its size (MuxPartition.Records), decoded later by RawRecords
// (batches.go). A transport that wraps the client's may change the
// MuxResponse it returns.

// MuxRequest is the Fetch request a Mux sends (see above).
type MuxRequest struct {
	fetchapi.Request
	// ClientID is the client id of the request (the Transport's).
	ClientID string

	version int16 // negotiated, from Required
}

// MuxResponse is the answer to a MuxRequest.
type MuxResponse struct {
	ErrorCode int16
	Topics    []MuxTopic
}

// MuxTopic is one topic of a MuxResponse.
type MuxTopic struct {
	Topic      string
	Partitions []MuxPartition
}

// MuxPartition is one partition of a MuxResponse.
type MuxPartition struct {
	Partition        int32
	ErrorCode        int16
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	// Aborted is nil when the response has no list (read_uncommitted).
	Aborted []Aborted
	// Records is the record set, in a buffer of its own; nil or empty
	// when the partition returned none.
	Records []byte
}

// ApiKey is Fetch's.
func (r *MuxRequest) ApiKey() protocol.ApiKey { return protocol.Fetch }

// ApiKey is Fetch's.
func (r *MuxResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }

// minFetchVersion is the oldest Fetch version a MuxResponse is read in:
// version 4 has the last stable offset and the aborted transactions
// (Kafka 0.11).
const minFetchVersion = 4

// maxFetchVersion is the newest: kafka-go's fetch.Request goes up to
// version 11, the last that is not a flexible version.
const maxFetchVersion = 11

// maxResponseBytes bounds the size a response may claim (a corrupt
// length must not allocate gigabytes): the request's limit, and the one
// record batch larger than it a broker may return, are far below it.
const maxResponseBytes = 1 << 30

// Required takes the Fetch version that kafka-go negotiated for the
// connection (protocol.RawExchanger); the exchange is always raw.
func (r *MuxRequest) Required(versions map[protocol.ApiKey]int16) bool {
	r.version = versions[protocol.Fetch]
	return true
}

// RawExchange writes r on rw and reads its response
// (protocol.RawExchanger). An error leaves the connection unusable; the
// Transport closes it.
func (r *MuxRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	v := r.version
	if v > maxFetchVersion {
		return nil, fmt.Errorf("fetch version %d negotiated; a MuxResponse is read up to version %d", v, maxFetchVersion)
	}
	if v < minFetchVersion {
		return nil, fmt.Errorf("the broker serves Fetch up to version %d; joiner needs version %d or newer (Kafka 0.11 or newer)", v, minFetchVersion)
	}
	corr := rand.Int32()
	if err := protocol.WriteRequest(rw, v, corr, r.ClientID, &r.Request); err != nil {
		return nil, fmt.Errorf("send the Fetch request: %w", err)
	}
	var head [8]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return nil, fmt.Errorf("read the Fetch response: %w", err)
	}
	size := int32(binary.BigEndian.Uint32(head[:]))
	if got := int32(binary.BigEndian.Uint32(head[4:])); got != corr {
		return nil, fmt.Errorf("the Fetch response has correlation id %d, want %d", got, corr)
	}
	if size < 4 || size > maxResponseBytes {
		return nil, fmt.Errorf("the Fetch response claims %d bytes", size)
	}
	d := &wireDecoder{r: rw, remain: int(size) - 4}
	res := d.response(v)
	if d.err == nil && d.remain > 0 {
		d.skip(d.remain) // fields of newer versions than we read
	}
	if d.err != nil {
		return nil, fmt.Errorf("read the Fetch response (version %d): %w", v, d.err)
	}
	return res, nil
}

// parseMuxResponse decodes a Fetch response body of version v (after the
// size and correlation id), as RawExchange reads it off a connection.
func parseMuxResponse(body []byte, v int16) (*MuxResponse, error) {
	if v < minFetchVersion || v > maxFetchVersion {
		return nil, fmt.Errorf("fetch version %d is not read", v)
	}
	d := &wireDecoder{r: bytes.NewReader(body), remain: len(body)}
	res := d.response(v)
	if d.err != nil {
		return nil, d.err
	}
	return res, nil
}

// response reads the fields of a Fetch response of version v (4-11: not
// a flexible version).
func (d *wireDecoder) response(v int16) *MuxResponse {
	res := &MuxResponse{}
	if v >= 1 {
		d.int32() // throttle time
	}
	if v >= 7 {
		res.ErrorCode = d.int16()
		d.int32() // session id
	}
	nt := d.count(2 + 4)
	for range nt {
		t := MuxTopic{Topic: d.string()}
		np := d.count(4 + 2 + 8 + 8 + 4 + 4)
		for range np {
			p := MuxPartition{Partition: d.int32(), ErrorCode: d.int16(), HighWatermark: d.int64(), LastStableOffset: -1, LogStartOffset: -1}
			p.LastStableOffset = d.int64()
			if v >= 5 {
				p.LogStartOffset = d.int64()
			}
			if na := int32(d.int32()); na >= 0 {
				if int64(na)*16 > int64(d.remain) {
					d.fail(fmt.Errorf("%d aborted transactions do not fit the %d bytes left", na, d.remain))
					return nil
				}
				p.Aborted = make([]Aborted, 0, na)
				for i := int32(0); i < na && d.err == nil; i++ {
					p.Aborted = append(p.Aborted, Aborted{ProducerID: d.int64(), FirstOffset: d.int64()})
				}
			}
			if v >= 11 {
				d.int32() // preferred read replica
			}
			p.Records = d.bytes()
			if d.err != nil {
				return nil
			}
			t.Partitions = append(t.Partitions, p)
		}
		res.Topics = append(res.Topics, t)
	}
	if d.err != nil {
		return nil
	}
	return res
}

// wireDecoder reads big-endian fields from r, at most remain bytes; the
// first failure sticks.
type wireDecoder struct {
	r      io.Reader
	remain int
	err    error
	buf    [8]byte
}

var errShort = errors.New("the response ends inside a field")

func (d *wireDecoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *wireDecoder) read(n int) []byte {
	if d.err != nil {
		return d.buf[:n]
	}
	if n > d.remain {
		d.fail(errShort)
		return d.buf[:n]
	}
	if _, err := io.ReadFull(d.r, d.buf[:n]); err != nil {
		d.fail(err)
	}
	d.remain -= n
	return d.buf[:n]
}

func (d *wireDecoder) int16() int16 { return int16(binary.BigEndian.Uint16(d.read(2))) }
func (d *wireDecoder) int32() int32 { return int32(binary.BigEndian.Uint32(d.read(4))) }
func (d *wireDecoder) int64() int64 { return int64(binary.BigEndian.Uint64(d.read(8))) }

// count reads an array length whose elements take at least min bytes each.
func (d *wireDecoder) count(min int) int {
	n := d.int32()
	if d.err != nil {
		return 0
	}
	if n < 0 || int64(n)*int64(min) > int64(d.remain) {
		d.fail(fmt.Errorf("an array of %d elements does not fit the %d bytes left", n, d.remain))
		return 0
	}
	return int(n)
}

func (d *wireDecoder) string() string {
	n := int(d.int16())
	if d.err != nil {
		return ""
	}
	if n < 0 || n > d.remain {
		d.fail(fmt.Errorf("a string of %d bytes does not fit the %d bytes left", n, d.remain))
		return ""
	}
	b := make([]byte, n)
	d.full(b)
	return string(b)
}

// bytes reads nullable bytes into a buffer of their own.
func (d *wireDecoder) bytes() []byte {
	n := int(d.int32())
	if d.err != nil || n == -1 {
		return nil
	}
	if n < 0 || n > d.remain {
		d.fail(fmt.Errorf("a record set of %d bytes does not fit the %d bytes left", n, d.remain))
		return nil
	}
	b := make([]byte, n)
	d.full(b)
	return b
}

func (d *wireDecoder) full(b []byte) {
	if d.err != nil {
		return
	}
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail(err)
	}
	d.remain -= len(b)
}

func (d *wireDecoder) skip(n int) {
	if d.err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, d.r, int64(n)); err != nil {
		d.fail(err)
	}
	d.remain -= n
}
