#!/usr/bin/env bash
# How often a window-limited chain falls short of its plan: N fresh labs of
# one topology, each `relayctl bench` downloading 16 MiB direct and through
# the plan, as the lab tests do. Per run it prints measured/predicted and,
# from `ss -tmi` sampled during the transfer, the rcv_ssthresh of the
# client's relay link (its receive window's ceiling; the planner assumes
# Linux's usual ~0.65 of tcp_rmem max). A run the lab's self-check calls
# invalid prints its exit code 3 and counts as neither.
# Needs root. Usage: bench/run-window-repeat.sh [-t TOPO] [-n RUNS] [-transport tls|plain] [-out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
topo=sweep-30-20 runs=20 transport=tls out=
while [ $# -gt 0 ]; do
  case "$1" in
    -t) topo=$2; shift 2 ;;
    -n) runs=$2; shift 2 ;;
    -transport) transport=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    *) echo "usage: $0 [-t TOPO] [-n RUNS] [-transport tls|plain] [-out FILE]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "run-window-repeat.sh: the lab needs root" >&2
  exit 1
fi
make -s build
bin=$PWD/bin
{
  echo "# $topo, transport $transport, $runs runs ($(git describe --always --dirty), $(date -u +%FT%TZ))"
  echo "# command: bench/run-window-repeat.sh -t $topo -n $runs -transport $transport"
  echo "run exit measured_mbps predicted_mbps ratio link_rcv_ssthresh"
} | tee ${out:+"$out"}
for i in $(seq 1 "$runs"); do
  dir=$(mktemp -d)
  code=0
  "$bin/relayctl" lab run -t "configs/lab/$topo.yaml" --transport "$transport" -- \
    env OUT="$dir" PATH="$bin:$PATH" sh -c '
      sleep 8
      ( for k in $(seq 1 40); do ss -tmi state established "( dport = :7000 )"; sleep 0.25; done > "$OUT/ss.txt" 2>&1 ) &
      relayctl bench --dst server:8000 --transfers down --size 16777216 --history "" -o json > "$OUT/bench.json"
      wait' > "$dir/lab.log" 2>&1 || code=$?
  python3 - "$i" "$code" "$dir" <<'PY' | tee -a ${out:+"$out"}
import json, re, sys
i, code, d = sys.argv[1:]
try:
    b = json.load(open(d + "/bench.json"))
    m, p = b["chain"]["down_bps"] / 1e6, b["predicted"]["down_bps"] / 1e6
    # The relay link that received the most: the chain's download.
    best, ss = 0, "-"
    for blk in open(d + "/ss.txt").read().split("\n\t"):
        got = re.search(r"bytes_received:(\d+)", blk)
        th = re.search(r"rcv_ssthresh:(\d+)", blk)
        if got and th and int(got.group(1)) > best:
            best, ss = int(got.group(1)), th.group(1)
    print(f"{i} {code} {m:.1f} {p:.1f} {m / p:.2f} {ss}")
except Exception as e:
    print(f"{i} {code} - - - - ({e})")
PY
  rm -rf "$dir"
done
