#!/usr/bin/env bash
# The link emulator's and the lab's tests (root; they skip elsewhere), run on
# their own, one package at a time, and how many lab runs they measured
# again because the emulator's self-check called a run invalid ("LAB RETRY"
# lines; the goal is none). Prints what `go test` prints without -v, the
# retries, and the whole verbose log of a package that failed.
# Usage: scripts/lab-tests.sh PACKAGES...
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
log=bin/lab-tests.log
go test -p 1 -count=1 -timeout 15m -v "$@" > "$log" 2>&1
code=$?
if [ "$code" -ne 0 ]; then
  cat "$log"
else
  grep -E '^(ok|FAIL|---|panic:|\?)' "$log" | grep -v -e '^--- PASS' -e '^    --- PASS'
fi
retries=$(grep -c 'LAB RETRY' "$log")
echo "lab retries (a run measured again after the self-check called it invalid): $retries"
grep 'LAB RETRY' "$log" | cut -c1-300
exit "$code"
