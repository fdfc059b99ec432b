#!/usr/bin/env bash
# Runs the demo (scripts/demo.sh) N times in a row and records whether the
# emulator's self-check held in each run, the lateness it reported, and the
# bench's downloads, in bench/results/demo-runs.md (logs in
# bin/demo-run-K.log). Needs root. Run on an otherwise quiet machine:
# nothing else, no benchmark, no lab tests beside it.
# Usage: scripts/demo-repeat.sh [N]      (default 5)
#        DEMO_REPORT_ONLY=1 scripts/demo-repeat.sh [N]: rewrite the table
#        from the logs of the last N runs, running nothing
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
out=bench/results/demo-runs.md
mkdir -p bin bench/results
if [ -z "${DEMO_REPORT_ONLY:-}" ]; then
  for k in $(seq 1 "$n"); do
    log=bin/demo-run-$k.log
    start=$(date +%s)
    ./scripts/demo.sh > "$log" 2>&1
    code=$?
    echo "demo exit: $code after $(( $(date +%s) - start )) s" >> "$log"
    echo "demo run $k of $n: exit $code"
  done
fi
valid=0
rows=""
for k in $(seq 1 "$n"); do
  log=bin/demo-run-$k.log
  read -r code took < <(sed -nE 's/^demo exit: ([0-9]+) after ([0-9]+) s$/\1 \2/p' "$log" | tail -1)
  case ${code:-x} in
    0) verdict="valid"; valid=$((valid + 1)) ;;
    3) verdict="**invalid** (self-check)" ;;
    *) verdict="**failed** (exit ${code:-?})" ;;
  esac
  # The self-check's verdict, not the calibration's trial runs before it.
  late=$(sed -n '/self-check FAILED/,$p' "$log" | grep -oE 'link [a-z0-9-]+: [^:]*: ([0-9]+ of [0-9]+ packets [^,]*, )?p99 lateness [0-9.]+ ms' | head -3 | tr '\n' ' ')
  # bench's table rows: path, ttfb ms, download Mbit/s, steady Mbit/s,
  # predicted Mbit/s, ...; then each stream's time against the model's.
  # (A prediction that is a bound is printed "≤ X": its own field.)
  direct=$(awk '$1 == "direct" && $3 == "ms" {p = $8; if (p == "≤") p = p " " $9; print $4 " (steady " $6 ", predicted " p ")"}' "$log" | tail -1)
  chain=$(awk '$1 == "chain" && $3 == "ms" {p = $8; if (p == "≤") p = p " " $9; print $4 " (steady " $6 ", predicted " p ")"}' "$log" | tail -1)
  dtime=$(grep -oE '^  direct down stream 1: .* modelled [0-9.]+ s \([0-9.]+×\)' "$log" | grep -oE 'modelled [0-9.]+ s \([0-9.]+×\)' | tail -1)
  ctime=$(grep -oE '^  chain  down stream 1: .* modelled [0-9.]+ s \([0-9.]+×\)' "$log" | grep -oE 'modelled [0-9.]+ s \([0-9.]+×\)' | tail -1)
  speedup=$(grep -oE 'download [0-9.]+×' "$log" | tail -1)
  rows+="| $k | $verdict | ${took:-?} s | ${direct:-—} | ${dtime:-—} | ${chain:-—} | ${ctime:-—} | ${speedup#download } | ${late:-—} |"$'\n'
done
{
  echo "# The demo, run $n times in a row"
  echo
  echo "Made by \`scripts/demo-repeat.sh $n\` (as root) on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), $(nproc) CPUs, kernel $(uname -r)."
  echo "Each run is \`scripts/demo.sh\`, what \`sudo make demo\` runs: the world lab, \`relayctl plan --dst tokyo --window-probe 4MB\`, \`relayctl bench\` (a 4 MB window probe on the client's first segment, then 10 s downloads, direct and through the plan)."
  echo "A run is valid when the link emulator's self-check held on every link (exit 0); an invalid run lists its late links."
  echo
  echo "**Valid: $valid of $n.**"
  echo
  echo "| run | self-check | wall time | direct download Mbit/s | direct: 10 s against the model's time for its bytes | chain download Mbit/s | chain: 10 s against the model's time | speed-up | late links (first 3) |"
  echo "|---:|---|---:|---|---|---|---|---:|---|"
  printf '%s' "$rows"
  echo
  echo "Download: over the whole 10 s; steady: over its second half; predicted: the plan's steady rate. The model's time: \`relayctl bench\`'s per-stream line, the model's completion time for the bytes the stream moved (a warm chain's setup or direct's, the admin API's TLS round trip, slow start over the slowest segment to ramp, the predicted rate), and the measured time over it (above 1: slower than modelled)."
} > "$out"
echo "wrote $out: $valid of $n valid"
