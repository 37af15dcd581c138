package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/copartition/planjson"
)

// neutral are high-availability fields that change nothing: no standbys,
// no lag information.
const neutral = `"standbys":0,"previous_standby":{"Q":[1]},"lags":{},"acceptable_recovery_lag":5,"max_warmup_replicas":3,`

// Without lag information and standbys the output is byte for byte the
// old one, and so is the explanation.
func TestAssignHAFieldsKeepGolden(t *testing.T) {
	for _, tt := range assignGolden {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(tt.input, "{", "{"+neutral, 1)
			code, out, errOut := assign(t, in)
			if code != 0 || out != tt.want || errOut != "" {
				t.Errorf("with %s: code %d, stdout %q, stderr %q; want 0, %q", neutral, code, out, errOut, tt.want)
			}
			_, _, explainOld := assign(t, tt.input, "--explain")
			_, outNew, explainNew := assign(t, in, "--explain")
			if outNew != tt.want || explainNew != explainOld {
				t.Errorf("--explain differs:\n%s\nwant:\n%s", explainNew, explainOld)
			}
		})
	}
}

const haInput = `{"partitions": 9, "members": ["X","Y","Z"], "previous": {"W":[0,1,2],"X":[3,4,5,6],"Y":[7,8]},
 "standbys": 1, "previous_standby": {"Y":[0,1,2]}, "lags": {"Y":{"0":40,"1":15000,"2":300},"Z":{"2":0}}}`

