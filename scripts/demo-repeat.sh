#!/usr/bin/env bash
# Runs the demo (scripts/demo.sh) N times in a row and records whether the
# emulator's self-check held in each run, with the lateness it reported and
# the plan's and the bench's headline lines, in bench/results/demo-runs.md
# (logs in bin/demo-run-K.log). Needs root. Run on an otherwise quiet
# machine: nothing else, no benchmark, no lab tests beside it.
# Usage: sudo scripts/demo-repeat.sh [N]   (default 5)
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
out=bench/results/demo-runs.md
mkdir -p bin bench/results
valid=0
rows=""
for k in $(seq 1 "$n"); do
  log=bin/demo-run-$k.log
  start=$(date +%s)
  ./scripts/demo.sh > "$log" 2>&1
  code=$?
  took=$(( $(date +%s) - start ))
  case $code in
    0) verdict="valid"; valid=$((valid + 1)) ;;
    3) verdict="**invalid** (self-check)" ;;
    *) verdict="**failed** (exit $code)" ;;
  esac
  late=$(grep -oE 'p99 lateness [0-9.]+ ms[^;,)]*' "$log" | head -3 | tr '\n' ' ')
  bench=$(grep -E '^\s*(direct|planned|chain)' "$log" | head -2 | tr -s ' ' | tr '\n' ';' | cut -c1-160)
  rows+="| $k | $verdict | ${took} s | ${late:-—} | ${bench:-—} |"$'\n'
  echo "demo run $k of $n: $verdict (${took} s)"
done
{
  echo "# The demo, run $n times in a row"
  echo
  echo "Made by \`sudo scripts/demo-repeat.sh $n\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), $(nproc) CPUs ($(uname -r))."
  echo "Each run is \`scripts/demo.sh\` (what \`sudo make demo\` runs): the world lab, \`relayctl plan --dst tokyo\`, \`relayctl bench\`."
  echo "A run is valid when the link emulator's self-check held on every link (exit 0); invalid runs list the late links."
  echo
  echo "**Valid: $valid of $n.**"
  echo
  echo "| run | self-check | wall time | late links (first 3) | bench lines |"
  echo "|---:|---|---:|---|---|"
  printf '%s' "$rows"
} > "$out"
echo "wrote $out: $valid of $n valid"
