// Package planjson reads and writes the JSON of the co-partition planner,
// as `joiner assign` uses it: a strict decoder of the request (one object,
// known fields each at most once, integers only, strings that are Unicode
// text: no invalid UTF-8, no unpaired surrogate, see jsonstr.Strict;
// nothing after it) whose errors name the field and, for syntax errors,
// the byte offset, and a fast writer of the plan.
package planjson

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/internal/jsonstr"
)

// Request is the decoded input object. Which of "partitions" and "topics"
// was given is kept apart from their values: use PartitionCount for the
// number of tasks and Options for the high-availability fields.
type Request struct {
	// Partitions and Topics are the "partitions" and "topics" fields;
	// exactly one of them must be given.
	Partitions int
	Topics     map[string]int
	// Members is "members", in input order; Previous is "previous"
	// (nil when absent).
	Members  []string
	Previous map[string][]int

	// The high-availability fields (docs/planner.md); any of them makes
	// the plan copartition.AssignWith's.
	standbys              int
	previousStandby       map[string][]int
	lags                  map[string]map[int]int64
	acceptableRecoveryLag int64
	maxWarmupReplicas     int

	hasPartitions, hasTopics, hasMembers, hasOptions bool
}

// Options returns the AssignWith options, with the defaults for the
// fields not given, and whether any was given.
func (r *Request) Options() (copartition.Options, bool) {
	return copartition.Options{
		Standbys:              r.standbys,
		PreviousStandby:       r.previousStandby,
		Lags:                  r.lags,
		AcceptableRecoveryLag: r.acceptableRecoveryLag,
		MaxWarmupReplicas:     r.maxWarmupReplicas,
	}, r.hasOptions
}

// PartitionCount checks that exactly one of "partitions" and "topics" was
// given and that "members" was, and returns the number of tasks, validating
// the topics with copartition.Partitions.
func (r *Request) PartitionCount() (int, error) {
	switch {
	case r.hasPartitions && r.hasTopics:
		return 0, errors.New(`fields "partitions" and "topics" are mutually exclusive; give one`)
	case !r.hasPartitions && !r.hasTopics:
		return 0, errors.New(`missing field "partitions" (or "topics")`)
	case !r.hasMembers:
		return 0, errors.New(`missing field "members"`)
	case r.hasTopics:
		return copartition.Partitions(r.Topics)
	}
	return r.Partitions, nil
}

