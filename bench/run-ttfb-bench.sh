#!/usr/bin/env bash
# Time to first byte through a 4-segment 50 ms chain in the emulated WAN lab
# (bench/ttfb/topology.yaml): direct, relayd native (cold), relayd hop by hop,
# relayd nested SOCKS5, dante hop by hop, squid parents.
# Writes bench/results/ttfb.{md,json}. Needs root (network namespaces, TUN),
# danted, squid and curl (install: apt-get install dante-server squid curl).
# Usage: bench/run-ttfb-bench.sh [bench/ttfb flags, e.g. -runs 50 -out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

report_only=0
for a in "$@"; do
  case "$a" in -report-only|--report-only|-report-only=true|--report-only=true) report_only=1 ;; esac
done
if [ "$report_only" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "run-ttfb-bench.sh: the lab needs root: sudo make bench-ttfb" >&2
  exit 1
fi
missing=()
[ -x /usr/sbin/danted ] || missing+=(dante-server)
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || missing+=(squid)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "run-ttfb-bench.sh: missing ${missing[*]}; install them (bench/run-split-bench.sh does, and stops their default services)" >&2
  exit 1
fi
make build
go build -o bench/.bin/ttfb ./bench/ttfb
exec bench/.bin/ttfb -cmdline "bench/run-ttfb-bench.sh $*" "$@"
