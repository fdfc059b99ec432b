#!/usr/bin/env bash
# Plans on what is known: on labs whose links are rate-limited (and some
# lossy) and where nothing is declared (plan-rates, plan-unknown,
# plan-lossy-all), each run plans, benches the plan (8 s downloads, the
# chain and direct side by side), plans again and benches again, with
# bench's history on (as a user has it) or off (only what the relays
# learnt from the traffic). Writes OUT/known-sweep.jsonl and
# OUT/known-sweep.md: per plan its pick, its prediction and whether it was
# a bound, what the pick and direct measured, and the two targets: the
# first plan within 25 % of its measurement or a bound it respects, the
# plans after a bench within 15 % (25 % on lossy labs) and never slower
# than direct by more than 5 %. Needs root; run alone (the lab's
# self-check fails under other load). About 10 minutes.
# Usage: sudo bench/run-known-sweep.sh [RUNS] [OUT_DIR]     (default 1, bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-1}
out=${2:-bench/results}
lab_bench_start run-known-sweep.sh
jsonl=$out/known-sweep.jsonl
: > "$jsonl"
# sweep_script DIR: plan → bench, twice; history in DIR (on) or none.
sweep_script() {
  local hist="''"
  [ "$history" = on ] && hist="$1/history.jsonl"
  cat <<SCRIPT
sleep 8
for i in 1 2; do
  relayctl plan --dst server:8000 --bench-history $hist -o json > $1/plan\$i.json &&
  relayctl bench --dst server:8000 --transfers down --duration 8s --history $hist --bench-history $hist -o json > $1/bench\$i.json || exit 1
  sleep 5  # the relays publish what the bench taught them at their next measurement (2 s)
done
SCRIPT
}
# sweep_collect DIR VALID: the run's line of known-sweep.jsonl.
sweep_collect() {
  python3 - "$1" "$topo" "$history" "$run" "$2" >> "$jsonl" <<'PY'
import json, sys
d, topo, history, run, valid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == 'true'
load = lambda n: json.load(open('%s/%s.json' % (d, n)))
plans = []
for i in (1, 2):
    p, b = load('plan%d' % i), load('bench%d' % i)
    plans.append({'chain': p['chain'], 'predicted_bps': p['predicted_down_bps'], 'bound': bool(p.get('bound')),
                  'bench_chain': b['chain']['relays'], 'bench_predicted_bps': b['predicted']['down_bps'],
                  'bench_bound': bool(b['predicted'].get('bound')),
                  'steady_bps': b['chain']['down_steady_bps'], 'direct_steady_bps': b['direct']['down_steady_bps']})
print(json.dumps({'topology': topo, 'history': history, 'run': run, 'valid': valid, 'plans': plans}))
PY
}
for topo in plan-rates plan-unknown plan-lossy-all; do
  for history in on off; do
    for run in $(seq 1 "$runs"); do
      lab_try run-known-sweep.sh "$topo" sweep_script sweep_collect
    done
  done
done
python3 - "$jsonl" "$out/known-sweep.md" "$runs" <<'PY'
import json, sys, subprocess, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
name = lambda c: ' → '.join(c) if c else 'direct'
lossy = {'plan-unknown', 'plan-lossy-all'}
with open(sys.argv[2], 'w') as f:
    f.write('# Plans on what is known: rate-limited labs, nothing declared\n\n')
    f.write('Made by `sudo bench/run-known-sweep.sh %s` at commit %s on %s; raw: [`known-sweep.jsonl`](known-sweep.jsonl).\n' % (
        sys.argv[3], commit, datetime.date.today().isoformat()))
    f.write('Each run: a fresh lab; plan, bench (8 s downloads of the plan\'s pick and direct, the steady rate over the second half, Mbit/s), plan again, bench again. History on: bench\'s results feed the next plan, as by default; off: only what the relays learnt from the traffic. The prediction is bench\'s own plan\'s (it plans again, with its window probe); `≤` marks a bound. Targets: the first plan within 25 % of its measurement or a bound it respects; the second within 15 % (25 % on a lossy lab) and not below 0.95 × direct.\n\n')
    f.write('| topology | history | plan | pick | predicted | measured | measured / predicted | direct | pick / direct | target | self-check |\n|---|---|---:|---|---:|---:|---:|---:|---:|---|---|\n')
    for r in rows:
        for i, p in enumerate(r['plans'], 1):
            ratio = p['steady_bps'] / p['bench_predicted_bps'] if p['bench_predicted_bps'] else float('nan')
            vs = p['steady_bps'] / p['direct_steady_bps'] if p['direct_steady_bps'] else float('nan')
            if i == 1:
                ok = (p['bench_bound'] and ratio <= 1.0) or abs(ratio - 1) <= 0.25
            else:
                tol = 0.25 if r['topology'] in lossy else 0.15
                ok = abs(ratio - 1) <= tol and vs >= 0.95
            f.write('| %s | %s | %d | %s | %s%.1f | %.1f | %.2f | %.1f | %.2f | %s | %s |\n' % (
                r['topology'], r['history'], i, name(p['bench_chain']), '≤ ' if p['bench_bound'] else '',
                p['bench_predicted_bps'] / 1e6, p['steady_bps'] / 1e6, ratio, p['direct_steady_bps'] / 1e6, vs,
                'met' if ok else 'missed', 'held' if r['valid'] else 'failed: indicative only'))
print(open(sys.argv[2]).read())
PY