// WritePlan writes {"assignment":{...},"moved":N} and a newline, members in
// bytewise order. It is hand-rolled because encoding/json is several times
// slower on a million tasks.
func WritePlan(w io.Writer, plan copartition.Plan) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"assignment":{`)
	for i, id := range slices.Sorted(maps.Keys(plan.Assignment)) {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(appendJSONString(bw.AvailableBuffer(), id))
		bw.WriteString(":[")
		for j, t := range plan.Assignment[id] {
			b := bw.AvailableBuffer()
			if j > 0 {
				b = append(b, ',')
			}
			bw.Write(strconv.AppendInt(b, int64(t), 10))
		}
		bw.WriteByte(']')
	}
	bw.WriteString(`},"moved":`)
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(plan.Moved), 10))
	if plan.Standby != nil {
		bw.WriteString(`,"standby":`)
		writeLists(bw, plan.Standby)
	}
	if plan.Warmup != nil {
		bw.WriteString(`,"warmup":`)
		writeLists(bw, plan.Warmup)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// writeLists writes {"member":[tasks],...}, members in bytewise order.
func writeLists(bw *bufio.Writer, lists map[string][]int) {
	bw.WriteByte('{')
	for i, id := range slices.Sorted(maps.Keys(lists)) {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(appendJSONString(bw.AvailableBuffer(), id))
		bw.WriteString(":[")
		for j, t := range lists[id] {
			b := bw.AvailableBuffer()
			if j > 0 {
				b = append(b, ',')
			}
			bw.Write(strconv.AppendInt(b, int64(t), 10))
		}
		bw.WriteByte(']')
	}
	bw.WriteByte('}')
}

// appendJSONString appends s, valid UTF-8, as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// Decode decodes the input strictly: one JSON object (RFC 8259)
// with only the fields partitions, topics, members, previous, standbys,
// previous_standby, lags, acceptable_recovery_lag and max_warmup_replicas,
// each at most once and of the right type, and nothing but whitespace after
// it. Duplicate keys inside "topics", "previous", "previous_standby" and
// "lags" are errors too. Errors name
// the field and, for syntax errors, the byte offset.
func Decode(data []byte) (*Request, error) {
	d := &decoder{data: data}
	d.skipSpace()
	if d.pos == len(d.data) {
		return nil, errors.New("malformed JSON: empty input")
	}
	if d.data[d.pos] != '{' {
		kind, err := d.kind()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("input is not a JSON object (found %s)", kind)
	}
	r := &Request{
		acceptableRecoveryLag: copartition.DefaultAcceptableRecoveryLag,
		maxWarmupReplicas:     copartition.DefaultMaxWarmupReplicas,
	}
	seen := map[string]bool{}
	err := d.object(func(key string) error {
		if seen[key] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "partitions":
			r.Partitions, err = d.integer()
		case "topics":
			r.Topics = map[string]int{}
			err = d.object(func(topic string) error {
				if _, dup := r.Topics[topic]; dup {
					return fmt.Errorf("duplicate topic %q", topic)
				}
				n, err := d.integer()
				if err != nil {
					return fmt.Errorf("topic %q: %w", topic, err)
				}
				r.Topics[topic] = n
				return nil
			})
		case "members":
			r.Members = []string{}
			err = d.array(func(i int) error {
				s, err := d.str()
				if err != nil {
					return fmt.Errorf("element %d: %w", i, err)
				}
				r.Members = append(r.Members, s)
				return nil
			})
		case "previous":
			r.Previous, err = d.taskLists()
		case "standbys":
			r.standbys, err = d.integer()
		case "previous_standby":
			r.previousStandby, err = d.taskLists()
		case "lags":
			r.lags, err = d.lags()
		case "acceptable_recovery_lag":
			var n int
			n, err = d.integer()
			r.acceptableRecoveryLag = int64(n)
		case "max_warmup_replicas":
			r.maxWarmupReplicas, err = d.integer()
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if err != nil {
			return fmt.Errorf("field %q: %w", key, err)
		}
		return nil
	})
	r.hasPartitions, r.hasTopics, r.hasMembers = seen["partitions"], seen["topics"], seen["members"]
	r.hasOptions = seen["standbys"] || seen["previous_standby"] || seen["lags"] ||
		seen["acceptable_recovery_lag"] || seen["max_warmup_replicas"]
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos < len(d.data) {
		return nil, fmt.Errorf("trailing data after the JSON object at byte %d", d.pos)
	}
	return r, nil
}

// taskLists reads {"member": [task, ...], ...}; a member named twice is an
// error.
func (d *decoder) taskLists() (map[string][]int, error) {
	out := map[string][]int{}
	err := d.object(func(member string) error {
		if _, dup := out[member]; dup {
			return fmt.Errorf("duplicate member %q", member)
		}
		tasks := []int{}
		err := d.array(func(i int) error {
			t, err := d.integer()
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			tasks = append(tasks, t)
			return nil
		})
		if err != nil {
			return fmt.Errorf("member %q: %w", member, err)
		}
		out[member] = tasks
		return nil
	})
	return out, err
}

// lags reads {"member": {"task": lag, ...}, ...}. Task keys are decimal
// integers written as strings ("3", "-1"; not "03" or "+3"); a member or a
// task named twice is an error.
func (d *decoder) lags() (map[string]map[int]int64, error) {
	out := map[string]map[int]int64{}
	err := d.object(func(member string) error {
		if _, dup := out[member]; dup {
			return fmt.Errorf("duplicate member %q", member)
		}
		lags := map[int]int64{}
		err := d.object(func(key string) error {
			t, err := taskKey(key)
			if err != nil {
				return err
			}
			if _, dup := lags[t]; dup {
				return fmt.Errorf("duplicate task %q", key)
			}
			lag, err := d.integer()
			if err != nil {
				return fmt.Errorf("task %q: %w", key, err)
			}
			lags[t] = int64(lag)
			return nil
		})
		if err != nil {
			return fmt.Errorf("member %q: %w", member, err)
		}
		out[member] = lags
		return nil
	})
	return out, err
}

// taskKey parses an object key naming a task: an optional '-' and digits
// without a leading zero.
func taskKey(key string) (int, error) {
	digits := strings.TrimPrefix(key, "-")
	ok := digits != "" && (digits == "0" || digits[0] != '0')
	for i := 0; ok && i < len(digits); i++ {
		ok = '0' <= digits[i] && digits[i] <= '9'
	}
	if !ok {
		return 0, fmt.Errorf("task key %q is not an integer", key)
	}
	t, err := strconv.Atoi(key)
	if err != nil {
		return 0, fmt.Errorf("task key %q out of range", key)
	}
	return t, nil
}

// decoder is a strict reader of the few JSON shapes the input uses. Each
// method starts at a value (skipping whitespace before it) and leaves pos
// just after it.
type decoder struct {
	data []byte
	pos  int
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) syntaxError(what string) error {
	if d.pos >= len(d.data) {
		return fmt.Errorf("malformed JSON: unexpected end of input, expected %s", what)
	}
	return fmt.Errorf("malformed JSON at byte %d: expected %s, found %q", d.pos, what, d.data[d.pos])
}

// kind names the JSON value starting at pos, for type errors; a byte that
// starts no value is a syntax error.
func (d *decoder) kind() (string, error) {
	if d.pos < len(d.data) {
		switch c := d.data[d.pos]; {
		case c == '{':
			return "an object", nil
		case c == '[':
			return "an array", nil
		case c == '"':
			return "a string", nil
		case bytes.HasPrefix(d.data[d.pos:], []byte("true")), bytes.HasPrefix(d.data[d.pos:], []byte("false")):
			return "a boolean", nil
		case bytes.HasPrefix(d.data[d.pos:], []byte("null")):
			return "null", nil
		case c == '-' || '0' <= c && c <= '9':
			return "a number", nil
		}
	}
	return "", d.syntaxError("a JSON value")
}

// expect reports a type error (want, found the kind at pos) or, when pos
// does not start a value, a syntax error.
func (d *decoder) expect(want string) error {
	kind, err := d.kind()
	if err != nil {
		return err
	}
	return fmt.Errorf("expected %s, found %s", want, kind)
}

// object reads {"key": value, ...}, calling field at each value.
func (d *decoder) object(field func(key string) error) error {
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '{' {
		return d.expect("an object")
	}
	d.pos++
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return nil
	}
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return d.syntaxError("a string key")
		}
		key, err := d.str()
		if err != nil {
			return err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return d.syntaxError("':' after an object key")
		}
		d.pos++
		if err := field(key); err != nil {
			return err
		}
		if done, err := d.next('}'); done || err != nil {
			return err
		}
	}
}

// array reads [value, ...], calling elem at each value.
func (d *decoder) array(elem func(i int) error) error {
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '[' {
		return d.expect("an array")
	}
	d.pos++
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		if done, err := d.next(']'); done || err != nil {
			return err
		}
	}
}

// next consumes the ',' between two elements (done false) or the closing
// byte (done true).
func (d *decoder) next(closing byte) (done bool, err error) {
	d.skipSpace()
	if d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ',':
			d.pos++
			return false, nil
		case closing:
			d.pos++
			return true, nil
		}
	}
	return false, d.syntaxError(fmt.Sprintf("',' or '%c'", closing))
}

// integer reads a JSON number that is an integer literal (no fraction, no
// exponent) within the range of int.
func (d *decoder) integer() (int, error) {
	d.skipSpace()
	start := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	digits := d.pos
	for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
		d.pos++
	}
	switch {
	case d.pos == start:
		return 0, d.expect("an integer")
	case d.pos == digits:
		return 0, d.syntaxError("a digit")
	case d.data[digits] == '0' && d.pos-digits > 1:
		return 0, fmt.Errorf("malformed JSON at byte %d: number with a leading zero", digits)
	}
	integral := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if !d.digits() {
			return 0, d.syntaxError("a digit")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if !d.digits() {
			return 0, d.syntaxError("a digit")
		}
	}
	lit := d.data[start:d.pos]
	if d.pos != integral {
		return 0, fmt.Errorf("expected an integer, found %s", lit)
	}
	n, err := strconv.Atoi(string(lit))
	if err != nil {
		return 0, fmt.Errorf("integer %s out of range", lit)
	}
	return n, nil
}

func (d *decoder) digits() bool {
	start := d.pos
	for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
		d.pos++
	}
	return d.pos > start
}

// str reads a JSON string, which must be Unicode text: invalid UTF-8 and
// unpaired surrogates are errors (jsonstr.Strict; a member's name is an
// identity, which a replacement character would blur).
func (d *decoder) str() (string, error) {
	d.skipSpace()
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return "", d.expect("a string")
	}
	start := d.pos + 1
	end, plain, err := jsonstr.Scan(d.data[start:], jsonstr.Strict)
	if err != nil {
		d.pos = start + err.At
		return "", fmt.Errorf("malformed JSON at byte %d: %s", d.pos, err.Msg)
	}
	d.pos = start + end + 1
	body := d.data[start : start+end]
	if plain {
		return string(body), nil
	}
	return string(jsonstr.Unescape(make([]byte, 0, len(body)), body)), nil
}
