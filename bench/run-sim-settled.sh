#!/usr/bin/env bash
# A settled fleet: the simulator's plans after two hours of measurement
# instead of 30 minutes (--warmup 2h), over the world and pairs of
# bench/run-sim-bench.sh (its sim.json plans the same pairs after 30
# minutes): 1,000 and 5,000 relays, 200 pairs each. The coordinates go on
# settling past 30 minutes; a fleet runs for days. Writes
# bench/results/sim-settled.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 20 minutes on 2 cores, most of it the
# warm-up of 5,000 relays.
# Usage: bench/run-sim-settled.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run settled_1000 --relays 1000 --warmup 2h "$@"
  echo ","
  sim_run settled_5000 --relays 5000 --warmup 2h "$@"
}
sim_bench_json sim-settled.json runs "$@"
