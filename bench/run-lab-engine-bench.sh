#!/usr/bin/env bash
# The lab's packet engines side by side: one TCP download through a routed
# chain of 4 emulated links at rising link rates, each engine configuration
# in turn at every rate, each run in a fresh process. Writes
# bench/results/lab-engine.{md,json}. Needs root; ~10 min with the defaults.
# Run it on an otherwise quiet machine (never beside the lab tests or
# another benchmark).
# Usage: sudo bench/run-lab-engine-bench.sh [bench/labengine flags, e.g. -rates 100,400 -runs 3]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "run-lab-engine-bench.sh: the lab needs root: sudo make bench-lab-engine" >&2
  exit 1
fi
mkdir -p bin
go build -o bin/ ./cmd/relayctl
go build -o bin/labengine ./bench/labengine
exec ./bin/labengine -relayctl bin/relayctl -out bench/results/lab-engine "$@"