func TestAssignHAValid(t *testing.T) {
	tests := []struct{ name, input, want string }{
		{"standbys, lags and a stay", haInput,
			`{"assignment":{"X":[3,4,5,6],"Y":[0,7,8],"Z":[1,2]},"moved":3,"standby":{"X":[0,7,8],"Y":[1,2,5],"Z":[3,4,6]}}` + "\n"},
		{"warm-ups", `{"partitions": 6, "members": ["A","B","C"], "previous": {"A":[0,1,2],"B":[3,4,5]},
			"lags": {"A":{"0":0,"1":0,"2":0},"B":{"3":0,"4":0,"5":0},"C":{"2":20000}}, "acceptable_recovery_lag": 1000, "max_warmup_replicas": 1}`,
			`{"assignment":{"A":[0,1,2],"B":[3,4,5],"C":[]},"moved":0,"warmup":{"C":[2]}}` + "\n"},
		{"warm-ups off", `{"partitions": 6, "members": ["A","B","C"], "previous": {"A":[0,1,2],"B":[3,4,5]},
			"lags": {"A":{"0":0}}, "max_warmup_replicas": 0}`,
			`{"assignment":{"A":[0,1],"B":[3,4],"C":[2,5]},"moved":2}` + "\n"},
		{"caught-up copy wins over the fewest", `{"partitions": 4, "members": ["A","B","C"], "previous": {"A":[0,1],"W":[2,3]},
			"lags": {"C":{"2":7},"B":{"2":9}}}`,
			`{"assignment":{"A":[0,1],"B":[3],"C":[2]},"moved":2}` + "\n"},
		{"one member: no standby", `{"partitions": 2, "members": ["X"], "standbys": 2}`,
			`{"assignment":{"X":[0,1]},"moved":2,"standby":{"X":[]}}` + "\n"},
		{"no members", `{"partitions": 2, "members": [], "standbys": 1}`,
			`{"assignment":{},"moved":0,"standby":{}}` + "\n"},
		{"K above M-1", `{"partitions": 2, "members": ["a","b"], "standbys": 5}`,
			`{"assignment":{"a":[0],"b":[1]},"moved":2,"standby":{"a":[1],"b":[0]}}` + "\n"},
		{"lags of tasks >= P and departed members are ignored", `{"partitions": 2, "members": ["a","b"], "previous": {"a":[0,1]},
			"lags": {"a":{"5":0},"W":{"1":0}}}`,
			`{"assignment":{"a":[0],"b":[1]},"moved":1}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := assign(t, tt.input)
			if code != 0 || out != tt.want || errOut != "" {
				t.Errorf("code %d, stdout %q, stderr %q; want 0, %q", code, out, errOut, tt.want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Errorf("output is not JSON: %v", err)
			}
		})
	}
}

func TestAssignHAExplain(t *testing.T) {
	code, _, errOut := assign(t, haInput, "--explain")
	const want = `P = 9, M = 3 -> floor 3, remainder 0: every target is 3
current: X=[3,4,5,6] Y=[7,8] Z=[]
orphans (W left): 0,1,2
shed: X has 4 > 3, gives up its highest id: 6
pool = [0,1,2,6]
caught-up copies (lag <= 10000): 0 on Y(40); 2 on Z(0),Y(300)
warm-ups: on, at most 2
fill 0 -> Y (below target with a caught-up copy, lag 40, the smallest)
fill 1 -> Z (owns 0, the only one below target)
fill 2 -> Z (below target with a caught-up copy, lag 0, the smallest)
fill 6 -> Z (owns 2, the only one below target)
stay 6 with X: Z holds no caught-up copy (no copy)
result: X=[3,4,5,6] Y=[0,7,8] Z=[1,2]
moved = 3 (0,1,2)
standbys: K = 1, M = 3 -> 1 per task, 9 in all; targets: X=3 Y=3 Z=3
standby keep 1 -> Y (held its standby)
standby keep 2 -> Y (held its standby)
standby 0 -> X (has 0, fewest)
standby 3 -> Z (has 0, fewest)
standby 4 -> Z (has 1, fewest)
standby 5 -> Y (has 2, fewest)
standby 6 -> Z (has 2, fewest)
standby 7 -> X (has 1, fewest)
standby 8 -> X (has 2, fewest)
standby: X=[0,7,8] Y=[1,2,5] Z=[3,4,6]
warm-up 6: not needed, Z keeps a standby of it
`
	if code != 0 || errOut != want {
		t.Errorf("code %d, stderr:\n%s\nwant:\n%s", code, errOut, want)
	}
}

// Bad high-availability fields: exit 2, one line, nothing on stdout.
func TestAssignHABadInput(t *testing.T) {
	const pre = `{"partitions":3,"members":["X","Y"],`
	tests := []struct{ name, input, want string }{
		{"standbys string", pre + `"standbys":"1"}`, `field "standbys": expected an integer, found a string`},
		{"standbys negative", pre + `"standbys":-1}`, `bad option: standbys -1, need at least 0`},
		{"standbys fraction", pre + `"standbys":1.5}`, `field "standbys": expected an integer, found 1.5`},
		{"standbys twice", pre + `"standbys":1,"standbys":1}`, `duplicate field "standbys"`},
		{"previous_standby not object", pre + `"previous_standby":[1]}`, `field "previous_standby": expected an object, found an array`},
		{"previous_standby duplicate member", pre + `"previous_standby":{"X":[],"X":[]}}`, `field "previous_standby": duplicate member "X"`},
		{"previous_standby element", pre + `"previous_standby":{"X":[null]}}`, `field "previous_standby": member "X": element 0: expected an integer, found null`},
		{"previous_standby negative", pre + `"previous_standby":{"W":[1,-2]}}`, `negative task: previous standby "W" lists task -2`},
		{"lags not object", pre + `"lags":[]}`, `field "lags": expected an object, found an array`},
		{"lags member not object", pre + `"lags":{"X":[1]}}`, `field "lags": member "X": expected an object, found an array`},
		{"lags task key", pre + `"lags":{"X":{"a":1}}}`, `field "lags": member "X": task key "a" is not an integer`},
		{"lags task key leading zero", pre + `"lags":{"X":{"01":1}}}`, `field "lags": member "X": task key "01" is not an integer`},
		{"lags task key plus", pre + `"lags":{"X":{"+1":1}}}`, `field "lags": member "X": task key "+1" is not an integer`},
		{"lags task key huge", pre + `"lags":{"X":{"99999999999999999999":1}}}`, `field "lags": member "X": task key "99999999999999999999" out of range`},
		{"lags duplicate task", pre + `"lags":{"X":{"1":1,"1":2}}}`, `field "lags": member "X": duplicate task "1"`},
		{"lags duplicate member", pre + `"lags":{"X":{},"X":{}}}`, `field "lags": duplicate member "X"`},
		{"lag not integer", pre + `"lags":{"X":{"1":"5"}}}`, `field "lags": member "X": task "1": expected an integer, found a string`},
		{"lag negative", pre + `"lags":{"X":{"1":-5}}}`, `bad option: lag of "X" for task 1 is -5, need at least 0`},
		{"lag task negative", pre + `"lags":{"X":{"-1":5}}}`, `negative task: lag of "X" for task -1`},
		{"acceptable negative", pre + `"acceptable_recovery_lag":-1}`, `bad option: acceptable recovery lag -1, need at least 0`},
		{"acceptable type", pre + `"acceptable_recovery_lag":true}`, `field "acceptable_recovery_lag": expected an integer, found a boolean`},
		{"max warm-ups negative", pre + `"max_warmup_replicas":-1}`, `bad option: max warm-up replicas -1, need at least 0`},
		{"misspelled field", pre + `"standby":1}`, `unknown field "standby"`},
	}
	for _, tt := range tests {
		for _, args := range [][]string{nil, {"--explain"}} {
			t.Run(tt.name+strings.Join(args, ""), func(t *testing.T) {
				code, out, errOut := assign(t, tt.input, args...)
				if code != 2 || out != "" {
					t.Errorf("code %d, stdout %q; want 2 and nothing", code, out)
				}
				if !strings.HasPrefix(errOut, "joiner assign: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.want) {
					t.Errorf("stderr %q, want one line with %q", errOut, tt.want)
				}
			})
		}
	}
}

// FuzzAssignInput: any input gives either exit 0 with one JSON object on
// stdout and nothing on stderr, or exit 2 with one line on stderr and
// nothing on stdout. Inputs asking for more than 4096 tasks are skipped (a
// valid 2^24-task plan is correct but slow to fuzz).
func FuzzAssignInput(f *testing.F) {
	f.Add(seedInput)
	f.Add(haInput)
	f.Add(`{"partitions":3,"members":["X","Y"],"standbys":2,"lags":{"X":{"0":1,"2":70000}},"max_warmup_replicas":1,"acceptable_recovery_lag":0}`)
	f.Add(`{"topics":{"a":2,"b":2},"members":["X"],"previous_standby":{"X":[0,-1]}}`)
	f.Add(`{"partitions":2,"members":[],"lags":{"X":{"01":1}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		if req, err := planjson.Decode([]byte(in)); err == nil {
			if p, err := req.PartitionCount(); err == nil && p > 4096 {
				t.Skip()
			}
		}
		code, out, errOut := assign(t, in)
		switch code {
		case 0:
			var v struct {
				Assignment map[string][]int `json:"assignment"`
				Moved      *int             `json:"moved"`
				Standby    map[string][]int `json:"standby"`
				Warmup     map[string][]int `json:"warmup"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Moved == nil || v.Assignment == nil || errOut != "" {
				t.Fatalf("%q: exit 0 but stdout %q (%v), stderr %q", in, out, err, errOut)
			}
		case 2:
			if out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "joiner assign: ") {
				t.Fatalf("%q: exit 2 but stdout %q, stderr %q", in, out, errOut)
			}
		default:
			t.Fatalf("%q: exit %d, stderr %q", in, code, errOut)
		}
	})
}
