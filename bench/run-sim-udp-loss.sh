#!/usr/bin/env bash
# What lost datagrams cost a plan whose relays are asked in one UDP
# datagram (relayctl plan --udp-ask, the default): each pair planned with
# asks, acknowledgements and replies lost at the paths' loss rates (relayctl
# sim --udp-loss, the default), with every ask getting through
# (--udp-loss=false), and over HTTPS (--udp-ask=false), side by side in one
# run over the world and pairs of bench/run-sim-udp-ask.sh: at 1,000 relays
# 400 pairs to random servers, at 5,000 relays 200; 30 minutes of
# measurement with the defaults. Writes bench/results/sim-udp-loss.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 25 minutes on 2 cores.
# Usage: bench/run-sim-udp-loss.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run udp_loss_1000 --relays 1000 --pairs 400 --variant 'lossless=--udp-loss=false' --variant 'https=--udp-ask=false' "$@"
  echo ","
  sim_run udp_loss_5000 --relays 5000 --variant 'lossless=--udp-loss=false' --variant 'https=--udp-ask=false' "$@"
}
sim_bench_json sim-udp-loss.json runs "$@"
