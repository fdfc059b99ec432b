#!/usr/bin/env bash
# Is a relay that joins usable in plans within a minute? The simulator
# restarts every relay of random cities, 100 relays or a few more (new
# relayds: no coordinate, no measurements), a minute before the plans, in a
# second run five minutes before, and in a third not at all (--rejoin-ago
# at the warm-up's length: the same relays, measured from the start); each
# run plans the same pairs, those whose every chain within 10 % of the
# optimum goes through one of those relays, over the world of
# bench/run-sim-bench.sh: by the defaults, and side by side without the
# young relays' optimism (--young-for -1s). 1,000 relays, 400 pairs.
# Writes bench/results/sim-rejoin.json; bench/results/sim.md is written by
# hand from it. No root, no network. About 18 minutes on 2 cores.
# Usage: bench/run-sim-rejoin.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  local v=(--variant 'not-young=--young-for -1s')
  sim_run rejoin_60s --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 1m "${v[@]}" "$@"
  echo ","
  sim_run rejoin_5m --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 5m "${v[@]}" "$@"
  echo ","
  sim_run rejoin_never --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 30m "$@"
}
sim_bench_json sim-rejoin.json runs "$@"
