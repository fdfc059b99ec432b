#!/usr/bin/env bash
# The demo until `relayctl lab` lands: three relayd on loopback chained hop by
# hop (entry -> middle -> exit), and curl through the chain via SOCKS5 and HTTP.
# The destination is the exit relay's own admin API, so nothing leaves this
# machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/relayd ./cmd/relayd
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
start() { ./bin/relayd run --allow-private --log-level warn "$@" & pids+=($!); }
start --name exit   --socks 127.0.0.1:21082 --http "" --admin 127.0.0.1:29092
start --name middle --socks 127.0.0.1:21081 --http "" --admin 127.0.0.1:29091 --next socks5://127.0.0.1:21082
start --name entry  --socks 127.0.0.1:21080 --http 127.0.0.1:28080 --admin 127.0.0.1:29090 --next socks5://127.0.0.1:21081
for _ in $(seq 50); do curl -sf http://127.0.0.1:29090/healthz >/dev/null 2>&1 && break; sleep 0.1; done
echo "== three relays: entry 127.0.0.1:21080 -> middle :21081 -> exit :21082"
echo "== curl -x socks5h://127.0.0.1:21080 http://127.0.0.1:29092/v1/info  (the exit relay answers)"
curl -sS -x socks5h://127.0.0.1:21080 http://127.0.0.1:29092/v1/info
echo "== curl -x http://127.0.0.1:28080 (HTTP front end, same chain)"
curl -sS -x http://127.0.0.1:28080 http://127.0.0.1:29092/healthz
echo "== a loopback destination on a relay without --allow-private is refused (SOCKS5 0x02):"
./bin/relayd run --log-level error --socks 127.0.0.1:21083 --http "" --admin "" & pids+=($!)
sleep 0.3
curl -sS -x socks5h://127.0.0.1:21083 http://127.0.0.1:29092/healthz || true
echo "== entry relay metrics:"
curl -sS http://127.0.0.1:29090/metrics | grep -E '^relaymesh_(tunnel_requests|denials|tunnels_closed)' || true
