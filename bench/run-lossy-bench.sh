#!/usr/bin/env bash
# Loss and congestion control: on plan-lossy-cubic and plan-lossy-bbr (two
# two-relay chains; r1 → r2's 40 ms middle link loses 1 % of its packets,
# r3 → r4's is clean and 30 Mbit/s; every sender CUBIC, or the relays BBR),
# each run plans before any traffic, sends 3 MB through r1 → r2 (from
# which the relays learn the link's loss), waits for the measurement pull,
# plans again, then measures both chains and direct side by side (8 s
# downloads, `relayctl bench --chain`). Writes OUT/lossy.jsonl and
# OUT/lossy.md: per run the plan before and after learning, each path's
# steady rate measured and predicted, and whether the plan was the
# measured fastest. Needs root; run alone (the lab's self-check fails
# under other load). About 8 minutes.
# Usage: sudo bench/run-lossy-bench.sh [RUNS] [OUT_DIR]     (default 3, bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-3}
out=${2:-bench/results}
lab_bench_start run-lossy-bench.sh
jsonl=$out/lossy.jsonl
: > "$jsonl"
# lossy_script DIR: one run's plans and benches, each one's JSON in DIR.
lossy_script() {
  cat <<SCRIPT
sleep 8
relayctl plan --dst server:8000 -o json > $1/before.json &&
relayctl bench --dst server:8000 --chain r1,r2 --via plan --transfers down --size 3000000 --history '' -o json > $1/warm.json &&
sleep 5 &&
relayctl plan --dst server:8000 -o json > $1/after.json &&
relayctl bench --dst server:8000 --chain r1,r2 --via both --transfers down --duration 8s --history '' -o json > $1/a.json &&
relayctl bench --dst server:8000 --chain r3,r4 --via plan --transfers down --duration 8s --history '' -o json > $1/b.json
SCRIPT
}
# lossy_collect DIR VALID: the run's line of lossy.jsonl.
lossy_collect() {
  python3 - "$1" "$topo" "$run" "$2" >> "$jsonl" <<'EOF'
import json, sys
d, topo, run, valid = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == 'true'
load = lambda n: json.load(open('%s/%s.json' % (d, n)))
before, after, a, b = load('before'), load('after'), load('a'), load('b')
loss = max([s.get('loss', 0) for p in [after] + after['alternatives'] for s in p['segments'] if {s['from'], s['to']} == {'r1', 'r2'}] or [0])
print(json.dumps({'topology': topo, 'run': run, 'valid': valid,
  'plan_before': before['chain'], 'plan_after': after['chain'], 'learnt_loss_r1_r2': loss,
  'paths': {
    'r1,r2': {'predicted_bps': a['predicted']['down_bps'], 'steady_bps': a['chain']['down_steady_bps']},
    'r3,r4': {'predicted_bps': b['predicted']['down_bps'], 'steady_bps': b['chain']['down_steady_bps']},
    'direct': {'predicted_bps': a['predicted']['direct_down_bps'], 'steady_bps': a['direct']['down_steady_bps']}}}))
EOF
}
for topo in plan-lossy-cubic plan-lossy-bbr; do
  for run in $(seq 1 "$runs"); do
    lab_try run-lossy-bench.sh "$topo" lossy_script lossy_collect
  done
done
python3 - "$jsonl" "$out/lossy.md" "$runs" <<'EOF'
import json, sys, subprocess
rows = [json.loads(l) for l in open(sys.argv[1])]
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
name = lambda c: ' → '.join(c) if c else 'direct'
with open(sys.argv[2], 'w') as f:
    f.write('# Loss and congestion control: the plan against measurement\n\n')
    f.write('Made by `sudo bench/run-lossy-bench.sh %s` at commit %s; raw: [`lossy.jsonl`](lossy.jsonl).\n' % (sys.argv[3], commit))
    f.write('Each run: a fresh lab; the plan before any traffic, then after 3 MB through r1 → r2 taught the relays its loss (learnt: the loss the plan then used on r1–r2; configured 1 %); then each path\'s steady download rate (Mbit/s, the second half of 8 s), measured / predicted.\n\n')
    f.write('| topology | run | plan before | learnt loss | plan after | r1 → r2 | r3 → r4 | direct | plan after = measured fastest | plan after, measured / predicted | self-check |\n|---|---:|---|---:|---|---|---|---|---|---:|---|\n')
    for r in rows:
        p = r['paths']
        cell = lambda k: '%.1f / %.1f' % (p[k]['steady_bps'] / 1e6, p[k]['predicted_bps'] / 1e6)
        fastest = max(p, key=lambda k: p[k]['steady_bps'])
        pick = ','.join(r['plan_after']) or 'direct'
        ratio = p[pick]['steady_bps'] / p[pick]['predicted_bps'] if pick in p and p[pick]['predicted_bps'] else float('nan')
        f.write('| %s | %d | %s | %.2f %% | %s | %s | %s | %s | %s | %.2f | %s |\n' % (
            r['topology'], r['run'], name(r['plan_before']), 100 * r['learnt_loss_r1_r2'], name(r['plan_after']),
            cell('r1,r2'), cell('r3,r4'), cell('direct'), 'yes' if fastest == pick else 'no (%s)' % fastest, ratio,
            'held' if r['valid'] else 'failed: indicative only'))
print(open(sys.argv[2]).read())
EOF
