#!/usr/bin/env bash
# A relay's nearest peers by rings of RTT (probe.per_ring): each relay's
# probe set with its nearest peers by RTT alone (--per-ring -1, as before
# rings) and with two of them from each ring of RTT before the rest (below
# 4 ms, 4-8 ms, 8-16 ms, ...; the default), in the world and with the pairs of
# bench/run-sim-bench.sh: 1,000 relays (400 pairs, the first 200 those of
# sim.json) and 5,000 relays (200 pairs), 30 minutes of measurement. Each
# setting measures its own fleet (the probes differ), so each is a run of
# its own, one after the other. Writes bench/results/sim-per-ring.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 35 minutes on 2 cores, most of it the two fleets of 5,000 relays.
# Usage: bench/run-sim-per-ring.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run no_rings_1000 --relays 1000 --pairs 400 --per-ring -1 "$@"
  echo ","
  sim_run per_ring_2_1000 --relays 1000 --pairs 400 --per-ring 2 "$@"
  echo ","
  sim_run no_rings_5000 --relays 5000 --per-ring -1 "$@"
  echo ","
  sim_run per_ring_2_5000 --relays 5000 --per-ring 2 "$@"
}
sim_bench_json sim-per-ring.json runs "$@"
