#!/usr/bin/env bash
# What TCP Fast Open on the admin connections saves a plan (relayctl sim
# --fast-open), side by side in one run with the defaults, over the world
# and pairs of bench/run-sim-bench.sh: at 1,000 relays (200 pairs) each
# pair's first plan, then relayctl plan run again from it in a new process
# (--replan --replan-cold: new connections, to relays the first plan asked,
# whose cookies the kernel then holds); at 5,000 relays (100 pairs) the
# first plans. A first plan with Fast Open is modelled with a cookie for
# every relay: an upper bound for a host that has planned before. Writes
# bench/results/sim-fast-open.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 15 minutes on 2 cores.
# Usage: bench/run-sim-fast-open.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run fast_open_1000 --relays 1000 --replan --replan-cold --variant 'fast-open=--fast-open' "$@"
  echo ","
  sim_run fast_open_5000 --relays 5000 --pairs 100 --variant 'fast-open=--fast-open' "$@"
}
sim_bench_json sim-fast-open.json runs "$@"
