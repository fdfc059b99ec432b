#!/usr/bin/env bash
# The split experiment in the emulated WAN lab: one window-limited TCP
# download over a 50 ms path, direct and through 1-3 relays (and one relay at
# five positions), relayd vs dante vs squid on the same relay nodes.
# Writes bench/results/split.{md,json} and split-{segments,position}.svg.
# Needs root (the lab builds network namespaces and TUN devices).
# Usage: bench/run-split-bench.sh [bench/split flags, e.g. -runs 5 -size 67108864
#        -topologies split2,split3 | -plot-only]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

plot_only=0
for a in "$@"; do
  case "$a" in -plot-only|--plot-only|-plot-only=true|--plot-only=true) plot_only=1 ;; esac
done

if [ "$plot_only" -eq 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "run-split-bench.sh: the lab needs root: sudo make bench-split" >&2
    exit 1
  fi
  install_peers run-split-bench.sh dante-server squid curl
  make build
fi

go build -o bench/.bin/split ./bench/split
exec bench/.bin/split -cmdline "bench/run-split-bench.sh $*" "$@"
