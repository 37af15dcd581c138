#!/bin/sh
# bench-assign.sh: whole-process timing of `joiner assign` (JSON parse,
# plan, JSON encode) on the benchmark inputs of copartition's
# BenchmarkAssign: 1,000,000 tasks x 2,000 members,
#   churn:   round-robin previous owners, 1% of the members left and as many
#            new ones joined (the same input as BenchmarkAssign/1M×2000/churn1%)
#   scratch: no previous owners
#
# Usage: scripts/bench-assign.sh [RUNS]   (default 3 runs per input)
# Needs only go, awk and a POSIX shell. Prints one line per run in seconds.
set -eu
runs=${1:-3}
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

go build -o "$dir/joiner" ./cmd/joiner

# gen P M EVERY: members member-00000.., every EVERY-th replaced by joiner-NNNNN
# (EVERY 0: from scratch, no "previous").
gen() {
	awk -v P="$1" -v M="$2" -v E="$3" 'BEGIN {
		printf "{\"partitions\":%d,\"members\":[", P
		for (i = 0; i < M; i++) {
			name = (E > 0 && i % E == 0) ? "joiner" : "member"
			printf "%s\"%s-%05d\"", (i ? "," : ""), name, i
		}
		printf "]"
		if (E > 0) {
			printf ",\"previous\":{"
			for (i = 0; i < M; i++) {
				printf "%s\"member-%05d\":[", (i ? "," : ""), i
				for (t = i; t < P; t += M) printf "%s%d", (t > i ? "," : ""), t
				printf "]"
			}
			printf "}"
		}
		printf "}\n"
	}'
}

gen 1000000 2000 100 >"$dir/churn.json"
gen 1000000 2000 0 >"$dir/scratch.json"

for input in churn scratch; do
	size=$(wc -c <"$dir/$input.json" | tr -d ' ')
	i=1
	while [ "$i" -le "$runs" ]; do
		start=$(date +%s%N)
		"$dir/joiner" assign --file "$dir/$input.json" >"$dir/out.json"
		end=$(date +%s%N)
		moved=$(sed 's/.*"moved":\([0-9]*\)}$/\1/' "$dir/out.json")
		awk -v n="$input" -v s="$size" -v r="$i" -v ns=$((end - start)) -v m="$moved" \
			'BEGIN { printf "joiner assign 1M×2000 %-7s run %d: %.3f s (input %d bytes, moved %d)\n", n, r, ns / 1e9, s, m }'
		i=$((i + 1))
	done
done
