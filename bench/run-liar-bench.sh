#!/usr/bin/env bash
# One compromised relay lying about its RTTs: how much planned traffic does
# it attract, now that planners check claims (the triangle) and believe a
# relay only about its own pairs? In one lab of configs/lab/liar.yaml
# (eight relays, a client in Frankfurt, five relay regions as destinations),
# bench/liar stands in front of the admin API of each relay that may lie
# (mumbai, saopaulo) and multiplies the RTTs it answers (its pairs, its
# probes) by a lie factor. Each round plans (`relayctl plan`, the default
# full survey) from the client to every destination: an honest round
# (every factor 1), one round per liar and factor (that liar alone lying),
# and an honest round again. For every plan through the liar, its chain's
# prediction on the honest round's matrix (the chain alone: what the
# planner would have predicted for it without the lie) gives the lie's
# predicted-rate error and what the client loses against the honest plan.
# Writes OUT/liar.json and OUT/liar.md. Needs root; run alone (the lab's
# self-check fails under other load). About 6 minutes.
# Usage: sudo bench/run-liar-bench.sh [-factors 0.5,0.2,0.05] [-liars mumbai,saopaulo] [-out bench/results]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
factors=0.5,0.2,0.05
liars=mumbai,saopaulo
out=bench/results
while [ $# -gt 0 ]; do
  case $1 in
    -factors) factors=$2; shift 2 ;;
    -liars) liars=$2; shift 2 ;;
    -out) out=$2; shift 2 ;;
    *) echo "usage: sudo bench/run-liar-bench.sh [-factors 0.5,0.2,0.05] [-liars mumbai,saopaulo] [-out DIR]" >&2; exit 2 ;;
  esac
done
cmd="sudo bench/run-liar-bench.sh -factors $factors -liars $liars"
lab_bench_start run-liar-bench.sh
go build -o bench/.bin/liar ./bench/liar
clients="client"
dsts="tokyo singapore london virginia oregon"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

