#!/usr/bin/env bash
# make test as CI runs it, on fresh clones one after another: each run clones
# this checkout's HEAD into an empty directory and runs `CI=true bash .ci/run`
# there, then prints one row: the commit, the result, the wall time, the lab
# runs measured again (per test), and what skipped. -busy runs a `nice -n 19`
# busy loop on one CPU throughout (the machine shared with something else).
# Needs root (the lab). Go's module and build caches stay warm between runs.
# Usage: bench/run-make-test-runs.sh [-n RUNS] [-busy] [-out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5 busy=false out=
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=$2; shift 2 ;;
    -busy) busy=true; shift ;;
    -out) out=$2; shift 2 ;;
    *) echo "usage: $0 [-n RUNS] [-busy] [-out FILE]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "run-make-test-runs.sh: make test's lab phase needs root: sudo bench/$(basename "$0")" >&2
  exit 1
fi
src=$PWD
loop=
if [ "$busy" = true ]; then
  nice -n 19 sh -c 'while :; do :; done' &
  loop=$!
  trap 'kill $loop 2>/dev/null' EXIT
fi
for i in $(seq 1 "$runs"); do
  dir=$(mktemp -d /tmp/relaymesh-ci.XXXXXX)
  git clone -q "$src" "$dir/main"
  commit=$(git -C "$dir/main" rev-parse --short HEAD)
  start=$(date +%s)
  code=0
  (cd "$dir/main" && CI=true bash .ci/run) > "$dir/ci.log" 2>&1 || code=$?
  wall=$(( $(date +%s) - start ))
  result=passed
  [ "$code" -ne 0 ] && result="**failed** (exit $code: $({ grep -m3 -E '^--- FAIL|^FAIL\s' "$dir/ci.log" || true; } | tr '\n' ' ' | sed 's/[[:space:]]*$//'))"
  # (|| true: a grep that finds nothing must not end the script.)
  retries=$(sed -n '/^lab retries per test/,$p' "$dir/ci.log" | sed -n '2,$p' | { grep -E '^  ' || true; } | sed 's/^  //' | paste -sd ';' - | sed 's/;/; /g')
  skipped=$(grep -m1 -E '^skipped tests' "$dir/ci.log" || true)
  row="| $(date -u +%FT%TZ) | $commit | $busy | $result | ${retries:-none} | ${skipped:-?} | $wall s |"
  echo "$row"
  [ -n "$out" ] && echo "$row" >> "$out"
  if [ "$code" -eq 0 ]; then rm -rf "$dir"; else echo "run $i: log kept in $dir/ci.log" >&2; fi
done
