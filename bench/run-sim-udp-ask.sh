#!/usr/bin/env bash
# What asking relays in one UDP datagram (relayctl plan --udp-ask, the
# default; relayd admin_udp) saves a first plan against asking over new
# HTTPS connections (--udp-ask=false), side by side in one run over the
# world and pairs of bench/run-sim-per-ring.sh: at 1,000 relays 400 pairs
# to random servers and 400 to relays' hosts (relayctl plan --dst REGION),
# at 5,000 relays 200 pairs to random servers; 30 minutes of measurement
# with the defaults. Writes bench/results/sim-udp-ask.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 15 minutes on 2 cores.
# Usage: bench/run-sim-udp-ask.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run udp_ask_1000 --relays 1000 --pairs 400 --variant 'https=--udp-ask=false' "$@"
  echo ","
  sim_run udp_ask_1000_dst_relays --relays 1000 --pairs 400 --dst-relays --variant 'https=--udp-ask=false' "$@"
  echo ","
  sim_run udp_ask_5000 --relays 5000 --variant 'https=--udp-ask=false' "$@"
}
sim_bench_json sim-udp-ask.json runs "$@"
