#!/usr/bin/env bash
# A plan's deadline (relayctl plan --shortlist-deadline, relayctl sim
# --deadline: no round of targeted probes that would end past it), side by
# side in one run with no deadline, over the world and pairs of
# bench/run-sim-bench.sh: at 1,000 relays (200 pairs) deadlines of 2 s and
# 2.5 s, to random servers and to relays' hosts (relayctl plan --dst
# REGION, --dst-relays); at 5,000 relays (100 pairs) 3 s and 4 s, to
# random servers. Writes bench/results/sim-deadline.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 10 minutes on 2 cores.
# Usage: bench/run-sim-deadline.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run deadline_1000 --relays 1000 --variant 'deadline-2s=--deadline 2s' --variant 'deadline-2.5s=--deadline 2.5s' "$@"
  echo ","
  sim_run deadline_1000_dst_relays --relays 1000 --dst-relays --variant 'deadline-2s=--deadline 2s' --variant 'deadline-2.5s=--deadline 2.5s' "$@"
  echo ","
  sim_run deadline_5000 --relays 5000 --pairs 100 --variant 'deadline-3s=--deadline 3s' --variant 'deadline-4s=--deadline 4s' "$@"
}
sim_bench_json sim-deadline.json runs "$@"
