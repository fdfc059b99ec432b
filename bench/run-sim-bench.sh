#!/usr/bin/env bash
# The fleet simulator at 100, 1,000 and 5,000 relays (relayctl sim): probes
# and bytes per relay per minute, coordinate error, plan quality against the
# optimum, probes and wall time per plan; planning from a shortlist measured
# with the default 48 candidates, and with 96 (more probes per plan, better
# plans) at 100 and 1,000.
# Then 1,000 relays with churn. Writes bench/results/sim.json and
# sim-churn.json; bench/results/sim.md is written by hand from them.
# No root, no network: the internet is modelled. About 20 minutes on 2 cores.
# Usage: bench/run-sim-bench.sh [relayctl sim flags, e.g. --pairs 100 --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/.bin bench/results
go build -o bench/.bin/relayctl ./cmd/relayctl
out=bench/results
{
  echo '{"command": "bench/run-sim-bench.sh '"$*"'", "date": "'"$(date -u +%FT%TZ)"'",'
  echo '"candidates_48":'
  bench/.bin/relayctl sim --relays 100,1000,5000 -o json "$@"
  echo ", \"candidates_96\":"
  bench/.bin/relayctl sim --relays 100,1000 --candidates 96 -o json "$@"
  echo '}'
} > "$out/sim.json.tmp"
mv "$out/sim.json.tmp" "$out/sim.json"
# Churn: relays leave, fail and join; how placed a joining relay is a minute on.
bench/.bin/relayctl sim --relays 1000 --churn --pairs 50 -o json "$@" > "$out/sim-churn.json"
echo "wrote $out/sim.json and $out/sim-churn.json"
