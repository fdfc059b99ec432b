#!/usr/bin/env bash
# The quorum of a plan's rounds after its first two (relayctl plan
# --shortlist-later-quorum, relayctl sim --later-quorum): the default
# (0.7) side by side in one run with 0.9 (every round at --quorum, as
# before) and 0.8, over the world and pairs of bench/run-sim-bench.sh: at
# 1,000 relays (200 pairs) to random servers and to relays' hosts (relayctl
# plan --dst REGION, --dst-relays), at 5,000 relays (100 pairs) to random
# servers. Writes bench/results/sim-later-quorum.json;
# bench/results/sim.md is written by hand from it. No root, no network.
# About 13 minutes on 2 cores.
# Usage: bench/run-sim-later-quorum.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  local v=(--variant 'later-0.9=--later-quorum 0.9' --variant 'later-0.8=--later-quorum 0.8')
  sim_run later_quorum_1000 --relays 1000 "${v[@]}" "$@"
  echo ","
  sim_run later_quorum_1000_dst_relays --relays 1000 --dst-relays "${v[@]}" "$@"
  echo ","
  sim_run later_quorum_5000 --relays 5000 --pairs 100 "${v[@]}" "$@"
}
sim_bench_json sim-later-quorum.json runs "$@"
