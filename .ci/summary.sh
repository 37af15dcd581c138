# .ci/summary.sh, sourced by .ci/run: the totals of every go test step,
# printed last, after the teardown.
#
#   gotest ARGS...  go test -v ARGS, with its results kept for the totals; it
#                   prints what a plain go test prints on success (the package
#                   lines) and, on failure, the failed tests and the output's
#                   tail, and returns go test's status
#   tally FILE      adds the results in FILE (go test -v output) to the totals
#   ci_summary [STATUS]
#                   prints the totals and exits with STATUS (default: $?);
#                   the EXIT trap runs it after teardown, so its last line,
#                   "N passed, N failed, N skipped" (tests and subtests), is
#                   the last line of CI, and a failure still exits non-zero.
ci_results=$(mktemp)

tally() {
	grep -E '^(ok |FAIL	|\?  )|^ *--- (PASS|FAIL|SKIP): ' "$1" >>"$ci_results" || true
}

gotest() {
	local log status=0
	log=$(mktemp)
	go test -v "$@" >"$log" 2>&1 || status=$?
	tally "$log"
	if ((status == 0)); then
		grep -E '^(ok |\?  )' "$log" || true
	else
		grep -E '^ *--- FAIL|^(ok |FAIL)' "$log" || true
		echo "--- go test output (tail) ---"
		tail -n 300 "$log"
	fi
	rm -f "$log"
	return $status
}

ci_summary() {
	local status=${1:-$?}
	ci_count() { grep -cE "$1" "$ci_results" || true; }
	printf '\n== summary (%s): %s\n' "$(date -u +%H:%M:%S)" "$( ((status == 0)) && echo "CI passed" || echo "CI FAILED (exit $status)")"
	echo "packages: $(ci_count '^ok ') passed, $(ci_count '^FAIL	') failed, $(ci_count '^\?  ') without tests"
	echo "tests (with subtests):"
	echo "$(ci_count '^ *--- PASS: ') passed, $(ci_count '^ *--- FAIL: ') failed, $(ci_count '^ *--- SKIP: ') skipped"
	rm -f "$ci_results"
	exit $status
}
