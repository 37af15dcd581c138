package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/joiner-dev/joiner/record"
	"github.com/twmb/franz-go/pkg/kfake"
)

// --create-topics when the paired topic exists with another count: the
// missing one follows the existing count with a WARN naming both numbers,
// unless --partitions was given explicitly, which is refused.
func TestCreateTopicsPairedCountDiffers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing string
		explicit bool
	}{
		{"notifications missing, default partitions", "market", false},
		{"market missing, default partitions", "notifications", false},
		{"notifications missing, explicit partitions", "market", true},
		{"market missing, explicit partitions", "notifications", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := startBroker(t, kfake.SeedTopics(6, tc.existing))
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			err := ensureTopics(context.Background(), client, record.Topics{}, 8, 1, tc.explicit, time.Hour, log)
			counts, cerr := PartitionCounts(context.Background(), client, []string{"market", "notifications"})
			if cerr != nil {
				t.Fatal(cerr)
			}
			if tc.explicit {
				if !errors.Is(err, ErrPartitionsConflict) {
					t.Fatalf("err = %v, want ErrPartitionsConflict", err)
				}
				for _, want := range []string{"Partitions is 8", tc.existing + " already has 6"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if len(counts) != 1 {
					t.Errorf("topics after a refusal: %v, want only %s", counts, tc.existing)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if counts["market"] != 6 || counts["notifications"] != 6 {
				t.Errorf("counts = %v, want both 6", counts)
			}
			l := logs.String()
			for _, want := range []string{"level=WARN", "partitions=6", "flag_partitions=8", "pair=" + tc.existing} {
				if !strings.Contains(l, want) {
					t.Errorf("log does not contain %q:\n%s", want, l)
				}
			}
		})
	}
}

// When the counts agree, or neither topic exists, nothing is warned.
func TestCreateTopicsNoWarningWhenCountsAgree(t *testing.T) {
	client := startBroker(t, kfake.SeedTopics(6, "market"))
	var logs bytes.Buffer
	if err := ensureTopics(context.Background(), client, record.Topics{}, 6, 1, true, time.Hour, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("warned with equal counts:\n%s", logs.String())
	}
}
