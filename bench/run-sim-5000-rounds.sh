#!/usr/bin/env bash
# What the shortlist rounds miss at 5,000 relays (relayctl sim, 200 pairs,
# the world and pairs of bench/run-sim-bench.sh): the defaults side by side
# with 1,024 requests in flight instead of 256 and with 8,000 probes a round
# instead of 4,000, in one run (relayctl sim --variant: the fleet is measured
# once and each pair is planned by every setting in turn). Its table's "15%"
# and "20%" columns (within_15pct, within_20pct in the JSON) tell whether
# the plans outside 10 % of the optimum miss by little or by much. Writes
# bench/results/sim-5000-rounds.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 15 minutes on 2 cores.
# Usage: bench/run-sim-5000-rounds.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run rounds_5000 --relays 5000 \
    --variant 'in-flight-1024=--in-flight 1024' \
    --variant 'explore-8000=--explore 8000' "$@"
}
sim_bench_json sim-5000-rounds.json runs "$@"
