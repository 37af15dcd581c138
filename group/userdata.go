package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// User data formats.
//
// Both user data blobs are opaque to Kafka: the subscription's travels in the
// JoinGroup protocol metadata (kafka-go's GroupProtocolSubscription.UserData),
// the assignment's in the SyncGroup member assignment
// (GroupProtocolAssignment.UserData). They come from other processes, so the
// decoders treat them as untrusted: every count and length is bounded before
// anything is allocated from it, and decoding never panics.
//
// Integers are unsigned varints (encoding/binary's Uvarint); a string is a
// uvarint length followed by that many bytes. A blob starts with one version
// byte. Version 1 is the only one written. A decoder rejects version 0 and
// trailing bytes after a version 1 blob; a blob with a higher version must
// start with the version 1 fields, and what follows them is ignored, so a
// newer member can add fields at the end without breaking older leaders.
// Each version appends its fields after those of the previous one; a
// decoder reads the fields of the versions it knows, and ignores a group
// of them (all the fields one version added) that does not decode, as it
// ignores the fields of versions it does not know. The lowest version that
// carries the values is written, so a blob without the newer values is
// byte for byte what an older member writes.
//
// Subscription, version 1:
//
//	version   byte (1)
//	instance  string (at most maxIDLen bytes)
//	addr      string (at most maxAddrLen bytes)
//	nOwned    uvarint (at most maxTasks)
//	owned     nOwned uvarints: the first task, then the gap to the previous
//	          task (at least 1); tasks are strictly ascending and < maxTasks
//
// Assignment, version 1:
//
//	version     byte (1)
//	moved       uvarint (at most maxTasks)
//	partitions  uvarint P (at most maxTasks)
//	leader      string: instance id of the member whose plan this is
//	nMembers    uvarint M (at most maxMembers)
//	members     M × (instance string, addr string)
//	owners      P uvarints: 0 for no owner, i+1 for members[i]
//	error       string (at most maxErrLen bytes): why the leader could not
//	            plan, empty when it could
//
// Subscription, version 2: version 1, then the refused tasks (release.go).
//
// Subscription, version 3 (high availability): version 2 (the refused
// list may be empty), then
//
//	flags     uvarint: bit 0 set when owned is the member's current
//	          assignment ("live": its tasks are running), clear when owned
//	          came from Config.Owned (stores left on disk, before the
//	          first assignment); other bits are ignored
//	nHeld     uvarint (at most maxTasks)
//	held      nHeld tasks, encoded as the owned tasks, then nHeld uvarints:
//	          the next offset of each task's state partition that the
//	          member's store lacks (at most maxOffset)
//	standby   the member's current standby tasks, encoded as the owned tasks
//
// Assignment, version 2: version 1, then the recipient's own
//
//	standby   tasks it keeps a standby copy of (warm-ups included),
//	          encoded as the owned tasks
//	warmup    the subset of standby that are warm-ups, encoded likewise
//
// With version 2 the leader sends each member its own blob; the owner map
// is the same in all of them.
//
// Subscription, version 4 (partition count history): version 3 (its
// fields may be empty), then
//
//	planned   the partition counts the member's tasks were planned with so
//	          far (Config.PartitionCounts: its state dirs and the
//	          assignments it received), encoded as the owned tasks (at most
//	          maxPlannedCounts, each at least 1)
//
// Assignment, version 3: version 2 (standby and warmup may be empty), then
//
//	past      the partition counts planned before this plan's, encoded
//	          likewise: the union of the members' planned counts below the
//	          plan's count (join looks a symbol moved by a partition change
//	          up in its task under each of them)
//
// A leader that knows no version 4 subscription ignores planned and sends
// no past counts: its members use the counts in their own state dirs.
//
// The owner map is a member table plus one small index per task, so it costs
// about one byte per task however long the instance ids are.
const (
	userDataVersion = 1
	// userDataVersionHA is the subscription version with the live flag,
	// held stores and standbys, and the assignment version with the
	// recipient's standbys and warm-ups.
	userDataVersionHA   = 3
	assignmentVersionHA = 2
	// userDataVersionPlanned is the subscription version with the planned
	// partition counts, assignmentVersionPast the assignment version with
	// the past ones.
	userDataVersionPlanned = 4
	assignmentVersionPast  = 3
	maxPlannedCounts       = 64      // more partition changes than any group makes
	maxOffset              = 1 << 62 // a Kafka offset is an int64

	maxIDLen     = 255     // Kafka limits group.instance.id to 249 characters
	maxAddrLen   = 255     // host:port
	maxErrLen    = 4096    // leader's error text
	maxTasks     = 1 << 20 // partition indexes
	maxMembers   = 1 << 16
	maxUserData  = 8 << 20 // any blob larger than this is rejected unread
	minBlobBytes = 1
)

