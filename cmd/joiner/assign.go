package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/joiner-dev/joiner/copartition"
	"github.com/joiner-dev/joiner/copartition/planjson"
)

const assignAbout = `Reads one JSON object, for example
  {"partitions": 9, "members": ["X","Y","Z"], "previous": {"W":[0,1,2],"X":[3,4,5,6],"Y":[7,8]}}
(or "topics": {"market": 6, "notifications": 6} instead of "partitions"),
and writes the sticky co-partition assignment as one JSON object:
  {"assignment":{"X":[3,4,5],"Y":[2,7,8],"Z":[0,1,6]},"moved":4}
Optional: "standbys": K, "previous_standby": {member: [tasks]},
"lags": {member: {"task": lag}}, "acceptable_recovery_lag": N (10000),
"max_warmup_replicas": W (2); the output then gains "standby" (K > 0)
and "warmup" (when there are warm-ups).
Bad input: one line on stderr and exit status 2. See docs/planner.md.

`

// runAssign is `joiner assign`: the copartition planner on JSON input,
// read and written by planjson. Exit status: 0 on success, 1 when the
// output cannot be written or stdin cannot be read, 2 on a usage error or
// bad input (one line on stderr, nothing on stdout).
func runAssign(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("assign", "assign [--file F] [--explain] < input.json", stdout, stderr)
	fs.about, fs.argHint = assignAbout, " (the input is read from stdin or --file)"
	file := fs.String("file", "", "read the JSON input from `F` instead of stdin")
	explain := fs.Bool("explain", false, "write the planner's steps to stderr")
	if _, status, ok := fs.parse(args); !ok {
		return status
	}
	fail := fs.fail

	var data []byte
	var err error
	if *file != "" {
		if data, err = os.ReadFile(*file); err != nil {
			return fail(2, err)
		}
	} else if data, err = io.ReadAll(stdin); err != nil {
		return fail(1, fmt.Errorf("reading stdin: %w", err))
	}
	req, err := planjson.Decode(data)
	if err != nil {
		return fail(2, err)
	}
	partitions, err := req.PartitionCount()
	if err != nil {
		return fail(2, err)
	}

	var plan copartition.Plan
	var explainTo io.Writer
	if *explain {
		explainTo = stderr
	}
	if opt, ok := req.Options(); ok {
		plan, err = copartition.AssignWithExplain(partitions, req.Members, req.Previous, opt, explainTo)
	} else {
		plan, err = copartition.AssignExplain(partitions, req.Members, req.Previous, explainTo)
	}
	switch {
	case errors.Is(err, copartition.ErrBadCount):
		return fail(2, fmt.Errorf("field \"partitions\": %w", err))
	case errors.Is(err, copartition.ErrDuplicateMember), errors.Is(err, copartition.ErrNegativeTask),
		errors.Is(err, copartition.ErrBadOption):
		return fail(2, err)
	case err != nil: // only writing the explanation can fail otherwise
		return fail(1, err)
	}
	if err := planjson.WritePlan(stdout, plan); err != nil {
		return fail(1, fmt.Errorf("writing output: %w", err))
	}
	return 0
}
