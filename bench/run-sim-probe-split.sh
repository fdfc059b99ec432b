#!/usr/bin/env bash
# How a relay splits its probe set between nearest and random peers
# (relayd probe.nearest and probe.random): 8 nearest and 4 random against
# 10 and 2 and 12 and 1, on the same budget of 12 probes a minute, with the
# nearest two from each ring of RTT first (the default). With rings the
# nearest reach the next cities and beyond, so fewer random peers may fit
# the coordinates as well. The world and pairs of
# bench/run-sim-per-ring.sh: 1,000 relays (400 pairs) and 5,000 relays (200
# pairs), 30 minutes of measurement. Each setting measures its own fleet,
# so each is a run of its own, one after the other. Writes
# bench/results/sim-probe-split.json; bench/results/sim.md is written by
# hand from it. No root, no network. About 30 minutes on 2 cores, most of
# it the three fleets of 5,000 relays.
# Usage: bench/run-sim-probe-split.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
# splits RELAYS FLAGS...: the three splits at one fleet size.
splits() {
  local relays=$1
  shift
  sim_run "n8_r4_$relays" --relays "$relays" --nearest 8 --random 4 "$@"
  echo ","
  sim_run "n10_r2_$relays" --relays "$relays" --nearest 10 --random 2 "$@"
  echo ","
  sim_run "n12_r1_$relays" --relays "$relays" --nearest 12 --random 1 "$@"
}
runs() {
  splits 1000 --pairs 400 "$@"
  echo ","
  splits 5000 "$@"
}
sim_bench_json sim-probe-split.json runs "$@"
