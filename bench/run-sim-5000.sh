#!/usr/bin/env bash
# How the planning settings do at 5,000 relays (relayctl sim, 200 pairs, the
# world and pairs of bench/run-sim-bench.sh): the defaults (a first cut and
# candidates grown with the fleet: 750 and 400) side by side with the sizes
# of 1,000 relays (384 and 192), more rounds and more probes a round, in one
# run: the fleet is measured once and each pair is planned by every setting
# in turn (relayctl sim --variant), so their compute times share the
# machine's moment. Writes bench/results/sim-5000.json; bench/results/sim.md
# is written by hand from it. No root, no network. About 30 minutes on 2
# cores.
# Usage: bench/run-sim-5000.sh [relayctl sim flags, e.g. --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
out=bench/results
sim_bench_start
{
  echo "{"
  sim_run sizes_5000 --relays 5000 \
    --variant 'first-cut-384-candidates-192=--first-cut 384 --candidates 192' \
    --variant 'rounds-12=--rounds 12' \
    --variant 'explore-8000=--explore 8000' "$@"
  echo "}"
} > "$out/sim-5000.json.tmp"
mv "$out/sim-5000.json.tmp" "$out/sim-5000.json"
echo "wrote $out/sim-5000.json"
