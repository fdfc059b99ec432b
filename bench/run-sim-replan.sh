#!/usr/bin/env bash
# Replans in the fleet simulator (relayctl sim --replan): each pair planned,
# then planned again at once from what the first plan learnt, over the
# admin connections it opened (and afresh, and over new connections: see
# relayctl sim --help). 1,000 relays, 200 pairs; 5,000 relays, 60 pairs.
# Writes bench/results/sim-replan.json; bench/results/sim.md (Replans) is
# written by hand from it. No root, no network. About 9 minutes on 2 cores.
# Usage: bench/run-sim-replan.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run replan_1000 --relays 1000 --pairs 200 --replan "$@"
  echo ","
  sim_run replan_fresh_1000 --relays 1000 --pairs 200 --replan --replan-fresh "$@"
  echo ","
  sim_run replan_cold_1000 --relays 1000 --pairs 200 --replan --replan-cold "$@"
  echo ","
  sim_run replan_5000 --relays 5000 --pairs 60 --replan "$@"
}
sim_bench_json sim-replan.json runs "$@"
