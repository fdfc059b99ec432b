#!/usr/bin/env bash
# Time to first byte through a 4-segment 50 ms chain in the emulated WAN lab
# (bench/ttfb/topology.yaml): direct, a relayd entry on the client's host (as
# relayctl connect) with and without optimistic data, relayd native (warm and
# cold pools), relayd hop by hop, relayd nested SOCKS5, dante hop by hop,
# nested SOCKS5 through three dantes (proxychains4), glider's forward chain,
# squid parents;
# then download throughput of the native path against the SOCKS5 chains.
# Writes bench/results/ttfb.{md,json}. Needs root (network namespaces, TUN);
# installs danted, squid, proxychains4 and curl from Debian where missing
# (and stops the services their packages start). glider is built here from
# the Go module proxy into bench/.bin (a throw-away module: nothing of
# glider is committed).
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
. bench/lib.sh
if [ "$report_only" -eq 0 ]; then
  install_peers run-ttfb-bench.sh dante-server squid curl proxychains4
fi
make build
go build -o bench/.bin/ttfb ./bench/ttfb
if [ ! -x bench/.bin/glider ]; then
  # glider v0.16.4, built from a throw-away module: `go install` of it is
  # refused by the module proxy here, a throw-away module builds it.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf 'module gliderbuild\n\ngo 1.26\n\nrequire github.com/nadoo/glider v0.16.4\n' > "$tmp/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/nadoo/glider"\n' > "$tmp/tools.go"
  (cd "$tmp" && go mod tidy && go build -o "$OLDPWD/bench/.bin/glider" github.com/nadoo/glider)
fi
bench/.bin/ttfb -cmdline "bench/run-ttfb-bench.sh $*" "$@"