// errUserData is wrapped by every decoding error.
var errUserData = errors.New("group: malformed user data")

// subscription is what a member tells the leader in JoinGroup.
type subscription struct {
	InstanceID string
	Addr       string
	Owned      []int // ascending, distinct
	Refused    []int // ascending, distinct; version 2 (release.go)
	// Version 3.
	Live    bool          // Owned is the current assignment, its tasks run
	Held    map[int]int64 // task -> next state offset its store lacks
	Standby []int         // ascending, distinct: current standby tasks
	// Version 4: partition counts planned so far, ascending, distinct, >= 1.
	Planned []int
}

// assignmentData is what the leader tells every member in SyncGroup, besides
// the topic-partitions themselves.
type assignmentData struct {
	Moved      int
	Partitions int
	Leader     string   // instance id of the planning member
	Members    []Owner  // member table
	Owners     []uint32 // per task: 0 = none, i+1 = Members[i]
	Err        string
	// Version 2: the recipient's standby tasks (warm-ups included) and
	// warm-up tasks, ascending.
	Standby []int
	Warmup  []int
	// Version 3: the partition counts planned before Partitions,
	// ascending.
	Past []int
}

// checkPartitionCounts returns partition counts normalized, or an error naming
// what when one is outside [1, maxTasks) or there are more than
// maxPlannedCounts.
func checkPartitionCounts(what string, counts []int) ([]int, error) {
	out, err := checkTasks(what, counts)
	switch {
	case err != nil:
		return nil, err
	case len(out) > 0 && out[0] < 1:
		return nil, fmt.Errorf("group: %s partition count %d, want at least 1", what, out[0])
	case len(out) > maxPlannedCounts:
		return nil, fmt.Errorf("group: %d %s partition counts, the limit is %d", len(out), what, maxPlannedCounts)
	}
	return out, nil
}

