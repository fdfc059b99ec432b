#!/usr/bin/env bash
# How often a relay reads every relay's coordinate (relayctl sim
# --fleet-view-every): the default, as relayd on Consul reads them (0.6 s a
# relay, from 10 s to 10 minutes: 10 minutes at 1,000 and 5,000 relays;
# the coordinate of the peer it probes read fresh at each probe), side by
# side with every 30 s, at 1,000 relays (600 pairs) and 5,000 (200 pairs;
# the world and pairs of bench/run-sim-bench.sh). The setting changes the relays'
# measurement, so each is its own run (no --variant). Writes
# bench/results/sim-fleet-view.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 15 minutes on 2 cores.
# Usage: bench/run-sim-fleet-view.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run defaults_1000 --relays 1000 --pairs 600 "$@"
  echo ","
  sim_run every_30s_1000 --relays 1000 --pairs 600 --fleet-view-every 30s "$@"
  echo ","
  sim_run defaults_5000 --relays 5000 "$@"
  echo ","
  sim_run every_30s_5000 --relays 5000 --fleet-view-every 30s "$@"
}
sim_bench_json sim-fleet-view.json runs "$@"
