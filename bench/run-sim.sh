#!/usr/bin/env bash
# Runs one of the simulator's experiments (bench/sim-experiments.txt: the
# question, the relayctl sim runs that answer it, the result file): builds
# relayctl, makes the runs one after the other, and writes
# bench/results/RESULT.json, a JSON object with one member per run (its
# command, date, commit and relayctl sim's report), replaced only once every
# run succeeded; then the experiment's report, if it has one, as RESULT.md.
# No root, no network. Run it alone: a plan's wall time counts its measured
# compute.
# Usage: bench/run-sim.sh NAME [relayctl sim flags added to every run, e.g. --seed 2]
#        bench/run-sim.sh --list
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
manifest=bench/sim-experiments.txt

list() { sed -n 's/^== \([^ :]*\)[^:]*: \(.*\)/  \1: \2/p' "$manifest"; }
if [ $# -lt 1 ] || [ "$1" = --list ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: bench/run-sim.sh NAME [relayctl sim flags]; the experiments ($manifest):"
  list
  [ $# -ge 1 ] && [ "$1" != -h ] && [ "$1" != --help ] && exit 0
  exit 2
fi
name=$1
shift
header=$(grep -E "^== $name( [^ :]+)?:" "$manifest" || true)
if [ -z "$header" ]; then
  echo "run-sim.sh: no experiment $name in $manifest; one of:" >&2
  list >&2
  exit 2
fi
result=$(sed -E 's/^== [^ :]+ ?([^ :]*):.*/\1/' <<<"$header")
result=${result:-sim-$name.json}
# The experiment's lines: after its header, up to the next one.
block=$(awk -v h="$header" '$0 == h {on = 1; next} /^== / {on = 0} on && NF && !/^#/' "$manifest")

runs() {
  local first=1 line
  local -a args
  while IFS= read -r line; do
    case $line in report\ *) continue ;; esac
    eval "args=($line)"
    [ $first = 1 ] || echo ","
    first=0
    sim_run "${args[@]}" "$@"
  done <<<"$block"
}
sim_bench_json "$result" runs "$@"
report=$(sed -n 's/^report //p' <<<"$block")
if [ -n "$report" ]; then
  md=bench/results/${result%.json}.md
  eval "$report" >"$md.tmp"
  mv "$md.tmp" "$md"
  echo "wrote $md"
fi