// counts reads partition counts encoded as tasks, bounded as checkPartitionCounts
// bounds them.
func (r *reader) counts(what string) []int {
	out := r.tasks(what)
	switch {
	case r.err != nil:
	case len(out) > maxPlannedCounts:
		r.fail("%s: %d partition counts exceed the limit %d", what, len(out), maxPlannedCounts)
	case len(out) > 0 && out[0] < 1:
		r.fail("%s: partition count 0", what)
	default:
		return out
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTasks(b []byte, tasks []int) []byte {
	b = binary.AppendUvarint(b, uint64(len(tasks)))
	prev := 0
	for i, t := range tasks {
		if i == 0 {
			b = binary.AppendUvarint(b, uint64(t))
		} else {
			b = binary.AppendUvarint(b, uint64(t-prev))
		}
		prev = t
	}
	return b
}

// encodeSubscription encodes s. It fails when a field exceeds its bound, so
// a member never publishes what other members would reject.
func encodeSubscription(s subscription) ([]byte, error) {
	if len(s.InstanceID) > maxIDLen {
		return nil, fmt.Errorf("group: instance id is %d bytes, the limit is %d", len(s.InstanceID), maxIDLen)
	}
	if len(s.Addr) > maxAddrLen {
		return nil, fmt.Errorf("group: query address is %d bytes, the limit is %d", len(s.Addr), maxAddrLen)
	}
	owned, err := checkTasks("owned", s.Owned)
	if err != nil {
		return nil, err
	}
	refused, err := checkTasks("refused", s.Refused)
	if err != nil {
		return nil, err
	}
	standby, err := checkTasks("standby", s.Standby)
	if err != nil {
		return nil, err
	}
	planned, err := checkPartitionCounts("planned", s.Planned)
	if err != nil {
		return nil, err
	}
	held := make([]int, 0, len(s.Held))
	for t, off := range s.Held {
		if off < 0 || off > maxOffset {
			return nil, fmt.Errorf("group: held task %d: offset %d out of range [0, %d]", t, off, int64(maxOffset))
		}
		held = append(held, t)
	}
	if held, err = checkTasks("held", held); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8+len(s.InstanceID)+len(s.Addr)+3*len(owned)+3*len(refused)+10*len(held)+3*len(standby))
	version := byte(userDataVersion)
	switch {
	case len(planned) > 0:
		version = userDataVersionPlanned
	case s.Live || len(held) > 0 || len(standby) > 0:
		version = userDataVersionHA
	case len(refused) > 0:
		version = userDataVersionRefused
	}
	b = append(b, version)
	b = appendString(b, s.InstanceID)
	b = appendString(b, s.Addr)
	b = appendTasks(b, owned)
	if version >= userDataVersionRefused {
		b = appendTasks(b, refused)
	}
	if version >= userDataVersionHA {
		var flags uint64
		if s.Live {
			flags |= 1
		}
		b = binary.AppendUvarint(b, flags)
		b = appendTasks(b, held)
		for _, t := range held {
			b = binary.AppendUvarint(b, uint64(s.Held[t]))
		}
		b = appendTasks(b, standby)
	}
	if version >= userDataVersionPlanned {
		b = appendTasks(b, planned)
	}
	if len(b) > maxUserData {
		return nil, fmt.Errorf("group: subscription user data is %d bytes, the limit is %d", len(b), maxUserData)
	}
	return b, nil
}

// checkTasks returns tasks normalized (see normalizeTasks), or an error
// naming what when one is outside [0, maxTasks).
func checkTasks(what string, tasks []int) ([]int, error) {
	out := normalizeTasks(tasks)
	if len(out) > 0 && (out[0] < 0 || out[len(out)-1] >= maxTasks) {
		return nil, fmt.Errorf("group: %s task out of range [0, %d)", what, maxTasks)
	}
	return out, nil
}

// normalizeTasks returns tasks sorted ascending without duplicates, in a new
// slice.
func normalizeTasks(tasks []int) []int {
	out := slices.Clone(tasks)
	slices.Sort(out)
	return slices.Compact(out)
}

// reader decodes the primitives above from untrusted bytes. The first error
// sticks; later reads return zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errUserData}, args...)...)
	}
}

func (r *reader) uvarint(what string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	if v > max {
		r.fail("%s: %d exceeds the limit %d", what, v, max)
		return 0
	}
	return v
}

