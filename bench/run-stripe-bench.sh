#!/usr/bin/env bash
# Striped segments against one connection per segment, side by side, in
# the stripe lab (configs/lab/stripe.yaml: client - r1 - r2 - server, r1 - r2
# a 200 ms, 400 Mbit/s crossing, the relays on stock buffers, CUBIC). In
# each lab the client first asks relayctl plan for the chain (what it
# predicts and how many links it stripes r1 -> r2 over), then downloads
# SIZE bytes through r1's SOCKS5 listener (a SOCKS5 client of a few lines
# below, which notes when each byte count arrived); r1's chain is
# relaymesh://r2:7000?stripes=N, N from STRIPES (1 is one connection, as
# without striping). The steady rate is the second half of the bytes over
# the time they took: slow start over 200 ms is in the first half. Each run
# of each N is a fresh lab; the Ns alternate within a run so that drift on
# this shared machine hits them alike. Writes bench/results/stripe.md and
# stripe.jsonl.
# STRIPE_TOPO names another lab of the same shape (configs/lab/NAME.yaml:
# r1 declares its capacity, r1 -> r2 the crossing), and the results are
# then bench/results/NAME.md and NAME.jsonl: stripe-lossy is the crossing
# under random loss.
# SIZE may be a duration instead (60s): each download then runs that long
# and its steady rate is its second half's, in time; a lossy crossing
# needs it, as a fixed size that one connection moves in a minute is, over
# eight, mostly their slow start.
# STRIPE_BASE=COMMIT runs every lab a second time with relayd built from
# COMMIT (the relays only; relayctl and the client are this tree's),
# interleaved with this tree's, and writes NAME-base.md and .jsonl: did a
# change to relayd move the striped rates, measured side by side.
# Usage: sudo [STRIPE_TOPO=stripe-lossy] [STRIPE_BASE=COMMIT] bench/run-stripe-bench.sh [RUNS] [SIZE_BYTES|SECONDSs] [STRIPES...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-3}
size=${2:-600000000}
size_arg=$size
seconds=0
case $size in *s) seconds=${size%s} size=0 ;; esac
shift $(( $# > 2 ? 2 : $# ))
stripes=("$@")
[ ${#stripes[@]} -gt 0 ] || stripes=(1 3 4)
out=bench/results
name=${STRIPE_TOPO:-stripe}
topo=configs/lab/$name.yaml
[ -f "$topo" ] || { echo "run-stripe-bench.sh: no lab $topo" >&2; exit 1; }
lab_bench_start run-stripe-bench.sh
topo_dir=$(mktemp -d)
trap 'rm -rf "$topo_dir"' EXIT
base=${STRIPE_BASE:-}
builds=(head)
result=$name
if [ -n "$base" ]; then
  base=$(git rev-parse --short "$base^{commit}")
  git worktree add -q --detach "$topo_dir/base" "$base"
  trap 'git worktree remove --force "$topo_dir/base" 2>/dev/null; rm -rf "$topo_dir"; git worktree prune' EXIT
  (cd "$topo_dir/base" && go build -o "$topo_dir/relayd-base" ./cmd/relayd)
  builds=(head "$base")
  result=$name-base
fi
jsonl=$out/$result.jsonl
: > "$jsonl"
# The lab writes r1's chain from its next:; a relayd overlay replaces it
# with the striped hop.
for n in "${stripes[@]}"; do
  sed "/^  r1: /s|relayd: {capacity_mbit: \([0-9]*\)}|relayd: {capacity_mbit: \1, next: [\"relaymesh://r2:7000?stripes=$n\"]}|" \
    "$topo" > "$topo_dir/stripe-x$n.yaml"
  grep -q "stripes=$n" "$topo_dir/stripe-x$n.yaml" || { echo "run-stripe-bench.sh: could not set r1's chain" >&2; exit 1; }
done
# download.py SIZE SECONDS: GET /bytes/SIZE from server:8000 through r1's
# SOCKS5 listener, or with SECONDS > 0 a body too large to end and stop
# reading SECONDS after its first byte; prints JSON: bytes received,
# seconds to the first byte of the body, to its half (of the bytes, or of
# the time) and to its end.
cat > "$topo_dir/download.py" <<'PY'
import json, socket, sys, time
size, seconds = int(sys.argv[1]), float(sys.argv[2])
if seconds > 0:
    size = 16 << 30  # the lab server's most (pkg/traffic MaxBytes)
t0 = time.monotonic()
s = socket.create_connection(('r1', 1080))
s.sendall(b'\x05\x01\x00')
assert s.recv(2) == b'\x05\x00'
host = b'server'
s.sendall(b'\x05\x01\x00\x03' + bytes([len(host)]) + host + (8000).to_bytes(2, 'big'))
reply = s.recv(10)
assert reply[:2] == b'\x05\x00', reply
s.sendall(b'GET /bytes/%d HTTP/1.1\r\nHost: server\r\nConnection: close\r\n\r\n' % size)
buf = bytearray(1 << 20)
head = b''
while b'\r\n\r\n' not in head:
    n = s.recv_into(buf)
    if n == 0:
        sys.exit('closed in the headers')
    head += bytes(buf[:n])
body = len(head) - head.index(b'\r\n\r\n') - 4
t_first, t_half = time.monotonic(), None
while True:
    n = s.recv_into(buf)
    if n == 0:
        break
    body += n
    now = time.monotonic()
    if t_half is None and (body >= size // 2 if seconds == 0 else now - t_first >= seconds / 2):
        t_half, half = now, body
    if seconds > 0 and now - t_first >= seconds:
        break
t_end = time.monotonic()
print(json.dumps({'bytes': body, 'first_s': t_first - t0, 'half_s': t_half - t0, 'half_bytes': half, 'end_s': t_end - t0}))
PY
stripe_script() {
  cat <<SCRIPT
sleep 8
relayctl plan --dst server:8000 -o json > $1/plan.json &&
python3 $topo_dir/download.py $size $seconds > $1/download.json &&
sleep 5 &&
relayctl plan --dst server:8000 -o json > $1/plan-after.json
SCRIPT
}
stripe_collect() {
  python3 - "$1" "$n" "$run" "$2" "$size" "$seconds" "$build" >> "$jsonl" <<'PY'
import json, sys
d, n, run, valid, size, seconds, build = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == 'true', int(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
dl = json.load(open(d + '/download.json'))
if seconds == 0 and dl['bytes'] != size:
    sys.exit('run-stripe-bench.sh: short download: %d of %d bytes' % (dl['bytes'], size))
plan = json.load(open(d + '/plan.json'))
seg = next((s for s in plan.get('segments', []) if s['from'] == 'r1' and s['to'] == 'r2'), {})
after = json.load(open(d + '/plan-after.json'))
aseg = next((s for s in after.get('segments', []) if s['from'] == 'r1' and s['to'] == 'r2'), {})
print(json.dumps({'stripes': n, 'build': build, 'run': run, 'valid': valid, 'size_bytes': size, 'seconds': seconds, 'download': dl,
                  'mbit_s': (dl['bytes'] - dl['half_bytes']) * 8 / 1e6 / (dl['end_s'] - dl['half_s']),
                  'average_mbit_s': dl['bytes'] * 8 / 1e6 / (dl['end_s'] - dl['first_s']),
                  'plan_chain': plan.get('chain'), 'plan_stripes': seg.get('stripes', 1),
                  'plan_predicted_bps': plan.get('predicted_bps'), 'plan_one_link_bps': seg.get('one_link_bps') or seg.get('rate_bps'),
                  'after_chain': after.get('chain'), 'after_stripes': aseg.get('stripes', 1), 'after_predicted_bps': after.get('predicted_bps'),
                  'after_one_link_bps': aseg.get('one_link_bps') or aseg.get('rate_bps'), 'after_loss': aseg.get('loss'), 'after_bound': after.get('bound')}))
PY
}
for run in $(seq 1 "$runs"); do
  for n in "${stripes[@]}"; do
    for build in "${builds[@]}"; do
      relayd=
      [ "$build" = head ] || relayd=$topo_dir/relayd-base
      LAB_RELAYD=$relayd lab_try run-stripe-bench.sh "$topo_dir/stripe-x$n.yaml" stripe_script stripe_collect
    done
  done
done
python3 - "$jsonl" "$out/$result.md" "$runs $size_arg ${stripes[*]}" "$topo" "$base" <<'PY'
import json, re, sys, subprocess, statistics, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
topo = open(sys.argv[4]).read()
base_commit = sys.argv[5]
capacity = float(re.search(r'^  r1: .*capacity_mbit: (\d+)', topo, re.M).group(1))
crossing = re.search(r'between: \[r1, r2\], (.*)\}', topo).group(1)
envs = ('STRIPE_TOPO=%s ' % sys.argv[4].split('/')[-1][:-5] if not sys.argv[4].endswith('/stripe.yaml') else '') + \
    ('STRIPE_BASE=%s ' % base_commit if base_commit else '')
run = 'sudo %sbench/run-stripe-bench.sh %s' % (envs, sys.argv[3])
jsonl = sys.argv[1].split('/')[-1]
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
# A tree with changes outside the results is not the commit: say so.
if subprocess.run(['git', 'diff', '--quiet', 'HEAD', '--', '.', ':!bench/results']).returncode != 0:
    commit += ' with uncommitted changes'
date = datetime.date.today().isoformat()
by = {}  # (relayd build, links) -> that lab's rows
for r in rows:
    by.setdefault((r.get('build', 'head'), r['stripes']), []).append(r)
builds = sorted({b for b, _ in by}, key=lambda b: b != 'head')
two = len(builds) > 1
def label(b):
    return 'this tree' if b == 'head' else 'base (%s)' % b
def median_of(b, n):
    at = by.get((b, n))
    return statistics.median(x['mbit_s'] for x in at) if at else None
def plan_table(f, when, p):
    """One row a lab: what relayctl plan said (p: 'plan' before the download, 'after' after it)."""
    after = p == 'after'
    cols = ['lab (links on r1 → r2)'] + (['relayd'] if two else []) + ['run', 'chain', 'links it stripes r1 → r2 over'] + \
        (['loss it learnt'] if after else []) + ['predicted Mbit/s', 'one link, predicted Mbit/s'] + (['a bound'] if after else []) + \
        ['measured at its N / predicted']
    f.write('\nWhat `relayctl plan --dst server:8000` said %s:\n\n' % when)
    f.write('| %s |\n|%s|\n' % (' | '.join(cols), '|'.join('---' if c in ('chain', 'a bound', 'relayd') else '---:' for c in cols)))
    for r in rows:
        b = r.get('build', 'head')
        meas = median_of(b, r[p + '_stripes'])
        pred = (r[p + '_predicted_bps'] or 0) / 1e6
        cells = ['%d' % r['stripes']] + ([label(b)] if two else []) + ['%d' % r['run'], ' → '.join(r[p + '_chain'] or []) or 'direct', '%s' % r[p + '_stripes']]
        cells += ['%.3f %%' % (100 * (r['after_loss'] or 0))] if after else []
        cells += ['%.1f' % pred, '%.1f' % ((r[p + '_one_link_bps'] or 0) / 1e6)]
        cells += ['yes' if r['after_bound'] else 'no'] if after else []
        cells += ['%.2f' % (meas / pred) if meas and pred else '– (not measured)']
        f.write('| %s |\n' % ' | '.join(cells))
with open(sys.argv[2], 'w') as f:
    f.write('# Striped segments: one download over the crossing r1 → r2 (%s)\n\n' % crossing)
    f.write('Made by `%s` on %s at commit %s; raw: [`%s`](%s).\n' % (run, date, commit, jsonl, jsonl))
    f.write('The lab is `%s` (its header says what the relays\' buffers and congestion control are). '
            'A SOCKS5 client in the client namespace downloads %s through r1, whose chain is `relaymesh://r2:7000?stripes=N`; '
            'the steady rate is %s (slow start over the crossing is in the first half); '
            'the whole download\'s rate is from its first byte to its last. Each run is a fresh lab.\n\n' % (
                sys.argv[4], ('for %g s' % rows[0]['seconds']) if rows and rows[0].get('seconds') else '%d MB' % (rows[0]['size_bytes'] // 1000000 if rows else 0),
                'the bytes of the second half of that time over it' if rows and rows[0].get('seconds') else 'the second half of the bytes over the time they took'))
    if two:
        f.write('Each lab ran twice in turn, its relays on relayd of this tree and then on relayd built from %s; relayctl and the '
                'client are this tree\'s in both. × one link is over the same build\'s one link; the last column is this tree '
                'over the base.\n\n' % base_commit)
    f.write('| links on r1 → r2 |%s runs | steady Mbit/s, each run | median | × one link | of %g Mbit/s | whole download, median Mbit/s | self-check |%s\n|---:|%s---:|---|---:|---:|---:|---:|---|%s\n' % (
        ' relayd |' if two else '', capacity, ' this tree / base |' if two else '', '---|' if two else '', '---:|' if two else ''))
    for b, n in sorted(by, key=lambda k: (k[1], builds.index(k[0]))):
        rs = by[(b, n)]
        med, one = median_of(b, n), median_of(b, 1)
        other = median_of(builds[-1], n) if two and b == 'head' else None
        f.write('| %d |%s %d | %s | %.1f | %s | %.0f %% | %.1f | %s |%s\n' % (
            n, ' %s |' % label(b) if two else '', len(rs), ', '.join('%.1f' % r['mbit_s'] for r in rs), med,
            '%.2f×' % (med / one) if one else '–', 100 * med / capacity, statistics.median(r['average_mbit_s'] for r in rs),
            'held' if all(r['valid'] for r in rs) else 'failed in %d: indicative only' % sum(not r['valid'] for r in rs),
            (' %.3f |' % (med / other) if other else ' |') if two else ''))
    plan_table(f, 'in each lab before the downloads (the plan does not depend on r1\'s configured chain)', 'plan')
    plan_table(f, '5 s after the download, once the relays had learnt from its traffic (the loss of r1 → r2 among it)', 'after')
print(open(sys.argv[2]).read())
PY
