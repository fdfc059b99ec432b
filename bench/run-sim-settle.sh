#!/usr/bin/env bash
# When a plan's rounds of targeted probes end (relayctl plan
# --shortlist-settle, relayctl sim --settle): the default (none: the rounds
# go on until the best plan stands on measurements) side by side in one run
# with 0.03 and 0.1 (a chain measured throughout within that share of the
# best plan on estimates ends them), over the world of
# bench/run-sim-bench.sh: at 1,000 relays (400 pairs) to random servers and
# to relays' hosts (relayctl plan --dst REGION, --dst-relays), at 5,000
# relays (100 pairs) to random servers. Writes
# bench/results/sim-settle.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 20 minutes on 2 cores.
# Usage: bench/run-sim-settle.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  local v=(--variant 'settle-0.03=--settle 0.03' --variant 'settle-0.1=--settle 0.1')
  sim_run settle_1000 --relays 1000 --pairs 400 "${v[@]}" "$@"
  echo ","
  sim_run settle_1000_dst_relays --relays 1000 --pairs 400 --dst-relays "${v[@]}" "$@"
  echo ","
  sim_run settle_5000 --relays 5000 --pairs 100 --variant 'settle-0.03=--settle 0.03' "$@"
}
sim_bench_json sim-settle.json runs "$@"
