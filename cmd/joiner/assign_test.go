package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func assign(t *testing.T, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = runAssign(args, strings.NewReader(input), &out, &errOut)
	return code, out.String(), errOut.String()
}

const seedInput = `{"partitions": 9, "members": ["X","Y","Z"], "previous": {"W":[0,1,2],"X":[3,4,5,6],"Y":[7,8]}}`

// assignGolden are the outputs of `joiner assign` before standbys and lags
// existed; TestAssignHAFieldsKeepGolden runs them again with neutral
// high-availability fields.
var assignGolden = []struct{ name, input, want string }{
	{"worked trace: W crashed, Z new", seedInput, `{"assignment":{"X":[3,4,5],"Y":[2,7,8],"Z":[0,1,6]},"moved":4}` + "\n"},
	{"topics", `{"topics": {"market": 6, "notifications": 6}, "members": ["b", "a"]}`,
		`{"assignment":{"a":[0,2,4],"b":[1,3,5]},"moved":6}` + "\n"},
	{"no previous, member without tasks", `{"partitions":1,"members":["b","a"]}`,
		`{"assignment":{"a":[0],"b":[]},"moved":1}` + "\n"},
	{"no members", `{"partitions":3,"members":[],"previous":{"W":[0]}}`,
		`{"assignment":{},"moved":0}` + "\n"},
	{"claims >= P dropped", `{"partitions":2,"members":["a"],"previous":{"a":[1,7]}}`,
		`{"assignment":{"a":[0,1]},"moved":1}` + "\n"},
	{"whitespace and escapes", " \n{ \"members\" : [ \"\\u0041\\n\\\"\", \"\\ud83d\\ude00\" ] ,\"partitions\":2 , \"previous\":{ }}\t\r\n",
		`{"assignment":{"A\n\"":[0],"😀":[1]},"moved":2}` + "\n"},
}

func TestAssignValid(t *testing.T) {
	for _, tt := range assignGolden {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := assign(t, tt.input)
			if code != 0 || out != tt.want || errOut != "" {
				t.Errorf("code %d, stdout %q, stderr %q; want 0, %q, empty", code, out, errOut, tt.want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Errorf("output is not JSON: %v", err)
			}
		})
	}
}

func TestAssignFileFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(path, []byte(seedInput), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := assign(t, "ignored", "--file", path)
	if want := `{"assignment":{"X":[3,4,5],"Y":[2,7,8],"Z":[0,1,6]},"moved":4}` + "\n"; code != 0 || out != want || errOut != "" {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestAssignExplain(t *testing.T) {
	code, out, errOut := assign(t, seedInput, "--explain")
	if code != 0 || out != `{"assignment":{"X":[3,4,5],"Y":[2,7,8],"Z":[0,1,6]},"moved":4}`+"\n" {
		t.Fatalf("code %d, stdout %q", code, out)
	}
	const want = `P = 9, M = 3 -> floor 3, remainder 0: every target is 3
current: X=[3,4,5,6] Y=[7,8] Z=[]
orphans (W left): 0,1,2
shed: X has 4 > 3, gives up its highest id: 6
pool = [0,1,2,6]
fill 0 -> Z (owns 0, fewest; next Y owns 2)
fill 1 -> Z (owns 1, fewest; next Y owns 2)
fill 2 -> Y (owns 2, ties with Z, smaller id wins)
fill 6 -> Z (owns 2, the only one below target)
result: X=[3,4,5] Y=[2,7,8] Z=[0,1,6]
moved = 4 (0,1,2,6)
`
	if errOut != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut, want)
	}
}

