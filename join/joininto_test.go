package join

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/joiner-dev/joiner/murmur2"
	"github.com/joiner-dev/joiner/record"
)

// A chunk's alerts are encoded as they are joined; when a lookup of the
// batch fails, what the batch added is taken back (the notifications are
// joined again on the retry), and what the chunk held before stays.
func TestJoinIntoRollsBackAFailedBatch(t *testing.T) {
	w, pt, _ := newTestWorker(t)
	w.assignment.Partitions = 2 // task 1 is nobody's: its lookups fail
	symbolOfTask := func(q int) string {
		for i := 0; ; i++ {
			if s := fmt.Sprintf("S%d", i); murmur2.Partition([]byte(s), 2) == q {
				return s
			}
		}
	}
	own, other := symbolOfTask(0), symbolOfTask(1)
	ctx := context.Background()
	var e encoded
	if _, err := pt.joinInto(ctx, &e, []fetchedRecord{recAt(0, 1000, `{"id":"n0","symbol":"`+own+`"}`)}); err != nil {
		t.Fatal(err)
	}
	before, spans := bytes.Clone(e.buf), len(e.spans)
	_, err := pt.joinInto(ctx, &e, []fetchedRecord{
		recAt(1, 1001, `{"id":"n1","symbol":"`+own+`"}`),
		recAt(2, 1002, `{"id":"n2","symbol":"`+other+`"}`),
	})
	if !errors.Is(err, errLookup) {
		t.Fatalf("joinInto with an unknown owner: err %v, want errLookup", err)
	}
	if !bytes.Equal(e.buf, before) || len(e.spans) != spans || e.results != [len(record.Results)]int{0, 0, 0, 1} {
		t.Errorf("after the failed batch the chunk holds %d alerts %q (results %v); want the 1 it held: %q", len(e.spans), e.buf, e.results, before)
	}
}
