#!/usr/bin/env bash
# Destinations at relays' hosts (relayctl plan --dst REGION), in the fleet
# simulator: each pair planned as relayctl plan plans to a region (the
# destination placed by its relay's published coordinate, so the landmarks'
# round is this host's own probes, and that relay probing the first cut's
# ends), side by side in one run with each relay of the first cut probing the
# destination instead (--relays-probe-dst), with the destination placed from
# the landmarks and probed by the relays as any host (--fit-dst
# --relays-probe-dst), and with TCP Fast Open (--fast-open, a host holding a
# cookie for every relay), over the world of bench/run-sim-bench.sh: 1,000
# relays (200 pairs) and 5,000 (100 pairs). Writes
# bench/results/sim-dst-relays.json; bench/results/sim.md is written by hand
# from it. No root, no network. About 11 minutes on 2 cores.
# Usage: bench/run-sim-dst-relays.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs() {
  sim_run dst_relays_1000 --relays 1000 --dst-relays --variant 'relays-probe-dst=--relays-probe-dst' --variant 'any-host=--fit-dst --relays-probe-dst' --variant 'fast-open=--fast-open' "$@"
  echo ","
  sim_run dst_relays_5000 --relays 5000 --pairs 100 --dst-relays --variant 'relays-probe-dst=--relays-probe-dst' --variant 'any-host=--fit-dst --relays-probe-dst' --variant 'fast-open=--fast-open' "$@"
}
sim_bench_json sim-dst-relays.json runs "$@"
