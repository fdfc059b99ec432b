#!/usr/bin/env bash
# SOCKS5 UDP through one relayd on loopback (bench/udpbench): a client sends
# datagrams at a fixed rate through a UDP association to an echo server and
# back; every stage is counted (the client, the relay's counters at its
# entry and exit, the echo server) with the kernel's UDP drops
# (/proc/net/snmp), so a loss is placed where it happened. No root needed;
# nothing leaves the machine.
# Writes bench/results/udp.md.
# Usage: bench/run-udp-bench.sh [udpbench flags, e.g. -rate 20000 -duration 10s]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bench/.bin
mkdir -p "$BIN" bench/results
go build -o "$BIN/relayd" ./cmd/relayd
go build -o "$BIN/udpbench" ./bench/udpbench
out=bench/results/udp.md
table=$("$BIN/udpbench" -relayd "$BIN/relayd" "$@")
{
  echo "# SOCKS5 UDP through one relay on loopback"
  echo
  echo "$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), \`bench/run-udp-bench.sh${*:+ $*}\`"
  echo "(\`bench/udpbench\`: one association, each datagram echoed back the same way;"
  echo "the kernel's counters are the whole host's over the run)."
  echo
  echo "| stage | datagrams |"
  echo "|---|---|"
  echo "$table"
} >"$out"
cat "$out"
