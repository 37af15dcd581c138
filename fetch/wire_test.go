package fetch

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// encodedResponse is kafka-go's encoding of a Fetch response of version
// v (after the size and correlation id): two topics, aborted
// transactions and a partition error.
func encodedResponse(t testing.TB, v int16) []byte {
	set := func(vals ...string) protocol.RecordSet {
		var recs []kafka.Record
		for _, s := range vals {
			recs = append(recs, kafka.Record{Value: kafka.NewBytes([]byte(s))})
		}
		return protocol.RecordSet{Version: 2, Records: kafka.NewRecordReader(recs...)}
	}
	res := &fetchapi.Response{ErrorCode: 0, SessionID: 7, Topics: []fetchapi.ResponseTopic{
		{Topic: "market", Partitions: []fetchapi.ResponsePartition{
			{Partition: 3, HighWatermark: 100, LastStableOffset: 90, LogStartOffset: 5, RecordSet: set("a", "b"),
				AbortedTransactions: []fetchapi.ResponseTransaction{{ProducerID: 11, FirstOffset: 40}, {ProducerID: 12, FirstOffset: 50}}},
			{Partition: 4, ErrorCode: 6, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, RecordSet: set("x")},
		}},
		{Topic: "notifications", Partitions: []fetchapi.ResponsePartition{
			{Partition: 0, HighWatermark: 9, LastStableOffset: 9, LogStartOffset: 0, RecordSet: set("c")},
		}},
	}}
	var buf bytes.Buffer
	if err := protocol.WriteResponse(&buf, v, 1, res); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[8:]
}

// TestParseMuxResponse: every field a Mux reads, in every version it
// reads, is what kafka-go's encoder wrote.
func TestParseMuxResponse(t *testing.T) {
	for v := int16(minFetchVersion); v <= maxFetchVersion; v++ {
		res, err := parseMuxResponse(encodedResponse(t, v), v)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		logStart := func(o int64) int64 {
			if v < 5 {
				return -1
			}
			return o
		}
		got := fmt.Sprintf("%+v", shape(t, res))
		want := fmt.Sprintf("%+v", []string{
			fmt.Sprintf("market-3 err 0 hwm 100 lso 90 start %d aborted [{11 40} {12 50}] [a b]", logStart(5)),
			fmt.Sprintf("market-4 err 6 hwm -1 lso -1 start %d aborted [] [x]", logStart(-1)),
			fmt.Sprintf("notifications-0 err 0 hwm 9 lso 9 start %d aborted [] [c]", logStart(0)),
		})
		if got != want {
			t.Errorf("v%d:\n got %s\nwant %s", v, got, want)
		}
	}
	if _, err := parseMuxResponse(encodedResponse(t, 11)[:40], 11); err == nil {
		t.Error("a cut response parsed")
	}
}

func shape(t *testing.T, res *MuxResponse) []string {
	var out []string
	for _, tp := range res.Topics {
		for _, p := range tp.Partitions {
			recs, err := NewRawRecords(p.Records, nil).AppendTo(nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s-%d err %d hwm %d lso %d start %d aborted %v %v", tp.Topic, p.Partition, p.ErrorCode,
				p.HighWatermark, p.LastStableOffset, p.LogStartOffset, slices.Concat([]Aborted{}, p.Aborted), values(recs)))
		}
	}
	return out
}

// FuzzParseMuxResponse: any bytes as a response body never panic, and
// never claim more than the body holds.
func FuzzParseMuxResponse(f *testing.F) {
	for v := int16(minFetchVersion); v <= maxFetchVersion; v++ {
		f.Add(encodedResponse(f, v), v)
	}
	f.Fuzz(func(t *testing.T, body []byte, v int16) {
		res, err := parseMuxResponse(body, v)
		if err != nil {
			return
		}
		n := 0
		for _, tp := range res.Topics {
			for _, p := range tp.Partitions {
				n += len(p.Records) + 16*len(p.Aborted)
			}
		}
		if n > len(body) {
			t.Fatalf("%d bytes of records and aborted transactions from a body of %d", n, len(body))
		}
	})
}
