# .ci/summary.sh, sourced by .ci/run: the totals of every go test step,
# printed last, after the teardown.
#
#   gotest ARGS...  go test -v ARGS, with its results kept for the totals; it
#                   prints what a plain go test prints on success (the package
#                   lines) and, on failure, the failed tests, the output of
#                   each (failed_output) and the output's tail, and returns
#                   go test's status
#   failed_output FILE
#                   the lines go test -v attributed to each failed test in
#                   FILE (the last 200 of each): parallel tests interleave,
#                   so a tail alone often misses the failure's message
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
		failed_output "$log"
		# A data race or a panic fails a test with no line of its own.
		if grep -qE '^WARNING: DATA RACE|^panic: |race detected during execution' "$log"; then
			echo "--- data races and panics ---"
			grep -E -A40 '^WARNING: DATA RACE|^panic: |race detected during execution' "$log" | head -n 400
		fi
		echo "--- go test output (tail) ---"
		tail -n 100 "$log"
	fi
	rm -f "$log"
	return $status
}

failed_output() {
	awk '
		/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
		/^ *--- FAIL: / { failed[$3] = 1; next }
		/^ *--- (PASS|SKIP): / || /^(ok |FAIL|PASS$)/ { next }
		{ n[cur]++; line[cur, n[cur]] = $0 }
		END {
			for (t in failed) {
				if (!(t in n)) continue
				# Its own t.Log and t.Error lines first: a dump of worker
				# logs after them would push them out of the last 200.
				k = 0
				for (i = 1; i <= n[t] && k < 100; i++) {
					if (line[t, i] ~ /^    [A-Za-z0-9_.]+\.go:[0-9]+: /) {
						if (k++ == 0) print "--- " t ": its test lines ---"
						print line[t, i]
					}
				}
				print "--- output of " t " (its last 200 lines) ---"
				for (i = (n[t] > 200 ? n[t] - 199 : 1); i <= n[t]; i++) print line[t, i]
			}
		}' "$1"
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