// Every class of bad input: exit 2, one line on stderr naming the
// problem, nothing on stdout; --explain changes none of that.
func TestAssignBadInput(t *testing.T) {
	tests := []struct{ name, input, want string }{
		{"empty", "", "malformed JSON: empty input"},
		{"malformed", `{"partitions": 9,,}`, "malformed JSON at byte 17: expected a string key"},
		{"truncated", `{"partitions": 9`, "malformed JSON: unexpected end of input"},
		{"bad literal", `{"partitions": nul}`, "malformed JSON at byte 15"},
		{"not an object", `[1,2]`, "input is not a JSON object (found an array)"},
		{"string", `"x"`, "input is not a JSON object (found a string)"},
		{"trailing data", `{"partitions":1,"members":[]} {}`, "trailing data after the JSON object at byte 30"},
		{"unknown field", `{"partitions":1,"members":[],"extra":true}`, `unknown field "extra"`},
		{"duplicate field", `{"partitions":1,"members":[],"members":[]}`, `duplicate field "members"`},
		{"partitions string", `{"partitions":"9","members":[]}`, `field "partitions": expected an integer, found a string`},
		{"partitions fraction", `{"partitions":9.5,"members":[]}`, `field "partitions": expected an integer, found 9.5`},
		{"partitions overflow", `{"partitions":1e999,"members":[]}`, `field "partitions": expected an integer, found 1e999`},
		{"partitions huge", `{"partitions":123456789012345678901,"members":[]}`, `field "partitions": integer 123456789012345678901 out of range`},
		{"members not array", `{"partitions":9,"members":"X"}`, `field "members": expected an array, found a string`},
		{"member not string", `{"partitions":9,"members":["X",7]}`, `field "members": element 1: expected a string, found a number`},
		{"previous not object", `{"partitions":9,"members":[],"previous":[]}`, `field "previous": expected an object, found an array`},
		{"previous list", `{"partitions":9,"members":[],"previous":{"W":3}}`, `field "previous": member "W": expected an array, found a number`},
		{"previous task", `{"partitions":9,"members":[],"previous":{"W":[1,null]}}`, `field "previous": member "W": element 1: expected an integer, found null`},
		{"previous duplicate", `{"partitions":9,"members":[],"previous":{"W":[],"W":[]}}`, `field "previous": duplicate member "W"`},
		{"topics count type", `{"topics":{"market":"6"},"members":[]}`, `field "topics": topic "market": expected an integer, found a string`},
		{"topics duplicate", `{"topics":{"market":6,"market":6},"members":[]}`, `field "topics": duplicate topic "market"`},
		{"negative partitions", `{"partitions":-1,"members":["X"]}`, `field "partitions": bad partition count: -1 partitions, need at least 1`},
		{"zero partitions", `{"partitions":0,"members":[]}`, `field "partitions": bad partition count: 0 partitions, need at least 1`},
		{"negative topic count", `{"topics":{"market":-6},"members":["X"]}`, `bad partition count: topic "market" has -6 partitions, need at least 1`},
		{"no topics", `{"topics":{},"members":["X"]}`, "no topics"},
		{"not co-partitioned", `{"topics":{"notifications":8,"market":6},"members":["X"]}`,
			"not co-partitioned: market has 6 partitions, notifications has 8 (indexes 6..7 have no pair)"},
		{"duplicate member", `{"partitions":9,"members":["X","Y","X"]}`, `duplicate member "X"`},
		{"negative task", `{"partitions":9,"members":["X"],"previous":{"X":[0,-3]}}`, `negative task: previous owner "X" claims task -3`},
		{"both partitions and topics", `{"partitions":6,"topics":{"market":6},"members":[]}`, `fields "partitions" and "topics" are mutually exclusive; give one`},
		{"neither partitions nor topics", `{"members":["X"]}`, `missing field "partitions" (or "topics")`},
		{"missing members", `{"partitions":9}`, `missing field "members"`},
		{"invalid UTF-8", "{\"partitions\":9,\"members\":[\"\xff\"]}", "invalid UTF-8"},
		{"control character", "{\"partitions\":9,\"members\":[\"a\nb\"]}", "malformed JSON at byte"},
		{"bad escape", `{"partitions":9,"members":["\x"]}`, "expected a valid escape"},
		{"lone surrogate", `{"partitions":9,"members":["\udc00"]}`, "unpaired surrogate"},
	}
	for _, tt := range tests {
		for _, args := range [][]string{nil, {"--explain"}} {
			t.Run(tt.name+strings.Join(args, ""), func(t *testing.T) {
				code, out, errOut := assign(t, tt.input, args...)
				if code != 2 || out != "" {
					t.Errorf("code %d, stdout %q; want 2 and nothing", code, out)
				}
				if !strings.HasPrefix(errOut, "joiner assign: ") || !strings.HasSuffix(errOut, "\n") ||
					strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.want) {
					t.Errorf("stderr %q, want one line %q", errOut, "joiner assign: ..."+tt.want+"...")
				}
			})
		}
	}
}

func TestAssignUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"extra-arg"}, {"--file"}, {"--file", filepath.Join(t.TempDir(), "missing.json")}} {
		code, out, errOut := assign(t, seedInput, args...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 2, nothing, a message", args, code, out, errOut)
		}
	}
	if code, out, errOut := assign(t, "", "-h"); code != 0 || errOut != "" || !strings.Contains(out, "usage: joiner assign") {
		t.Errorf("-h: code %d, stdout %q, stderr %q; want 0, the usage, nothing", code, out, errOut)
	}
}

// The output must be what encoding/json makes of the same plan.
func TestAssignOutputIsJSON(t *testing.T) {
	_, out, _ := assign(t, `{"partitions":5,"members":["<b>","a\u0001","\"q\\"]}`)
	var got struct {
		Assignment map[string][]int `json:"assignment"`
		Moved      int              `json:"moved"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	want := map[string][]int{"\"q\\": {0, 3}, "<b>": {1, 4}, "a\x01": {2}}
	if !reflect.DeepEqual(got.Assignment, want) || got.Moved != 5 {
		t.Errorf("got %v moved %d, want %v moved 5", got.Assignment, got.Moved, want)
	}
}
