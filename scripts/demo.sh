#!/usr/bin/env bash
# The main job, end to end on one machine: build, bring up the emulated
# multi-region WAN (configs/lab/world.yaml: a client in Frankfurt whose
# receive window is small, relays in seven regions, servers in Tokyo,
# Singapore and Virginia), let the relays measure each other, then plan the
# path to Tokyo (`relayctl plan`) and prove it (`relayctl bench`: direct and
# through the planned chain, side by side). Needs root (network namespaces,
# TUN devices). DEMO_DST and DEMO_DURATION override the destination and the
# length of each timed download. Exits 0 when the demo ran, also when the
# lab's self-check found the emulator late (said at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: the lab needs root (network namespaces, TUN devices): run 'sudo make demo'" >&2
  exit 1
fi
make -s build
dst=${DEMO_DST:-tokyo}
duration=${DEMO_DURATION:-10s}
set +e
./bin/relayctl lab run -t configs/lab/world.yaml -- sh -c "
set -e
echo '== lab world: the relays measure each other (10 s)'
sleep 10
echo '== relayctl plan --dst $dst'
'$PWD/bin/relayctl' plan --dst '$dst'
echo
echo '== relayctl bench --dst $dst: timed downloads, direct and through the plan'
'$PWD/bin/relayctl' bench --dst '$dst' --transfers down --duration '$duration' --history ''
"
code=$?
if [ "$code" -eq 3 ]; then
  # relayctl lab's exit 3: the commands succeeded, but the link emulator's
  # self-check saw packets leave late (it lists them above). The world lab
  # has 68 emulated links; on a small machine a 100 Mbit/s download through
  # it can starve the emulator. The demo's numbers are real measurements,
  # only the emulated delays were not exact: say so, and do not fail.
  echo
  echo "demo: note: the emulator's self-check failed (listed above): this machine could not keep every"
  echo "demo: emulated link exactly on time under the download's load. The plan and the speed-up above"
  echo "demo: were measured, on links whose delays were at times a few ms late."
  exit 0
fi
exit "$code"
