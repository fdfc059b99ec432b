#!/usr/bin/env bash
# Capacity learnt from traffic: on plan-learnt and plan-learnt-bbr (r1's
# links carry 30 Mbit/s and nobody declares it; r2's path is longer but
# 200 Mbit/s; CUBIC relays, or BBR relays), each run plans before any
# traffic, downloads 16 MiB through r1 and direct side by side (`relayctl
# bench --chain r1 --via both`), plans again, then downloads through the
# new plan. Writes OUT/learnt.jsonl and OUT/learnt.md: per run the plan
# before and after, what r1 learnt, each path's steady rate measured and
# predicted, and whether the plan after was the measured fastest. Needs
# root; run alone (the lab's self-check fails under other load). About 4
# minutes.
# Usage: sudo bench/run-learnt-bench.sh [RUNS] [OUT_DIR]     (default 3, bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-3}
out=${2:-bench/results}
lab_bench_start run-learnt-bench.sh
jsonl=$out/learnt.jsonl
: > "$jsonl"
# learnt_script DIR: one run's plans and benches, each one's JSON in DIR.
learnt_script() {
  cat <<SCRIPT
sleep 8
relayctl plan --dst server:8000 -o json > $1/before.json &&
relayctl bench --dst server:8000 --chain r1 --via both --transfers down --size 16777216 --history '' -o json > $1/r1.json &&
relayctl plan --dst server:8000 -o json > $1/after.json &&
relayctl bench --dst server:8000 --via plan --transfers down --size 16777216 --history '' -o json > $1/pick.json
SCRIPT
}
# learnt_collect DIR VALID: the run's line of learnt.jsonl.
learnt_collect() {
  python3 - "$1" "$topo" "$run" "$2" >> "$jsonl" <<'EOF'
import json, sys
d, topo, run, valid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == 'true'
load = lambda n: json.load(open('%s/%s.json' % (d, n)))
before, r1, after, pick = load('before'), load('r1'), load('after'), load('pick')
learnt = max([s.get('learnt_bps', 0) for p in [after] + after['alternatives'] if p['chain'] == ['r1'] for s in p['segments']] or [0])
print(json.dumps({'topology': topo, 'run': run, 'valid': valid,
  'plan_before': before['chain'], 'predicted_before_bps': before['predicted_down_bps'],
  'plan_after': after['chain'], 'predicted_after_bps': after['predicted_down_bps'], 'learnt_r1_bps': learnt,
  'r1': {'predicted_bps': r1['predicted']['down_bps'], 'steady_bps': r1['chain']['down_steady_bps']},
  'direct': {'predicted_bps': r1['predicted']['direct_down_bps'], 'steady_bps': r1['direct']['down_steady_bps']},
  'pick': {'relays': pick['chain']['relays'], 'predicted_bps': pick['predicted']['down_bps'], 'steady_bps': pick['chain']['down_steady_bps']}}))
EOF
}
for topo in plan-learnt plan-learnt-bbr; do
  for run in $(seq 1 "$runs"); do
    lab_try run-learnt-bench.sh "$topo" learnt_script learnt_collect
  done
done
python3 - "$jsonl" "$out/learnt.md" "$runs" <<'EOF'
import json, sys, subprocess
rows = [json.loads(l) for l in open(sys.argv[1])]
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
name = lambda c: ' → '.join(c) if c else 'direct'
mb = lambda b: b / 1e6
with open(sys.argv[2], 'w') as f:
    f.write('# Capacity learnt from traffic: the plan before and after\n\n')
    f.write('Made by `sudo bench/run-learnt-bench.sh %s` at commit %s; raw: [`learnt.jsonl`](learnt.jsonl).\n' % (sys.argv[3], commit))
    f.write("Each run: a fresh lab; the plan before any traffic, 16 MiB through r1 and direct, the plan after (what r1 learnt of its sends to the client), 16 MiB through the plan after. Rates in Mbit/s; measured is the steady rate (the second half of the download's time).\n\n")
    f.write('| topology | run | plan before (predicted) | r1 measured / predicted before | r1 learnt | plan after (predicted) | plan after, measured / predicted | direct measured | plan after faster than r1 and direct | self-check |\n|---|---:|---|---|---:|---|---|---:|---|---|\n')
    for r in rows:
        pk = r['pick']
        faster = pk['steady_bps'] > r['r1']['steady_bps'] and pk['steady_bps'] > r['direct']['steady_bps']
        f.write('| %s | %d | %s (%.1f) | %.1f / %.1f | %.1f | %s (%.1f) | %.1f / %.1f (%.2f) | %.1f | %s | %s |\n' % (
            r['topology'], r['run'], name(r['plan_before']), mb(r['predicted_before_bps']),
            mb(r['r1']['steady_bps']), mb(r['r1']['predicted_bps']), mb(r['learnt_r1_bps']),
            name(r['plan_after']), mb(r['predicted_after_bps']),
            mb(pk['steady_bps']), mb(pk['predicted_bps']), pk['steady_bps'] / pk['predicted_bps'] if pk['predicted_bps'] else float('nan'),
            mb(r['direct']['steady_bps']), 'yes' if faster else 'no',
            'held' if r['valid'] else 'failed: indicative only'))
print(open(sys.argv[2]).read())
EOF
