#!/usr/bin/env bash
# Many tunnels through one proxy on loopback (bench/tunnelload): relayd
# against glider, side by side in one run, each under a 20,000-descriptor
# limit (prlimit, soft and hard). For each run and proxy, on a fresh
# process: 3,000 tunnels doing 64-byte round trips for 10 s (round trips a
# second, the proxy's resident memory per tunnel), then 9,000 tunnels
# (how many open; the proxy's descriptors per tunnel). For relayd, its
# metrics say how much of the memory is goroutine stacks and heap. Medians
# of RUNS runs (default 3), relayd and glider alternating. Needs root (the load client
# holds both ends of every tunnel: 18,000+ descriptors) and prlimit.
# Writes bench/results/load.md and bench/results/load.jsonl.
# Usage: sudo bench/run-load-bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
cmdline="bench/run-load-bench.sh${*:+ $*}"
if [ "$(id -u)" -ne 0 ]; then
  echo "run-load-bench.sh: needs root (the load client holds 18,000+ descriptors): sudo bench/run-load-bench.sh" >&2
  exit 1
fi
command -v prlimit >/dev/null || { echo "run-load-bench.sh: needs prlimit (Debian: util-linux)" >&2; exit 1; }
BIN=bench/.bin
mkdir -p "$BIN" bench/results
if [ ! -x "$BIN/glider" ]; then
  tmp=$(mktemp -d)
  ( cd "$tmp" && printf 'module gliderbuild\n\ngo 1.22\n\nrequire github.com/nadoo/glider v0.16.4\n' > go.mod \
    && printf 'package main\nimport _ "github.com/nadoo/glider"\n' > tools.go \
    && go mod tidy >/dev/null 2>&1 && go build -o glider github.com/nadoo/glider ) \
    && cp "$tmp/glider" "$BIN/glider"
  rm -rf "$tmp"
fi
go build -o "$BIN/relayd" ./cmd/relayd
go build -o "$BIN/tunnelload" ./bench/tunnelload
jsonl=bench/results/load.jsonl
: >"$jsonl"
port=21080
admin=21090

start_proxy() { # KIND: starts it under the limit, sets $pid
  case $1 in
    relayd) prlimit --nofile=20000:20000 -- "$BIN/relayd" run --socks "127.0.0.1:$port" --http "" \
              --admin "127.0.0.1:$admin" --allow-private --log-level error 2>/dev/null & ;;
    glider) prlimit --nofile=20000:20000 -- "$BIN/glider" -listen "socks5://127.0.0.1:$port" -check disable >/dev/null 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
}

stop_proxy() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  sleep 2 # the sockets' TIME_WAIT and the process's memory gone
}

for run in $(seq 1 "$runs"); do
  for kind in relayd glider; do
    for load in "3000 10s" "9000 3s"; do
      read -r tunnels busy <<<"$load"
      start_proxy "$kind"
      metrics=""
      [ "$kind" = relayd ] && metrics="http://127.0.0.1:$admin/metrics"
      "$BIN/tunnelload" -socks "127.0.0.1:$port" -pid "$pid" -metrics "$metrics" -tunnels "$tunnels" -duration "$busy" -open-timeout 40s |
        sed "s/^{/{\"kind\":\"$kind\",\"run\":$run,/" >>"$jsonl"
      stop_proxy
    done
  done
done
"$BIN/tunnelload" -report "$jsonl" -cmdline "$cmdline" >bench/results/load.md
cat bench/results/load.md
