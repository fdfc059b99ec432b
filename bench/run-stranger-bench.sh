#!/usr/bin/env bash
# A relay under a stranger's load (bench/strangerload): the time clients with
# credentials, a peer relay and relayctl take to be served by one relayd,
# side by side with and without a stranger holding 1,000 idle connections to
# each of its public ports from 64 addresses. Runs in a network namespace of
# its own (its loopback interface carries the relay's, the clients' and the
# stranger's addresses, none of them loopback addresses to relayd; nothing
# leaves the machine). Needs root.
# Writes bench/results/stranger-load.{md,json}.
# Usage: bench/run-stranger-bench.sh [strangerload flags, e.g. -samples 40]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "run-stranger-bench.sh: needs root (a network namespace): sudo bench/run-stranger-bench.sh" >&2
  exit 1
fi
BIN=bench/.bin
mkdir -p "$BIN" bench/results
go build -o "$BIN/relayd" ./cmd/relayd
go build -o "$BIN/strangerload" ./bench/strangerload

ns=rm-stranger-$$
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
ip -n "$ns" link set lo up
ip -n "$ns" addr add 10.98.0.1/32 dev lo   # the relay
ip -n "$ns" addr add 10.98.0.2/32 dev lo   # the legitimate clients
for i in $(seq 1 64); do                    # the stranger
  ip -n "$ns" addr add "10.98.1.$i/32" dev lo
done
ip netns exec "$ns" sh -c "ulimit -n $(ulimit -Hn) && exec $BIN/strangerload -relayd $BIN/relayd -cmdline 'bench/run-stranger-bench.sh $*' $*"
