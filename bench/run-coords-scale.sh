#!/usr/bin/env bash
# What `relayctl rtt` shows of a fleet in probe mode coordinates as it
# starts (bench/coordscale): RELAYS relayd processes on loopback ports (default
# 100), TLS links and admin APIs from one fleet secret, the default probe
# budget (12 handshakes a minute each); the share of ordered pairs given an
# RTT, measured or estimated, 30 s to 3 minutes after start. No root.
# Writes bench/results/coords-scale.md.
# Usage: bench/run-coords-scale.sh [RELAYS]
set -euo pipefail
cd "$(dirname "$0")/.."
relays=${1:-100}
make -s build
go build -o bench/.bin/coordscale ./bench/coordscale
out=bench/results/coords-scale.md
table=$(bench/.bin/coordscale -relays "$relays" -relayd bin/relayd -relayctl bin/relayctl)
{
  echo "# relayctl rtt on a fleet in probe mode coordinates"
  echo
  echo "$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), \`bench/run-coords-scale.sh${*:+ $*}\`, $(nproc) CPUs."
  echo "$relays relays on loopback (\`bench/coordscale\`), each making 12 probe handshakes a minute and publishing its"
  echo "network coordinate; \`relayctl rtt -o json\` read at each time after the last relay started. Measured:"
  echo "a relay's answered probes; estimated: from the two relays' coordinates. On loopback every RTT is"
  echo "tens of microseconds, so this measures coverage, not the estimates' accuracy (\`docs/planning.md\`)."
  echo
  echo "$table"
} >"$out"
cat "$out"
