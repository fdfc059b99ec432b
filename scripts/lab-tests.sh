#!/usr/bin/env bash
# The link emulator's and the lab's tests (root; elsewhere they skip, and
# under CI=true fail), run on their own, one package at a time, and how many
# lab runs they measured again because the emulator's self-check called a
# run invalid ("LAB RETRY" lines; the goal is none). Prints what `go test`
# prints without -v, the retries, and the whole verbose log of a package
# that failed. Keeps the `go test -json` in bin/lab-tests.json (make test's
# list of skips and retries reads it: tools/testlog) and its -v text in
# bin/lab-tests.log.
# Usage: scripts/lab-tests.sh PACKAGES...
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
json=bin/lab-tests.json
log=bin/lab-tests.log
rm -f "$json" "$log"
# Built now, not while the tests run.
go build -o bin/testlog ./tools/testlog || exit 1

# Wait (up to 60 s) until the CPUs have been at least 90 % idle for 3
# seconds in a row: right after the race-detector phase the kernel is still
# busy for a while (freeing the race binaries' memory, closing sockets), and
# on a kernel built with preempt=none a long kernel path holds up even the
# emulator's real-time thread; the first emulator test ran late then.
quiet=0
for _ in $(seq 1 60); do
  read -r _ u1 n1 s1 i1 w1 q1 sq1 _ < /proc/stat
  sleep 1
  read -r _ u2 n2 s2 i2 w2 q2 sq2 _ < /proc/stat
  busy=$(( (u2-u1) + (n2-n1) + (s2-s1) + (q2-q1) + (sq2-sq1) ))
  idle=$(( (i2-i1) + (w2-w1) ))
  if [ $(( idle * 100 )) -ge $(( (busy + idle) * 90 )) ]; then
    quiet=$((quiet + 1))
    [ "$quiet" -ge 3 ] && break
  else
    quiet=0
  fi
done
go test -p 1 -count=1 -timeout 30m -json "$@" > "$json" 2>&1
code=$?
bin/testlog text "$json" > "$log" || code=1
if [ "$code" -ne 0 ]; then
  cat "$log"
else
  grep -E '^(ok|FAIL|---|panic:|\?)' "$log" | grep -v -e '^--- PASS' -e '^    --- PASS'
fi
retries=$(grep -c 'LAB RETRY' "$log")
echo "lab retries (a run measured again after the self-check called it invalid): $retries"
grep 'LAB RETRY' "$log" | cut -c1-300
exit "$code"
