package group

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestSubscriptionRoundTrip(t *testing.T) {
	for _, s := range []subscription{
		{},
		{InstanceID: "pod-0", Addr: "10.0.0.1:8080", Owned: []int{0, 3, 5}},
		{InstanceID: "x", Owned: []int{maxTasks - 1}},
		{InstanceID: strings.Repeat("i", maxIDLen), Addr: strings.Repeat("a", maxAddrLen), Owned: []int{0, 1, 2, 1000, 70000}},
	} {
		b, err := encodeSubscription(s)
		if err != nil {
			t.Fatalf("encode %+v: %v", s, err)
		}
		got, err := decodeSubscription(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", s, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("round trip: got %+v, want %+v", got, s)
		}
	}
}

func TestSubscriptionEncodeNormalizes(t *testing.T) {
	b, err := encodeSubscription(subscription{InstanceID: "a", Owned: []int{5, 1, 5, 3}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 3, 5}; !reflect.DeepEqual(got.Owned, want) {
		t.Errorf("owned = %v, want %v", got.Owned, want)
	}
}

func TestSubscriptionEncodeRejects(t *testing.T) {
	for name, s := range map[string]subscription{
		"long id":       {InstanceID: strings.Repeat("i", maxIDLen+1)},
		"long addr":     {Addr: strings.Repeat("a", maxAddrLen+1)},
		"negative task": {Owned: []int{-1}},
		"huge task":     {Owned: []int{maxTasks}},
	} {
		if _, err := encodeSubscription(s); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func TestSubscriptionDecodeRejects(t *testing.T) {
	huge := binary.AppendUvarint([]byte{1, 0, 0}, 1<<40) // owned count far beyond the bytes
	for name, b := range map[string][]byte{
		"empty":            nil,
		"version 0":        {0, 0, 0, 0},
		"truncated":        {1, 5, 'a'},
		"long id":          append(binary.AppendUvarint([]byte{1}, maxIDLen+1), make([]byte, maxIDLen+1)...),
		"count past end":   {1, 0, 0, 3, 1},
		"huge count":       huge,
		"not ascending":    {1, 0, 0, 2, 4, 0},
		"trailing":         {1, 0, 0, 0, 9},
		"overlong varint":  {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"oversized blob":   make([]byte, maxUserData+1),
		"task beyond max":  binary.AppendUvarint([]byte{1, 0, 0, 1}, maxTasks),
		"sum beyond max":   binary.AppendUvarint([]byte{1, 0, 0, 2, 0xff, 0xff, 0x3f}, 1<<10),
		"string past end":  {1, 3, 'a'},
		"addr past end":    {1, 0, 2},
		"only the version": {1},
	} {
		if _, err := decodeSubscription(b); !errors.Is(err, errUserData) {
			t.Errorf("%s: err = %v, want errUserData", name, err)
		}
	}
}

func TestSubscriptionNewerVersionIgnoresTrailer(t *testing.T) {
	b, _ := encodeSubscription(subscription{InstanceID: "a", Owned: []int{2}})
	b[0] = 2
	b = append(b, "future fields"...)
	got, err := decodeSubscription(b)
	if err != nil || got.InstanceID != "a" || !reflect.DeepEqual(got.Owned, []int{2}) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func testAssignmentData() assignmentData {
	return assignmentData{
		Moved:      2,
		Partitions: 6,
		Leader:     "pod-0",
		Members:    []Owner{{"pod-0", "h0:1"}, {"pod-1", "h1:1"}},
		Owners:     []uint32{1, 2, 1, 2, 0, 1},
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	big := assignmentData{Partitions: 1 << 16, Members: []Owner{{"a", ""}, {"b", ""}, {"c", ""}}, Owners: make([]uint32, 1<<16)}
	for p := range big.Owners {
		big.Owners[p] = uint32(p%3 + 1)
	}
	for _, a := range []assignmentData{
		{},
		testAssignmentData(),
		{Leader: "pod-0", Members: []Owner{{"pod-0", ""}}, Err: "topics are not co-partitioned: market has 6 partitions, notifications has 8 partitions"},
		big,
	} {
		b, err := encodeAssignment(a)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		got, err := decodeAssignment(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, a) {
			t.Errorf("round trip: got %+v, want %+v", got, a)
		}
	}
	if n, _ := encodeAssignment(big); len(n) > 2*len(big.Owners)+64 {
		t.Errorf("owner map of %d tasks takes %d bytes", len(big.Owners), len(n))
	}
}

func TestAssignmentOwners(t *testing.T) {
	got := testAssignmentData().owners()
	want := []Owner{{"pod-0", "h0:1"}, {"pod-1", "h1:1"}, {"pod-0", "h0:1"}, {"pod-1", "h1:1"}, {}, {"pod-0", "h0:1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("owners = %v, want %v", got, want)
	}
}

func TestAssignmentEncodeRejects(t *testing.T) {
	bad := testAssignmentData()
	bad.Owners[0] = 3
	short := testAssignmentData()
	short.Owners = short.Owners[:3]
	for name, a := range map[string]assignmentData{
		"owner outside table": bad,
		"owner map length":    short,
		"negative moved":      {Moved: -1},
		"too many partitions": {Partitions: maxTasks + 1},
	} {
		if _, err := encodeAssignment(a); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	long := assignmentData{Err: strings.Repeat("e", maxErrLen+10)}
	b, err := encodeAssignment(long)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeAssignment(b); err != nil || len(got.Err) != maxErrLen {
		t.Errorf("long error: %d bytes, %v", len(got.Err), err)
	}
}

func TestAssignmentDecodeRejects(t *testing.T) {
	good, _ := encodeAssignment(testAssignmentData())
	ownerOut := bytes.Clone(good)
	// The owner indexes are the 6 bytes before the final empty error string.
	ownerOut[len(ownerOut)-2] = 9
	for name, b := range map[string][]byte{
		"empty":           nil,
		"truncated":       good[:len(good)-3],
		"owner outside":   ownerOut,
		"trailing":        append(bytes.Clone(good), 0),
		"huge partitions": binary.AppendUvarint([]byte{1, 0}, maxTasks+1),
		"partitions past": {1, 0, 200, 0, 0, 0},
		"members past":    {1, 0, 0, 0, 100, 0, 0},
		"error past end":  {1, 0, 0, 0, 0, 5, 'x'},
	} {
		if _, err := decodeAssignment(b); !errors.Is(err, errUserData) {
			t.Errorf("%s: err = %v, want errUserData", name, err)
		}
	}
}

func FuzzDecodeSubscription(f *testing.F) {
	for _, s := range []subscription{{}, {InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 2, 9}},
		{InstanceID: "pod-2", Owned: []int{1}, Refused: []int{3}, Live: true, Held: map[int]int64{1: 40, 5: 0}, Standby: []int{5, 7}},
		{InstanceID: "pod-3", Owned: []int{2}, Planned: []int{6, 8}}} {
		b, _ := encodeSubscription(s)
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 2, 4, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSubscription(b)
		if err != nil {
			return
		}
		again, err := encodeSubscription(s)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", s, err)
		}
		s2, err := decodeSubscription(again)
		if err != nil {
			t.Fatalf("re-encoded blob does not decode: %v", err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip: %+v != %+v", s, s2)
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	ha := testAssignmentData()
	ha.Standby, ha.Warmup = []int{1, 3}, []int{3}
	past := testAssignmentData()
	past.Past = []int{4, 6}
	for _, a := range []assignmentData{{}, testAssignmentData(), {Err: "boom"}, ha, past} {
		b, _ := encodeAssignment(a)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAssignment(b)
		if err != nil {
			return
		}
		_ = a.owners()
		again, err := encodeAssignment(a)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", a, err)
		}
		a2, err := decodeAssignment(again)
		if err != nil {
			t.Fatalf("re-encoded blob does not decode: %v", err)
		}
		if !reflect.DeepEqual(a, a2) {
			t.Fatalf("round trip: %+v != %+v", a, a2)
		}
	})
}

func TestSubscriptionHARoundTrip(t *testing.T) {
	for _, s := range []subscription{
		{InstanceID: "pod-0", Owned: []int{1}, Live: true},
		{InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 4}, Refused: []int{2}, Live: true,
			Held: map[int]int64{0: 17, 3: 0, 4: maxOffset}, Standby: []int{3, 5}},
		{InstanceID: "pod-2", Held: map[int]int64{maxTasks - 1: 1 << 40}},
		{InstanceID: "pod-3", Standby: []int{0}},
	} {
		b, err := encodeSubscription(s)
		if err != nil {
			t.Fatalf("encode %+v: %v", s, err)
		}
		if b[0] != userDataVersionHA {
			t.Errorf("%+v: version %d, want %d", s, b[0], userDataVersionHA)
		}
		got, err := decodeSubscription(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", s, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("round trip: got %+v, want %+v", got, s)
		}
	}
}

// An old leader reads the version 1 fields of a version 3 subscription:
// decoding with the version byte it knows gives the same instance, address
// and owned tasks.
func TestSubscriptionHAReadableByOldLeaders(t *testing.T) {
	s := subscription{InstanceID: "pod-1", Addr: "h:1", Owned: []int{0, 4}, Live: true,
		Held: map[int]int64{0: 17, 3: 5}, Standby: []int{3}}
	b, err := encodeSubscription(s)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := encodeSubscription(subscription{InstanceID: s.InstanceID, Addr: s.Addr, Owned: s.Owned})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b[1:], v1[1:]) {
		t.Fatalf("version 3 blob %x does not start with the version 1 fields %x", b, v1)
	}
	// A version 2 reader (refused tasks, then ignore the rest) sees no
	// refused tasks and the same version 1 fields.
	b2 := bytes.Clone(b)
	b2[0] = userDataVersionRefused
	got, err := decodeSubscription(b2)
	if err != nil {
		t.Fatal(err)
	}
	want := subscription{InstanceID: s.InstanceID, Addr: s.Addr, Owned: s.Owned}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("as version 2: %+v, want %+v", got, want)
	}
}

// Without the version 3 values the blob is exactly what older members
// write: version 1, or version 2 with refused tasks.
func TestSubscriptionWritesLowestVersion(t *testing.T) {
	for _, c := range []struct {
		s    subscription
		want byte
	}{
		{subscription{InstanceID: "a", Owned: []int{1}}, userDataVersion},
		{subscription{InstanceID: "a", Owned: []int{1}, Refused: []int{2}}, userDataVersionRefused},
		{subscription{InstanceID: "a", Held: map[int]int64{}}, userDataVersion},
		{subscription{InstanceID: "a", Live: true}, userDataVersionHA},
	} {
		b, err := encodeSubscription(c.s)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != c.want {
			t.Errorf("%+v: version %d, want %d", c.s, b[0], c.want)
		}
	}
}

func TestSubscriptionHARejects(t *testing.T) {
	for name, s := range map[string]subscription{
		"negative offset": {Held: map[int]int64{1: -1}},
		"negative held":   {Held: map[int]int64{-1: 1}},
		"huge standby":    {Standby: []int{maxTasks}},
	} {
		if _, err := encodeSubscription(s); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	// A version 3 section that does not decode is ignored, like the fields
	// of an unknown version; the version 1 fields stay.
	good, _ := encodeSubscription(subscription{InstanceID: "a", Owned: []int{1}, Live: true, Held: map[int]int64{2: 9}})
	for name, b := range map[string][]byte{
		"truncated held": good[:len(good)-2],
		"huge count":     binary.AppendUvarint([]byte{3, 1, 'a', 0, 1, 2, 0, 1}, 1<<40),
		"offset too big": binary.AppendUvarint([]byte{3, 1, 'a', 0, 1, 2, 0, 1, 1, 2}, maxOffset+1),
	} {
		got, err := decodeSubscription(b)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got.InstanceID != "a" || got.Live || got.Held != nil || got.Standby != nil {
			t.Errorf("%s: got %+v, want the version 1 fields only", name, got)
		}
	}
}

func TestAssignmentHARoundTrip(t *testing.T) {
	a := testAssignmentData()
	a.Standby = []int{1, 3, 4}
	a.Warmup = []int{4}
	b, err := encodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != assignmentVersionHA {
		t.Errorf("version %d, want %d", b[0], assignmentVersionHA)
	}
	got, err := decodeAssignment(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("round trip: got %+v, want %+v", got, a)
	}
	// Old members read the version 1 fields: the owner map is intact.
	v1, _ := encodeAssignment(testAssignmentData())
	if !bytes.HasPrefix(b[1:], v1[1:]) {
		t.Errorf("version 2 blob %x does not start with the version 1 fields %x", b, v1)
	}
	// Without standbys and warm-ups the blob is version 1, as before.
	if v1[0] != userDataVersion {
		t.Errorf("no standbys: version %d, want %d", v1[0], userDataVersion)
	}
	if _, err := encodeAssignment(assignmentData{Standby: []int{-1}}); err == nil {
		t.Error("negative standby encoded")
	}
}
