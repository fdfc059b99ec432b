#!/usr/bin/env bash
# The fleet simulator at 100, 1,000 and 5,000 relays (relayctl sim): probes
# and bytes per relay per minute, coordinate error, plan quality against the
# optimum, probes and wall time per plan; planning from a shortlist measured
# round by round, and with every candidate pair measured at once.
# Writes bench/results/sim.json (both runs) and prints both tables.
# No root, no network: the internet is modelled. About 25 minutes on 2 cores.
# Usage: bench/run-sim-bench.sh [relayctl sim flags, e.g. --pairs 100 --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/.bin bench/results
go build -o bench/.bin/relayctl ./cmd/relayctl
out=bench/results
{
  echo '{"command": "bench/run-sim-bench.sh '"$*"'", "date": "'"$(date -u +%FT%TZ)"'",'
  echo '"rounds":'
  bench/.bin/relayctl sim --relays 100,1000,5000 -o json "$@"
  echo ', "measure_candidates":'
  bench/.bin/relayctl sim --relays 100,1000,5000 --measure-candidates -o json "$@"
  echo '}'
} > "$out/sim.json.tmp"
mv "$out/sim.json.tmp" "$out/sim.json"
echo "wrote $out/sim.json"