func (r *reader) string(what string, max int) string {
	n := int(r.uvarint(what+" length", uint64(max)))
	if r.err != nil {
		return ""
	}
	if n > len(r.b) {
		r.fail("%s: length %d, only %d bytes left", what, n, len(r.b))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// count reads an element count bounded by max and by the bytes left, given
// that every element takes at least minBytes.
func (r *reader) count(what string, max, minBytes int) int {
	n := int(r.uvarint(what, uint64(max)))
	if r.err == nil && n > len(r.b)/minBytes {
		r.fail("%s: %d elements cannot fit in %d bytes", what, n, len(r.b))
		return 0
	}
	return n
}

func (r *reader) tasks(what string) []int {
	n := r.count(what+" count", maxTasks, 1)
	if r.err != nil || n == 0 {
		return nil
	}
	out := make([]int, 0, n)
	prev := 0
	for i := range n {
		v := r.uvarint(what, maxTasks)
		if r.err != nil {
			return nil
		}
		t := int(v)
		if i > 0 {
			if v == 0 {
				r.fail("%s: not strictly ascending", what)
				return nil
			}
			t = prev + int(v)
		}
		if t >= maxTasks {
			r.fail("%s: task %d exceeds the limit %d", what, t, maxTasks-1)
			return nil
		}
		out = append(out, t)
		prev = t
	}
	return out
}

// header checks the size bound and the version byte; it reports whether the
// blob is exactly version 1 (trailing bytes are then an error).
func (r *reader) header() (exact bool) {
	if len(r.b) > maxUserData {
		r.fail("%d bytes exceed the limit %d", len(r.b), maxUserData)
		return false
	}
	if len(r.b) < minBlobBytes {
		r.fail("empty")
		return false
	}
	v := r.b[0]
	r.b = r.b[1:]
	if v == 0 {
		r.fail("version 0")
		return false
	}
	return v == userDataVersion
}

func (r *reader) end(exact bool) error {
	if r.err == nil && exact && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// decodeSubscription decodes untrusted subscription user data.
func decodeSubscription(b []byte) (subscription, error) {
	r := reader{b: b}
	exact := r.header()
	var s subscription
	s.InstanceID = r.string("instance id", maxIDLen)
	s.Addr = r.string("query address", maxAddrLen)
	s.Owned = r.tasks("owned tasks")
	if r.err == nil && !exact && b[0] >= userDataVersionRefused {
		// Version 2 appends the refused tasks, version 3 the live flag,
		// the held stores and the standbys; a newer member may append
		// more after them. Unreadable, a version's fields are ignored
		// like any field of a newer version.
		sub := reader{b: r.b}
		if refused := sub.tasks("refused tasks"); sub.err == nil {
			s.Refused = refused
			if b[0] >= userDataVersionHA {
				flags := sub.uvarint("flags", math.MaxUint64)
				held := sub.tasks("held tasks")
				offs := make(map[int]int64, len(held))
				for _, t := range held {
					offs[t] = int64(sub.uvarint("held offset", maxOffset))
				}
				standby := sub.tasks("standby tasks")
				if sub.err == nil {
					s.Live = flags&1 != 0
					if len(held) > 0 {
						s.Held = offs
					}
					s.Standby = standby
					if b[0] >= userDataVersionPlanned {
						if planned := sub.counts("planned partition counts"); sub.err == nil {
							s.Planned = planned
						}
					}
				}
			}
		}
	}
	if err := r.end(exact); err != nil {
		return subscription{}, err
	}
	return s, nil
}

// encodeAssignment encodes a. It fails when a field exceeds its bound or an
// owner index points outside the member table.
func encodeAssignment(a assignmentData) ([]byte, error) {
	switch {
	case a.Partitions < 0 || a.Partitions > maxTasks:
		return nil, fmt.Errorf("group: %d partitions, the limit is %d", a.Partitions, maxTasks)
	case a.Moved < 0 || a.Moved > maxTasks:
		return nil, fmt.Errorf("group: moved %d out of range", a.Moved)
	case len(a.Leader) > maxIDLen:
		return nil, fmt.Errorf("group: leader instance id is %d bytes, the limit is %d", len(a.Leader), maxIDLen)
	case len(a.Members) > maxMembers:
		return nil, fmt.Errorf("group: %d members, the limit is %d", len(a.Members), maxMembers)
	case len(a.Owners) != a.Partitions:
		return nil, fmt.Errorf("group: owner map has %d entries for %d partitions", len(a.Owners), a.Partitions)
	}
	errText := a.Err
	if len(errText) > maxErrLen {
		errText = errText[:maxErrLen]
	}
	b := make([]byte, 0, 16+len(a.Leader)+len(errText)+len(a.Owners)*2+len(a.Members)*32)
	standby, err := checkTasks("standby", a.Standby)
	if err != nil {
		return nil, err
	}
	warmup, err := checkTasks("warm-up", a.Warmup)
	if err != nil {
		return nil, err
	}
	past, err := checkPartitionCounts("past", a.Past)
	if err != nil {
		return nil, err
	}
	version := byte(userDataVersion)
	switch {
	case len(past) > 0:
		version = assignmentVersionPast
	case len(standby) > 0 || len(warmup) > 0:
		version = assignmentVersionHA
	}
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(a.Moved))
	b = binary.AppendUvarint(b, uint64(a.Partitions))
	b = appendString(b, a.Leader)
	b = binary.AppendUvarint(b, uint64(len(a.Members)))
	for _, m := range a.Members {
		if len(m.InstanceID) > maxIDLen || len(m.Addr) > maxAddrLen {
			return nil, fmt.Errorf("group: member %.32q: instance id or address too long", m.InstanceID)
		}
		b = appendString(b, m.InstanceID)
		b = appendString(b, m.Addr)
	}
	for p, o := range a.Owners {
		if int(o) > len(a.Members) {
			return nil, fmt.Errorf("group: owner index %d of task %d outside a table of %d members", o, p, len(a.Members))
		}
		b = binary.AppendUvarint(b, uint64(o))
	}
	b = appendString(b, errText)
	if version >= assignmentVersionHA {
		b = appendTasks(b, standby)
		b = appendTasks(b, warmup)
	}
	if version >= assignmentVersionPast {
		b = appendTasks(b, past)
	}
	if len(b) > maxUserData {
		return nil, fmt.Errorf("group: assignment user data is %d bytes, the limit is %d", len(b), maxUserData)
	}
	return b, nil
}

// decodeAssignment decodes untrusted assignment user data.
func decodeAssignment(b []byte) (assignmentData, error) {
	r := reader{b: b}
	exact := r.header()
	var a assignmentData
	a.Moved = int(r.uvarint("moved", maxTasks))
	a.Partitions = int(r.uvarint("partitions", maxTasks))
	a.Leader = r.string("leader", maxIDLen)
	n := r.count("member count", maxMembers, 2) // two empty strings at least
	if r.err == nil && n > 0 {
		a.Members = make([]Owner, 0, n)
		for range n {
			id := r.string("member instance id", maxIDLen)
			addr := r.string("member address", maxAddrLen)
			if r.err != nil {
				break
			}
			a.Members = append(a.Members, Owner{InstanceID: id, Addr: addr})
		}
	}
	if r.err == nil && a.Partitions > len(r.b) {
		r.fail("owner map: %d tasks cannot fit in %d bytes", a.Partitions, len(r.b))
	}
	if r.err == nil && a.Partitions > 0 {
		a.Owners = make([]uint32, a.Partitions)
		for p := range a.Owners {
			a.Owners[p] = uint32(r.uvarint("owner index", uint64(len(a.Members))))
		}
	}
	a.Err = r.string("error", maxErrLen)
	if r.err == nil && !exact && b[0] >= assignmentVersionHA {
		sub := reader{b: r.b}
		standby := sub.tasks("standby tasks")
		warmup := sub.tasks("warm-up tasks")
		if sub.err == nil {
			a.Standby, a.Warmup = standby, warmup
			if b[0] >= assignmentVersionPast {
				if past := sub.counts("past partition counts"); sub.err == nil {
					a.Past = past
				}
			}
		}
	}
	if err := r.end(exact); err != nil {
		return assignmentData{}, err
	}
	return a, nil
}

// owners expands the owner table into one Owner per task.
func (a assignmentData) owners() []Owner {
	out := make([]Owner, len(a.Owners))
	for p, o := range a.Owners {
		if o > 0 && int(o) <= len(a.Members) {
			out[p] = a.Members[o-1]
		}
	}
	return out
}
