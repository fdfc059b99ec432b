#!/usr/bin/env bash
# How big the first cut and the candidates should be at 5,000 relays
# (relayctl sim, 200 pairs, the world and pairs of bench/run-sim-bench.sh):
# the defaults grown with the fleet (a first cut of 750 and 400 candidates)
# against the sizes fixed before (384 and 192), a wider first cut, fewer and
# more candidates, and more rounds. Writes bench/results/sim-5000.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 35 minutes on 2 cores.
# Usage: bench/run-sim-5000.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
out=bench/results
sim_bench_start
{
  echo "{"
  sim_run first_cut_384_candidates_192 --relays 5000 --first-cut 384 --candidates 192 "$@"
  echo ","
  sim_run candidates_192 --relays 5000 --candidates 192 "$@"
  echo ","
  sim_run first_cut_1024_candidates_192 --relays 5000 --first-cut 1024 --candidates 192 "$@"
  echo ","
  sim_run candidates_512 --relays 5000 --candidates 512 "$@"
  echo ","
  sim_run rounds_12 --relays 5000 --rounds 12 "$@"
  echo "}"
} > "$out/sim-5000.json.tmp"
mv "$out/sim-5000.json.tmp" "$out/sim-5000.json"
echo "wrote $out/sim-5000.json"