# liar_script DIR: start bench/liar on every relay that may lie (each at
# factor 1), let the relays measure each other, then plan every round;
# each plan's JSON (and the honest rounds' matrices) in DIR.
liar_script() {
  local d=$1 l f
  echo "set -u"
  for l in ${liars//,/ }; do
    echo "echo 1 > $d/factor-$l"
    echo "relayctl lab exec $l -- $PWD/bench/.bin/liar --listen $l:9090 --name $l --factor-file $d/factor-$l --pid-file $d/liar-$l.pid --lifetime 20m > $d/liar-$l.log 2>&1 &"
  done
  # Relays probe each other and pull every 2 s: give every pair a few
  # probes from both ends, through the liars' admin APIs too.
  echo "sleep 12"
  cat <<'SCRIPT'
round() { # NAME LIAR FACTOR: every plan with LIAR's answers at FACTOR
  for l in $LIARS; do echo 1 > $D/factor-$l; done
  [ "$2" = none ] || echo "$3" > "$D/factor-$2"
  # Other relays pass on a liar's pairs with them as their own word, the
  # newest winning: let the liar's relayd measure afresh (every 2 s) and
  # its peers pull that (every 2 s) before planning.
  sleep 10
  for c in $CLIENTS; do
    for dst in $DSTS; do
      relayctl lab exec "$c" -- relayctl plan --dst "$dst" --bench-history '' --plans-dir '' -o json \
        --save-matrix "$D/$1.$c.$dst.matrix.json" > "$D/$1.$c.$dst.json" 2> "$D/$1.$c.$dst.err" || true
    done
  done
}
SCRIPT
  echo "D=$d LIARS='${liars//,/ }' CLIENTS='$clients' DSTS='$dsts'"
  echo "round honest-1 none 1"
  for l in ${liars//,/ }; do
    for f in ${factors//,/ }; do
      echo "round lie-$l-$f $l $f"
    done
  done
  echo "round honest-2 none 1"
  for l in ${liars//,/ }; do
    echo "kill \$(cat $d/liar-$l.pid) 2>/dev/null || true"
  done
  echo "sleep 1"
}

# liar_collect DIR VALID: every plan, each plan through a liar evaluated on
# the honest matrix; OUT/liar.json.
liar_collect() {
  local d=$1 valid=$2
  python3 - "$d" "$valid" "$liars" "$factors" "$clients" "$dsts" "$out/liar.json" "$cmd" <<'EOF'
import json, os, subprocess, sys, datetime
d, valid, liars, factors = sys.argv[1], sys.argv[2] == 'true', sys.argv[3].split(','), sys.argv[4].split(',')
clients, dsts, outpath, cmd = sys.argv[5].split(), sys.argv[6].split(), sys.argv[7], sys.argv[8]
rounds = [('honest-1', None, 1.0)] + [('lie-%s-%s' % (l, f), l, float(f)) for l in liars for f in factors] + [('honest-2', None, 1.0)]

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

def chain_alone(matrix_path, c, dst, chain):
    # The honest matrix with only the chain's segments and the direct
    # path: the planner's prediction for that chain as if the lie had not
    # been told (with the same model and request defaults).
    m = load(matrix_path)
    if m is None:
        return None
    hops = ['client'] + chain + ['dst:' + dst]
    keep = {frozenset(p) for p in zip(hops, hops[1:])} | {frozenset(('client', 'dst:' + dst))}
    def ends(e):
        return frozenset((e[0], e[1])) if isinstance(e, list) else frozenset((e['a'], e['b']))
    m['rtt_ms'] = [e for e in m['rtt_ms'] if ends(e) in keep]
    if len({ends(e) for e in m['rtt_ms']}) != len(keep):
        return None  # a segment of the chain was not measured honestly
    path = matrix_path + '.%s.alone.json' % '-'.join(chain)
    json.dump(m, open(path, 'w'))
    r = subprocess.run(['bin/relayctl', 'plan', '--matrix', path, '--dst', 'dst:' + dst, '--min-gain', '0',
                        '--bench-history', '', '--plans-dir', '', '-o', 'json'], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    p = json.loads(r.stdout)
    for q in [p] + p.get('alternatives', []):
        if q['chain'] == chain:
            return q['predicted_down_bps']
    return None

plans = []
for name, liar, factor in rounds:
    for c in clients:
        for dst in dsts:
            p = load('%s/%s.%s.%s.json' % (d, name, c, dst))
            row = {'round': name, 'liar': liar, 'factor': factor, 'client': c, 'dst': dst}
            if p is None:
                err = open('%s/%s.%s.%s.err' % (d, name, c, dst)).read().strip()
                row['error'] = err.splitlines()[-1] if err else 'no plan'
                plans.append(row)
                continue
            row.update({'chain': p['chain'], 'predicted_down_bps': p['predicted_down_bps'],
                        'dropped_claims': [n for n in p.get('notes', []) if 'claim dropped' in n]})
            row['through'] = [l for l in liars if l in p['chain']]
            if liar and liar in p['chain']:
                row['chain_honest_predicted_bps'] = chain_alone('%s/honest-1.%s.%s.matrix.json' % (d, c, dst), c, dst, p['chain'])
            plans.append(row)
rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], capture_output=True, text=True).stdout.strip()
json.dump({'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'), 'commit': rev + (' (uncommitted changes)' if dirty else ''),
           'command': cmd, 'topology': 'configs/lab/liar.yaml', 'self_check_valid': valid,
           'liars': liars, 'factors': [float(f) for f in factors], 'clients': clients, 'destinations': dsts, 'plans': plans},
          open(outpath, 'w'), indent=1)
EOF
}

lab_try run-liar-bench.sh liar liar_script liar_collect

python3 - "$out/liar.json" "$out/liar.md" <<'EOF'
import json, sys, statistics
r = json.load(open(sys.argv[1]))
plans = r['plans']
name = lambda c: ' → '.join(c) if c else 'direct'
honest = {}
for p in plans:
    if p['liar'] is None and 'chain' in p:
        honest.setdefault((p['client'], p['dst']), []).append(p)
def honest_through(p, liar):
    return any(liar in h['chain'] for h in honest.get((p['client'], p['dst']), []))
out = []
w = out.append
w('# One lying relay: the plans it attracts\n')
w('Made by `%s` on %s at commit %s; topology [`configs/lab/liar.yaml`](../../configs/lab/liar.yaml); raw: [`liar.json`](liar.json). The lab\'s self-check %s.\n' % (
    r['command'], r['date'], r['commit'], 'held' if r['self_check_valid'] else 'failed in three attempts: the figures are indicative only'))
w('Eight relays; each round plans (`relayctl plan`, full survey, no bench history) from %s to %s (%d plans). A lying relay runs the real relayd; bench/liar answers its admin API and multiplies every RTT it reports (its pairs, served as just measured so they win over the other end\'s; its probe answers) by the factor. "Honest" rounds have every factor 1, one before and one after the lying rounds; a plan "would be won honestly" when an honest round\'s plan for the same client and destination goes through the liar.\n' % (
    ' and '.join(r['clients']), ', '.join(r['destinations']), len(r['clients']) * len(r['destinations'])))
w('## Share of plans through the liar\n')
w('| liar | factor | plans through the liar | of those, not won honestly | plans with a claim of the liar dropped | claims dropped (of the liar, all plans) | predicted / honest prediction of the same chain, plans through the liar (median, max) | honest prediction of that chain / of the honest plan (median, min) |')
w('|---|---:|---:|---:|---:|---:|---|---|')
for liar in r['liars']:
    rows = [('honest', [p for p in plans if p['liar'] is None])] + [(f, [p for p in plans if p['liar'] == liar and p['factor'] == f]) for f in r['factors']]
    for f, ps in rows:
        ok = [p for p in ps if 'chain' in p]
        thr = [p for p in ok if liar in p['chain']]
        stolen = [p for p in thr if not honest_through(p, liar)]
        mine = lambda p: [n for n in p['dropped_claims'] if n.startswith(liar + ' -> ')]
        dropped_plans = [p for p in ok if mine(p)]
        n_dropped = sum(len(mine(p)) for p in ok)
        err, loss = [], []
        for p in thr:
            hp = p.get('chain_honest_predicted_bps')
            if f != 'honest' and hp:
                err.append(p['predicted_down_bps'] / hp)
                best = [h['predicted_down_bps'] for h in honest.get((p['client'], p['dst']), [])]
                if best:
                    loss.append(hp / statistics.median(best))
        fmt = lambda xs, g: '%.2f, %.2f' % (statistics.median(xs), g(xs)) if xs else '–'
        failed = len(ps) - len(ok)
        w('| %s | %s | %d of %d%s | %s | %d | %d | %s | %s |' % (
            liar, f if f == 'honest' else '%g' % f, len(thr), len(ok), ' (%d failed)' % failed if failed else '',
            '–' if f == 'honest' else '%d' % len(stolen), len(dropped_plans), n_dropped, fmt(err, max), fmt(loss, min)))
w('\n## Every plan\n')
w('| round | client | destination | chain | predicted Mbit/s | claims dropped | through the liar, honest prediction of the chain Mbit/s |')
w('|---|---|---|---|---:|---:|---:|')
for p in plans:
    if 'chain' not in p:
        w('| %s | %s | %s | failed: %s | | | |' % (p['round'], p['client'], p['dst'], p['error'].replace('|', '/')))
        continue
    hp = p.get('chain_honest_predicted_bps')
    w('| %s | %s | %s | %s | %.1f | %d | %s |' % (p['round'], p['client'], p['dst'], name(p['chain']), p['predicted_down_bps'] / 1e6,
        len(p['dropped_claims']), '%.1f' % (hp / 1e6) if hp else ''))
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
print('\n'.join(out[:40]))
EOF
