package fetch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
)

// offsetsFunc is an Offsets answering with a function of the request.
type offsetsFunc func(req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error)

func (f offsetsFunc) ListOffsets(_ context.Context, req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
	return f(req)
}

// TestListOffset: ListOffset asks for the one partition and the offset
// kind given, returns the first or the end offset of that partition (not
// of another one in the response), and wraps each failure with the
// topic-partition.
func TestListOffset(t *testing.T) {
	var asked []kafka.OffsetRequest
	answer := func(parts ...kafka.PartitionOffsets) offsetsFunc {
		return func(req *kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
			asked = req.Topics["market"]
			return &kafka.ListOffsetsResponse{Topics: map[string][]kafka.PartitionOffsets{"market": parts}}, nil
		}
	}
	two := answer(
		kafka.PartitionOffsets{Partition: 2, FirstOffset: 100, LastOffset: 900},
		kafka.PartitionOffsets{Partition: 3, FirstOffset: 5, LastOffset: 7},
	)
	for _, tc := range []struct {
		name    string
		c       Offsets
		which   int64
		want    int64
		wantErr string
	}{
		{"first", two, kafka.FirstOffset, 5, ""},
		{"end", two, kafka.LastOffset, 7, ""},
		{"partition error", answer(kafka.PartitionOffsets{Partition: 3, Error: kafka.UnknownTopicOrPartition}), kafka.LastOffset, 0,
			"list offsets of market-3: " + kafka.UnknownTopicOrPartition.Error()},
		{"partition missing", answer(kafka.PartitionOffsets{Partition: 2, LastOffset: 9}), kafka.LastOffset, 0,
			"list offsets of market-3: partition missing from the response"},
		{"request fails", offsetsFunc(func(*kafka.ListOffsetsRequest) (*kafka.ListOffsetsResponse, error) {
			return nil, errors.New("broken pipe")
		}), kafka.FirstOffset, 0, "list offsets of market-3: broken pipe"},
	} {
		asked = nil
		got, err := ListOffset(context.Background(), tc.c, "market", 3, tc.which)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: ListOffset = %d, %v; want %d", tc.name, got, err, tc.want)
		}
		if len(asked) != 1 || asked[0].Partition != 3 || asked[0].Timestamp != tc.which {
			t.Errorf("%s: asked for %+v, want partition 3 at %d", tc.name, asked, tc.which)
		}
	}
	// A partition error is kept for errors.Is.
	_, err := ListOffset(context.Background(), answer(kafka.PartitionOffsets{Partition: 3, Error: kafka.NotLeaderForPartition}), "market", 3, kafka.LastOffset)
	if !errors.Is(err, kafka.NotLeaderForPartition) {
		t.Errorf("err = %v, want one wrapping NotLeaderForPartition", err)
	}
}
