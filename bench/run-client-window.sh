#!/usr/bin/env bash
# What window the client really advertises on its own segment in the world
# lab, against what the planner assumes (0.6 of tcp_rmem's max): one 30 s
# download through the plan per transport, with `ss -tmi` sampled 20 s into
# the chain's download in the client's first relay (frankfurt: its socket
# to the client, snd_wnd and rwnd_limited) and in the client (rcv_ssthresh).
# Needs root; run alone (the lab's self-check fails under other load).
# Usage: sudo bench/run-client-window.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/client-window}
mkdir -p "$out"
make -s build
report=$out/README.md
{
  echo "# The client's advertised window on its own segment (world lab)"
  echo
  echo "Made by \`sudo bench/run-client-window.sh\` on $(date -u +%Y-%m-%d), $(nproc) CPUs, $(uname -r)."
  echo "The client's tcp_rmem max is 256 KiB (262,144 bytes); the planner assumes 0.6 of it (157,286)."
  echo
  echo "| transport | chain steady Mbit/s | predicted | frankfurt→client snd_wnd (bytes) | share of 262,144 | rwnd_limited | client rcv_ssthresh |"
  echo "|---|---:|---:|---:|---:|---|---:|"
} > "$report"
for transport in tls plain; do
  ss_out=$(mktemp)
  bench_out=$(mktemp)
  # The chain's download starts after ~10 s settle + ~30 s direct download.
  ( sleep 62
    ip netns exec rm-world-frankfurt ss -tmi state established | tr '\n' ' ' | sed 's/ESTAB/\nESTAB/g' |
      grep 'bytes_acked:[0-9]\{8,\}' > "$ss_out.relay" || true
    ip netns exec rm-world-client ss -tmi state established | tr '\n' ' ' | sed 's/ESTAB/\nESTAB/g' |
      grep 'bytes_received:[0-9]\{8,\}' > "$ss_out.client" || true ) &
  sampler=$!
  ./bin/relayctl lab run --transport "$transport" -t world -- sh -c \
    "export PATH=$PWD/bin:\$PATH; sleep 10; relayctl bench --dst tokyo --transfers down --duration 30s --history '' -o json" > "$bench_out"
  wait "$sampler"
  steady=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.1f %.1f' % (d['chain']['down_steady_bps']/1e6, d['predicted']['down_bps']/1e6))" "$bench_out")
  # The download's sockets: the one that moved the most bytes.
  busiest() { python3 -c "
import re,sys
best=max((l for l in open(sys.argv[1]) if sys.argv[2]+':' in l), key=lambda l: int(re.search(sys.argv[2]+r':(\d+)', l).group(1)), default='')
m=re.search(sys.argv[3]+r':(\S+)', best)
print(m.group(1) if m else '')" "$@"; }
  wnd=$(busiest "$ss_out.relay" bytes_acked snd_wnd)
  lim=$(busiest "$ss_out.relay" bytes_acked rwnd_limited)
  ssth=$(busiest "$ss_out.client" bytes_received rcv_ssthresh)
  share=$(python3 -c "print('%.2f' % (int('${wnd:-0}')/262144))")
  echo "| $transport | ${steady% *} | ${steady#* } | ${wnd:-?} | $share | ${lim:-?} | ${ssth:-?} |" >> "$report"
  rm -f "$ss_out" "$ss_out.relay" "$ss_out.client" "$bench_out"
done
cat "$report"
