#!/usr/bin/env bash
# Loopback relay benchmark: single TCP stream, 1 and 3 hops, upload
# and download, relayd vs an io.Copy relay (the splice floor) and peers, side
# by side in one run. Writes bench/results/relay-loopback.{md,json}.
# Usage: bench/run-relay-bench.sh [relaybench flags, e.g. -size 2GiB -runs 5]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bench/.bin
mkdir -p "$BIN" bench/results

# Peers from Debian packages (root only; missing peers are reported as skipped).
need=()
command -v danted >/dev/null || [ -x /usr/sbin/danted ] || need+=(dante-server)
command -v microsocks >/dev/null || need+=(microsocks)
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || need+=(squid)
command -v stunnel4 >/dev/null || need+=(stunnel4)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts them as services; the benchmark runs its own instances.
  for s in danted squid stunnel4; do systemctl stop "$s" 2>/dev/null || service "$s" stop 2>/dev/null || true; done
fi

# glider v0.16.4 from the Go module proxy, in a throw-away module (go install is refused).
if [ ! -x "$BIN/glider" ]; then
  tmp=$(mktemp -d)
  ( cd "$tmp" && printf 'module gliderbuild\n\ngo 1.22\n\nrequire github.com/nadoo/glider v0.16.4\n' > go.mod \
    && printf 'package main\nimport _ "github.com/nadoo/glider"\n' > tools.go \
    && go mod tidy >/dev/null 2>&1 && go build -o glider github.com/nadoo/glider ) \
    && cp "$tmp/glider" "$BIN/glider" || echo "glider build failed; it will be skipped" >&2
  rm -rf "$tmp"
fi

go build -o "$BIN/relayd" ./cmd/relayd
go build -o "$BIN/copyrelay" ./bench/copyrelay
go build -o "$BIN/relaybench" ./bench/relaybench
"$BIN/relaybench" -bin "$BIN" -out bench/results -cmdline "bench/run-relay-bench.sh $*" "$@"
