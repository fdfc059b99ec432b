#!/usr/bin/env bash
# What the emulator's timing error does to a measured figure: the lab's
# self-check by effect rests on this table. Known error is injected into
# every link of split2 (RELAYMESH_WANEMU_INJECT, counted as lateness, as if
# the engine itself had been that late) and, in the same lab run, the
# figures the tests check are measured: the first TCP handshake of the run
# (client to r1, a 25 ms link), the median of 5 more, a window-limited
# download through r1 (two 25 ms segments) and one direct (50 ms). Each
# injection runs in turn with runs without one, round after round, and
# every figure is reported as its median over the rounds against the
# baseline's median from the same bench run (ratios: the machine is shared).
# Each row also gives what the self-check saw (lab run --report): the worst
# link's mean extra delay and p99 lateness as shares of its RTT, its
# longest stall, and the move the check estimates.
# Needs root; ~10 min. Usage:
#   bench/run-lab-sensitivity.sh [-rounds N] [-out DIR] [INJECTION...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=3 out=bench/results/lab-sensitivity
injections=()
while [ $# -gt 0 ]; do
  case "$1" in
    -rounds) rounds=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    -*) echo "usage: $0 [-rounds N] [-out DIR] [INJECTION...]" >&2; exit 2 ;;
    *) injections+=("$1"); shift ;;
  esac
done
if [ ${#injections[@]} -eq 0 ]; then
  # Uniform: mean extra delay. Tail: 1 % of packets (and those queued
  # behind them) late by 1-10 ms. Stall: every link held once a second.
  injections=(uniform=250us uniform=500us uniform=1ms uniform=2500us
    tail=1%:1ms tail=1%:2500us tail=1%:5ms tail=1%:10ms tail=5%:2500us
    stall=10ms/1s stall=25ms/1s stall=50ms/1s stall=100ms/1s)
fi
lab_bench_start run-lab-sensitivity.sh
bin=$PWD/bin
raw=$out/runs.jsonl
: > "$raw"
commit=$(git describe --always --dirty)
started=$(date -u +%FT%TZ)

measure() { # INJECTION ROUND
  local inj=$1 round=$2 dir code=0
  dir=$(mktemp -d)
  RELAYMESH_WANEMU_INJECT=$inj "$bin/relayctl" lab run -t split2 --report "$dir/verdict.json" -- \
    env OUT="$dir" sh -c '
      sleep 1
      curl -sS -o /dev/null -w "%{time_connect} %{time_namelookup}\n" http://r1:9090/healthz > "$OUT/first.txt"
      for i in 1 2 3 4 5; do curl -sS -o /dev/null -w "%{time_connect} %{time_namelookup}\n" http://r1:9090/healthz; done > "$OUT/hs.txt"
      curl -sS -o /dev/null -w "%{speed_download}\n" -x socks5h://r1:1080 http://server:8000/bytes/33554432 > "$OUT/chain.txt"
      curl -sS -o /dev/null -w "%{speed_download}\n" http://server:8000/bytes/16777216 > "$OUT/direct.txt"' \
    > "$dir/lab.log" 2>&1 || code=$?
  if [ "$code" -ne 0 ] && [ "$code" -ne 3 ]; then
    echo "run-lab-sensitivity.sh: $inj: lab run failed (exit $code):" >&2
    cat "$dir/lab.log" >&2
    exit 1
  fi
  python3 - "$inj" "$round" "$code" "$dir" >> "$raw" <<'PY'
import json, statistics, sys
inj, rnd, code, d = sys.argv[1:]
def hs(path):
    out = []
    for line in open(path):
        c, n = map(float, line.split())
        out.append((c - n) * 1000)
    return out
v = json.load(open(d + "/verdict.json"))
w = v["links"][v["worst"]]
print(json.dumps({
    "injection": inj or "none", "round": int(rnd), "valid": code == "0",
    "first_handshake_ms": hs(d + "/first.txt")[0],
    "handshake_median_ms": statistics.median(hs(d + "/hs.txt")),
    "chain_mbps": float(open(d + "/chain.txt").read()) * 8 / 1e6,
    "direct_mbps": float(open(d + "/direct.txt").read()) * 8 / 1e6,
    "worst_link": "-".join(w["between"]), "mean_share": w["effect"]["mean_share"],
    "tail_share": w["effect"]["tail_share"],
    "stall_ms": w["effect"]["stall_share"] * v["check"]["budget"]["window_ns"] / 1e6,
    "moves": w["effect"]["moves"],
}))
PY
  rm -rf "$dir"
}

for round in $(seq 1 "$rounds"); do
  for inj in "" "${injections[@]}"; do
    echo "round $round: ${inj:-none}" >&2
    measure "$inj" "$round"
  done
done

python3 - "$raw" "$commit" "$started" "$rounds" "$*" > "$out/table.md" <<'PY'
import json, statistics, sys
raw, commit, started, rounds, args = sys.argv[1:]
runs = [json.loads(l) for l in open(raw)]
order = []
for r in runs:
    if r["injection"] not in order:
        order.append(r["injection"])
med = lambda inj, k: statistics.median(r[k] for r in runs if r["injection"] == inj)
base = {k: med("none", k) for k in ("first_handshake_ms", "handshake_median_ms", "chain_mbps", "direct_mbps")}
print(f"# What the emulator's timing error does to a figure\n")
print(f"split2 (50 ms direct; two 25 ms segments through r1; 256 KiB receive buffers), every link injected; "
      f"medians of {rounds} rounds, each figure against the runs without injection of the same bench run.\n")
print(f"Measured {started} on commit {commit} with `bench/run-lab-sensitivity.sh -rounds {rounds}{(' ' + args) if args.strip() else ''}`; raw runs in `runs.jsonl`.\n")
print(f"Baseline: first handshake {base['first_handshake_ms']:.2f} ms, median handshake {base['handshake_median_ms']:.2f} ms, "
      f"chain {base['chain_mbps']:.1f} Mbit/s, direct {base['direct_mbps']:.1f} Mbit/s.\n")
print("| injected | self-check saw on the worst link: mean / p99 share of RTT, longest stall | the check's estimate at that commit | chain rate moved | direct rate moved | first handshake moved | median handshake moved | valid runs |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for inj in order:
    rs = [r for r in runs if r["injection"] == inj]
    mv = lambda k: 100 * (med(inj, k) / base[k] - 1)
    print(f"| {inj} | {100*med(inj,'mean_share'):.2f} % / {100*med(inj,'tail_share'):.1f} %, {med(inj,'stall_ms'):.1f} ms | "
          f"{100*med(inj,'moves'):.1f} % | {mv('chain_mbps'):+.1f} % | {mv('direct_mbps'):+.1f} % | "
          f"{mv('first_handshake_ms'):+.1f} % | {mv('handshake_median_ms'):+.1f} % | {sum(r['valid'] for r in rs)}/{len(rs)} |")
PY
cat "$out/table.md"
