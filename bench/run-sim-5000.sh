#!/usr/bin/env bash
# The whole first cut as candidates at 5,000 relays (relayctl sim, 200
# pairs, the world and pairs of bench/run-sim-bench.sh): a first cut of 750,
# all of it candidates (no second ranking), side by side with the defaults'
# 400 candidates ranked from it on its measured ends, with 1,024 requests in
# flight instead of 256, and with every estimated pair of a chain counted at
# 0.4 of its estimate instead of 0.6 when a round picks the pairs to probe
# (alone and with 1,024 in flight), in one run: the fleet is measured once
# and each pair is planned by every setting in turn (relayctl sim
# --variant), so their compute times share the machine's moment. Writes
# bench/results/sim-5000.json; bench/results/sim.md is written by hand from
# it. No root, no network. About 30 minutes on 2 cores.
# Usage: bench/run-sim-5000.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run sizes_5000 --relays 5000 --candidates 750 \
    --variant 'candidates-400=--candidates 400' \
    --variant 'in-flight-1024=--in-flight 1024' \
    --variant 'optimism-0.4=--optimism 0.4' \
    --variant 'optimism-0.4-in-flight-1024=--optimism 0.4 --in-flight 1024' "$@"
}
sim_bench_json sim-5000.json runs "$@"
