#!/usr/bin/env bash
# What the Consul backend's reads cost on the wire, against a real Consul
# agent (the pinned bin/consul, -dev, loopback): one answer of every
# relay's instance with its health, of every relay's coordinate, of one
# relay's coordinate, of every relay's pairs, and of one relay's instance,
# at 10, 100, 1,000 and 5,000 relays registered as relayd registers.
# Also times a planner's three whole reads on loopback, gzip and plain;
# relayctl's read before a plan (Consul.RefreshBeforePairs, then the
# cache) plain and gzip, and the whole read at once (Consul.Refresh)
# plain, in turn, medians of 5 and 9; then what the cache's Pairs and
# MeasuredPairs cost (BenchmarkConsulPairs).
# Writes bench/results/consul-costs.md. No root, no network. About a
# minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s bin/consul
out=bench/results/consul-costs.md
table=$(mktemp)
trap 'rm -f "$table"' EXIT
RELAYMESH_CONSUL_COSTS=$table go test -count=1 -timeout 20m -run '^TestConsulReadCosts$' -v ./pkg/registry/
# What Pairs and MeasuredPairs cost once the cache is read (no agent).
pairs=$(go test -count=1 -run '^$' -bench '^BenchmarkConsulPairs$' -benchtime 5x -benchmem ./pkg/registry/ |
  awk '/^BenchmarkConsulPairs\// {
    split($1, name, "/"); sub(/^relays=/, "", name[2]); sub(/-[0-9]+$/, "", name[3])
    printf "| %s | %s | %.1f ms | %.0f MB |\n", name[2], name[3], $3 / 1e6, $5 / 1e6 }')
{
  echo "# What the Consul backend's reads cost"
  echo
  echo "Made by \`make bench-consul-costs\` (bench/run-consul-costs.sh) at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ),"
  echo "against Consul $(bin/consul version | head -1 | cut -d' ' -f2) in -dev mode. One answer on the wire, status line and headers"
  echo "included: gzip (what relaymesh asks of an agent on another host) / plain (of an agent on"
  echo "loopback) where Consul compressed it. The last four columns are this machine's times (median of"
  echo "5 for the three reads, of 9 for the others, made in turn; a read's from request to last byte),"
  echo "a shared 2-core machine, agent and reader on it. A plan's read: when the plan can start (the"
  echo "relays and their coordinates in) · when the measured pairs are in too, from the read's start."
  echo
  cat "$table"
  echo
  echo "## The pairs from the cache"
  echo
  echo "\`BenchmarkConsulPairs\` (5 runs, the mean): Consul.Pairs (with-estimates) and MeasuredPairs (measured) once"
  echo "the cache holds a fleet whose relays each run on a Consul node of their own, every node with a"
  echo "coordinate, and each published 16 measured pairs. Above 1,000 relays Pairs makes no estimate"
  echo "(docs/registry.md, \"Estimated pairs\")."
  echo
  echo "| relays | read | time | allocated |"
  echo "|---:|---|---:|---:|"
  echo "$pairs"
} > "$out"
cat "$out"
