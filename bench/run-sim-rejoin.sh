#!/usr/bin/env bash
# Is a relay that joins usable in plans within a minute? The simulator
# restarts every relay of random cities, 100 relays or a few more (new
# relayds: no coordinate, no measurements), a minute before the plans, in a
# second run five minutes before, and in a third not at all (--rejoin-ago
# at the warm-up's length: the same relays, measured from the start); each
# run plans the same pairs, those whose every chain within 10 % of the
# optimum goes through one of those relays, over the world of
# bench/run-sim-bench.sh. 1,000 relays, 400 pairs. Writes
# bench/results/sim-rejoin.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 8 minutes on 2 cores.
# Usage: bench/run-sim-rejoin.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run rejoin_60s --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 1m "$@"
  echo ","
  sim_run rejoin_5m --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 5m "$@"
  echo ","
  sim_run rejoin_never --relays 1000 --pairs 400 --rejoin 100 --rejoin-ago 30m "$@"
}
sim_bench_json sim-rejoin.json runs "$@"
