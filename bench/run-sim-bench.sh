#!/usr/bin/env bash
# The fleet simulator at 100, 1,000 and 5,000 relays (relayctl sim): probes
# and bytes per relay per minute, coordinate error, plan quality against the
# optimum, probes and wall time per plan; planning from a shortlist with the
# defaults (192 candidates from a first cut of 384; from about 2,400 relays
# on, 8 % and 15 % of the relays: 400 from 750 at 5,000), and with 96 from 384
# (fewer probes per plan, worse plans) at 100 and 1,000.
# Then 1,000 relays with churn, and 1,000 relays without each of the
# parts of the shortlist (the search of the bottleneck's neighbourhood, the
# wide first cut, the caution of its second ranking, the site limit), with
# 16 neighbours instead of 12, with a higher
# optimism (0.7), with fewer rounds, and with the relays' shortcuts. Writes
# bench/results/sim.json, sim-churn.json and sim-ablation.json;
# bench/results/sim.md is written by hand from them.
# No root, no network: the internet is modelled. About 20 minutes on 2 cores.
# Usage: bench/run-sim-bench.sh [relayctl sim flags, e.g. --pairs 100 --seed 2]
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/.bin bench/results
go build -o bench/.bin/relayctl ./cmd/relayctl
out=bench/results
{
  echo '{"command": "bench/run-sim-bench.sh '"$*"'", "date": "'"$(date -u +%FT%TZ)"'", "commit": "'"$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"'",'
  echo '"defaults":'
  bench/.bin/relayctl sim --relays 100,1000,5000 -o json "$@"
  echo ", \"candidates_96\":"
  bench/.bin/relayctl sim --relays 100,1000 --candidates 96 --first-cut 384 -o json "$@"
  echo '}'
} > "$out/sim.json.tmp"
mv "$out/sim.json.tmp" "$out/sim.json"
# Churn: relays leave, fail and join; how placed a joining relay is a minute on.
bench/.bin/relayctl sim --relays 1000 --churn --pairs 50 -o json "$@" > "$out/sim-churn.json"
# Ablation: the same 1,000 relays (and the same pairs) with 16 shortcuts
# a relay, without the neighbourhood search, without the wide first cut,
# without caution, without the site limit, with 16 neighbours, with optimism
# 0.7, and with 2 and 4 rounds instead of 6.
{
  echo '{"shortcuts_16":'
  bench/.bin/relayctl sim --relays 1000 --shortcuts 16 -o json "$@"
  echo ', "no_neighbours":'
  bench/.bin/relayctl sim --relays 1000 --neighbours -1 -o json "$@"
  echo ', "no_first_cut":'
  bench/.bin/relayctl sim --relays 1000 --first-cut -1 -o json "$@"
  echo ', "caution_1":'
  bench/.bin/relayctl sim --relays 1000 --caution 1 -o json "$@"
  echo ', "no_site_limit":'
  bench/.bin/relayctl sim --relays 1000 --per-site -1 -o json "$@"
  echo ', "neighbours_16":'
  bench/.bin/relayctl sim --relays 1000 --neighbours 16 -o json "$@"
  echo ', "optimism_07":'
  bench/.bin/relayctl sim --relays 1000 --optimism 0.7 -o json "$@"
  echo ', "rounds_2":'
  bench/.bin/relayctl sim --relays 1000 --rounds 2 -o json "$@"
  echo ', "rounds_4":'
  bench/.bin/relayctl sim --relays 1000 --rounds 4 -o json "$@"
  echo '}'
} > "$out/sim-ablation.json.tmp"
mv "$out/sim-ablation.json.tmp" "$out/sim-ablation.json"
echo "wrote $out/sim.json, $out/sim-churn.json and $out/sim-ablation.json"
