#!/usr/bin/env bash
# What the Consul backend's reads cost on the wire, against a real Consul
# agent (the pinned bin/consul, -dev, loopback): one answer of every
# relay's instance with its health, of every relay's coordinate, of one
# relay's coordinate, of every relay's pairs, and of one relay's instance,
# at 10, 100, 1,000 and 5,000 relays registered as relayd registers.
# Also times a planner's three whole reads on loopback, gzip and plain,
# and relayctl's read of the registry (Consul.Refresh) both ways, medians
# of 5 and 9 each.
# Writes bench/results/consul-costs.md. No root, no network. About 30 s
# on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s bin/consul
out=bench/results/consul-costs.md
table=$(mktemp)
trap 'rm -f "$table"' EXIT
RELAYMESH_CONSUL_COSTS=$table go test -count=1 -timeout 20m -run '^TestConsulReadCosts$' -v ./pkg/registry/
{
  echo "# What the Consul backend's reads cost"
  echo
  echo "Made by \`make bench-consul-costs\` (bench/run-consul-costs.sh) at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ),"
  echo "against Consul $(bin/consul version | head -1 | cut -d' ' -f2) in -dev mode. One answer on the wire, status line and headers"
  echo "included: gzip (what relaymesh asks of an agent on another host) / plain (of an agent on"
  echo "loopback) where Consul compressed it. The last two columns are this machine's times (median of"
  echo "5, of 9 for the last; a read's from request to last byte), a shared 2-core machine, agent and reader on it."
  echo
  cat "$table"
} > "$out"
cat "$out"
