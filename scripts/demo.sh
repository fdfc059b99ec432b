#!/usr/bin/env bash
# The main job, end to end on one machine: build, bring up the emulated
# multi-region WAN (configs/lab/world.yaml: a client in Frankfurt whose
# receive window is small, relays in seven regions, a server in Tokyo), and
# download from Tokyo directly and through relays frankfurt -> tokyo,
# printing the speed-up. Needs root (namespaces, TUN devices).
#
# Until the planner lands (`relayctl plan`), the chain is given by hand: a
# local relayd in the client node chains through frankfurt and tokyo, which
# is what `relayctl connect` will do with a planned chain.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: the lab needs root (network namespaces, TUN devices): run 'sudo make demo'" >&2
  exit 1
fi
command -v curl >/dev/null || ./scripts/test-deps.sh
make -s build
exec ./bin/relayctl lab run -t configs/lab/world.yaml -- \
  env RELAYD="$PWD/bin/relayd" SIZE="${DEMO_BYTES:-8388608}" "$PWD/scripts/demo-client.sh"
