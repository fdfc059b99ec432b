#!/usr/bin/env bash
# Does the packet engine hold the stripe lab's crossing (configs/lab/
# stripe.yaml: r1 - r2, 200 ms RTT, 400 Mbit/s, relays on stock buffers)?
# iperf3 from r1 to r2 with 1, 4 and 8 streams, 10 s each, each in a fresh
# `relayctl lab up` so the link statistics cover that run only; then the
# crossing's statistics from `relayctl lab status`: packets the emulator
# dropped for want of slots (the run is then invalid), queue drops (the
# link's own tail drop), lateness, and the self-check's verdict.
# Prints a markdown section for this checkout (date, commit, engine,
# commands, table); -out FILE appends it to FILE as well.
# Needs root; run alone (the lab's self-check fails under other load).
# Usage: sudo bench/run-lab-stripe-check.sh [-label TEXT] [-out FILE] [STREAMS...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
label="" out="" seconds=10
while [ $# -gt 0 ]; do
  case "$1" in
    -label) label=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    -*) echo "usage: $0 [-label TEXT] [-out FILE] [STREAMS...]" >&2; exit 2 ;;
    *) break ;;
  esac
done
streams=("$@")
[ ${#streams[@]} -gt 0 ] || streams=(1 4 8)
if [ "$(id -u)" -ne 0 ]; then
  echo "run-lab-stripe-check.sh: the lab needs root: sudo bench/run-lab-stripe-check.sh" >&2
  exit 1
fi
install_peers run-lab-stripe-check.sh iperf3
make -s build
relayctl=$PWD/bin/relayctl
tmp=$(mktemp -d)
cleanup() { "$relayctl" lab down stripe >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT

for p in "${streams[@]}"; do
  "$relayctl" lab up -t configs/lab/stripe.yaml > "$tmp/up-$p.txt"
  "$relayctl" lab exec r2 -- iperf3 -s -1 -D
  sleep 1
  "$relayctl" lab exec r1 -- iperf3 -c r2 -t "$seconds" -P "$p" -J > "$tmp/iperf-$p.json"
  "$relayctl" lab status -o json > "$tmp/status-$p.json"
  "$relayctl" lab down stripe > /dev/null
done

section=$(python3 - "$tmp" "$label" "$seconds" "${streams[@]}" <<'EOF'
import json, subprocess, sys, datetime, os
tmp, label, seconds, streams = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
first = json.load(open(os.path.join(tmp, "status-%s.json" % streams[0])))
print("### %s%s, %s, %d CPUs, %s" % (label + ": " if label else "", commit, now, os.cpu_count(), os.uname().release))
print()
print("Engine: `%s`." % first.get("engine", "?"))
print()
print("Commands, per row (a fresh lab each): `relayctl lab up -t configs/lab/stripe.yaml`, "
      "`relayctl lab exec r2 -- iperf3 -s -1 -D`, `relayctl lab exec r1 -- iperf3 -c r2 -t %s -P N -J`, "
      "`relayctl lab status -o json`, `relayctl lab down stripe`." % seconds)
print()
print("| streams | Mbit/s received, %s s | last 5 s | retransmits | r1→r2 packets held at most / slots | slot drops r1→r2 / r2→r1 | queue drops r1→r2 | lateness p99 r1→r2 / r2→r1 ms | max ms | mean extra ms | engine CPU s | self-check |" % seconds)
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for p in streams:
    ip = json.load(open(os.path.join(tmp, "iperf-%s.json" % p)))
    st = json.load(open(os.path.join(tmp, "status-%s.json" % p)))
    end = ip["end"]
    rx = end["sum_received"]["bits_per_second"] / 1e6
    tail = [iv["sum"]["bits_per_second"] for iv in ip["intervals"]][-5:]
    last5 = sum(tail) / len(tail) / 1e6 if tail else 0
    retr = end["sum_sent"].get("retransmits", "?")
    link = next(l for l in st["links"] if sorted(l["between"]) == ["r1", "r2"])
    ab, ba = (link["ab"], link["ba"]) if link["between"] == ["r1", "r2"] else (link["ba"], link["ab"])
    held = "%s / %s" % (ab.get("held_peak", "-"), ab.get("slots", "4096"))
    cpu = sum(s.get("cpu_ns", 0) for s in st.get("engine_shards") or []) / 1e9
    verdict = "valid" if st["valid"] else "INVALID: " + "; ".join(x.replace("\n", " ").replace("|", "/") for x in st.get("problems", []))
    print("| %s | %.1f | %.1f | %s | %s | %d / %d | %d | %.3f / %.3f | %.2f | %.3f | %.1f | %s |" % (
        p, rx, last5, retr, held, ab["drops_slots"], ba["drops_slots"], ab["drops_queue"],
        ab["lateness_p99_ns"] / 1e6, ba["lateness_p99_ns"] / 1e6,
        max(ab["lateness_max_ns"], ba["lateness_max_ns"]) / 1e6,
        (ab["lateness_mean_ns"] + ba["lateness_mean_ns"]) / 1e6, cpu, verdict))
EOF
)
echo "$section"
if [ -n "$out" ]; then
  printf '\n%s\n' "$section" >> "$out"
fi
