package planjson_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/copartition/planjson"
)

func TestDecode(t *testing.T) {
	r, err := planjson.Decode([]byte(` {"members":["X","Y\u00e9"],"previous":{"X":[2,0]},"partitions":3,"standbys":1,"lags":{"X":{"-1":5}}} `))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.PartitionCount(); n != 3 || err != nil {
		t.Errorf("PartitionCount = %d, %v; want 3", n, err)
	}
	if want := []string{"X", "Yé"}; !reflect.DeepEqual(r.Members, want) {
		t.Errorf("Members = %q, want %q", r.Members, want)
	}
	if want := map[string][]int{"X": {2, 0}}; !reflect.DeepEqual(r.Previous, want) {
		t.Errorf("Previous = %v, want %v", r.Previous, want)
	}
	opt, ok := r.Options()
	want := copartition.Options{Standbys: 1, Lags: map[string]map[int]int64{"X": {-1: 5}},
		AcceptableRecoveryLag: copartition.DefaultAcceptableRecoveryLag, MaxWarmupReplicas: copartition.DefaultMaxWarmupReplicas}
	if !ok || !reflect.DeepEqual(opt, want) {
		t.Errorf("Options = %+v, %v; want %+v, true", opt, ok, want)
	}
}

// Errors name the field, or the byte offset of a syntax error.
func TestDecodeErrors(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{``, "empty input"},
		{`[]`, "not a JSON object (found an array)"},
		{`{"partitions":1,"partitions":2}`, `duplicate field "partitions"`},
		{`{"members":["a",1]}`, `field "members": element 1: expected a string, found a number`},
		{`{"partitions":1.5}`, `field "partitions": expected an integer, found 1.5`},
		{`{"partitions":01}`, `byte 14: number with a leading zero`},
		{`{"previous":{"a":[1],"a":[2]}}`, `duplicate member "a"`},
		{`{"lags":{"a":{"03":1}}}`, `task key "03" is not an integer`},
		{"{\"members\":[\"\xff\"]}", "invalid UTF-8"},
		{`{"members":["\ud800"]}`, "unpaired surrogate"},
		{`{"colour":1}`, `unknown field "colour"`},
		{`{} x`, "trailing data after the JSON object at byte 3"},
	} {
		_, err := planjson.Decode([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

// WritePlan's output is the plan, read back by encoding/json.
func TestWritePlanRoundTrip(t *testing.T) {
	plan := copartition.Plan{
		Assignment: map[string][]int{"b": {1, 2}, "a\"\n\x01é": {0}, "c": {}},
		Moved:      2,
		Standby:    map[string][]int{"a\"\n\x01é": {1}, "b": {0}, "c": {}},
	}
	var buf bytes.Buffer
	if err := planjson.WritePlan(&buf, plan); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Assignment map[string][]int `json:"assignment"`
		Moved      int              `json:"moved"`
		Standby    map[string][]int `json:"standby"`
		Warmup     map[string][]int `json:"warmup"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%s: %v", buf.Bytes(), err)
	}
	if !reflect.DeepEqual(got.Assignment, plan.Assignment) || got.Moved != plan.Moved ||
		!reflect.DeepEqual(got.Standby, plan.Standby) || got.Warmup != nil {
		t.Errorf("read back %+v, want %+v", got, plan)
	}
	if !strings.HasPrefix(buf.String(), `{"assignment":{"a\"\n\u0001é":[0],"b":[1,2],"c":[]},"moved":2,"standby":`) {
		t.Errorf("members not in bytewise order or escaped wrongly: %s", buf.Bytes())
	}
}

// Decode accepts only valid JSON, and the members it reads are the ones
// encoding/json reads.
func FuzzDecode(f *testing.F) {
	f.Add(`{"partitions": 9, "members": ["X","Y","Z"], "previous": {"W":[0,1,2],"X":[3,4,5,6],"Y":[7,8]}}`)
	f.Add(`{"topics":{"a":2,"b":2},"members":["\u00e9\ud83d\ude00"],"lags":{"X":{"-1":3}}}`)
	f.Add(`{"members":["a\tb"]}`)
	f.Fuzz(func(t *testing.T, in string) {
		r, err := planjson.Decode([]byte(in))
		if err != nil {
			return
		}
		if !json.Valid([]byte(in)) || !utf8.ValidString(in) {
			t.Fatalf("Decode accepted %q, which is not valid JSON", in)
		}
		var v struct {
			Members []string `json:"members"`
		}
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatalf("encoding/json rejects %q: %v", in, err)
		}
		if r.Members != nil && !reflect.DeepEqual(r.Members, v.Members) {
			t.Fatalf("%q: members %q, encoding/json reads %q", in, r.Members, v.Members)
		}
	})
}
