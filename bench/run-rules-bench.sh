#!/usr/bin/env bash
# The rule engine's speed (pkg/rules): a rule file of 10,000 lines (three
# quarters domain suffixes, the rest IPv4 and IPv6 prefixes and a few
# keywords, ending with MATCH; benchRules in pkg/rules/bench_test.go)
# parsed and indexed, and destinations looked up in it (names and
# addresses, hits and misses); and names looked up among 1,000
# DOMAIN-KEYWORD rules. Targets: load under 200 ms, a lookup under 2 µs. Writes OUT (default bench/results/rules.md) with the date, the
# commit, the command, its output and the medians. No root; under a
# minute at the default BENCHTIME.
# Usage: bench/run-rules-bench.sh [BENCHTIME] [COUNT] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
benchtime=${1:-1s}
count=${2:-5}
out=${3:-bench/results/rules.md}
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- pkg/rules || commit="$commit + uncommitted changes in pkg/rules"
cmd="go test -run '^\$' -bench 'Load10k|Match10k|MatchKeywords1k' -benchtime $benchtime -count $count ./pkg/rules"
echo "$cmd" >&2
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
res=$(eval "$cmd")
echo "$res" >&2
median() { # the median ns/op of benchmark $1
	echo "$res" | awk -v b="$1" '$1 ~ "^Benchmark"b {print $3}' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'
}
load=$(median Load10k)
match=$(median Match10k)
keywords=$(median MatchKeywords1k)
{
	echo "# Rule engine: load and lookup of 10,000 rules"
	echo
	echo "Run $(date -u +%Y-%m-%dT%H:%MZ) at $commit on $(nproc) CPUs ($(go env GOVERSION)), by"
	echo "\`bench/run-rules-bench.sh $benchtime $count\` (\`make bench-rules\`), which ran:"
	echo
	echo "    $cmd"
	echo
	echo "| | median of $count | target |"
	echo "|---|---|---|"
	echo "| load (parse and index 10,000 lines) | $(awk -v n="$load" 'BEGIN {printf "%.1f ms", n/1e6}') | < 200 ms |"
	echo "| lookup (one destination) | $(awk -v n="$match" 'BEGIN {printf "%.0f ns", n}') | < 2 µs |"
	echo "| lookup of a name among 1,000 keywords it does not contain | $(awk -v n="$keywords" 'BEGIN {printf "%.0f ns", n}') | < 2 µs |"
	echo
	echo "The rule set and destinations are benchRules in pkg/rules/bench_test.go;"
	echo "the keywords, BenchmarkMatchKeywords1k's."
	echo "The machine may have been shared with other work while it ran (load"
	echo "average before it: $load_before): figures from a busy machine are"
	echo "upper bounds."
	echo
	echo '```'
	echo "$res"
	echo '```'
} >"$out"
echo "wrote $out" >&2
