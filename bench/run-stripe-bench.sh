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
# Usage: sudo bench/run-stripe-bench.sh [RUNS] [SIZE_BYTES] [STRIPES...]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-3}
size=${2:-600000000}
shift $(( $# > 2 ? 2 : $# ))
stripes=("$@")
[ ${#stripes[@]} -gt 0 ] || stripes=(1 3 4)
out=bench/results
lab_bench_start run-stripe-bench.sh
jsonl=$out/stripe.jsonl
: > "$jsonl"
topo_dir=$(mktemp -d)
trap 'rm -rf "$topo_dir"' EXIT
# The lab writes r1's chain from its next:; a relayd overlay replaces it
# with the striped hop.
for n in "${stripes[@]}"; do
  sed "/^  r1: /s|relayd: {capacity_mbit: 400}|relayd: {capacity_mbit: 400, next: [\"relaymesh://r2:7000?stripes=$n\"]}|" \
    configs/lab/stripe.yaml > "$topo_dir/stripe-x$n.yaml"
  grep -q "stripes=$n" "$topo_dir/stripe-x$n.yaml" || { echo "run-stripe-bench.sh: could not set r1's chain" >&2; exit 1; }
done
# download.py SIZE: GET /bytes/SIZE from server:8000 through r1's SOCKS5
# listener; prints JSON: bytes received, seconds to the first byte of the
# body, to its half and to its end.
cat > "$topo_dir/download.py" <<'PY'
import json, socket, sys, time
size = int(sys.argv[1])
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
    if t_half is None and body >= size // 2:
        t_half, half = time.monotonic(), body
t_end = time.monotonic()
print(json.dumps({'bytes': body, 'first_s': t_first - t0, 'half_s': t_half - t0, 'half_bytes': half, 'end_s': t_end - t0}))
PY
stripe_script() {
  cat <<SCRIPT
sleep 8
relayctl plan --dst server:8000 -o json > $1/plan.json &&
python3 $topo_dir/download.py $size > $1/download.json
SCRIPT
}
stripe_collect() {
  python3 - "$1" "$n" "$run" "$2" "$size" >> "$jsonl" <<'PY'
import json, sys
d, n, run, valid, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == 'true', int(sys.argv[5])
dl = json.load(open(d + '/download.json'))
if dl['bytes'] != size:
    sys.exit('run-stripe-bench.sh: short download: %d of %d bytes' % (dl['bytes'], size))
plan = json.load(open(d + '/plan.json'))
seg = next((s for s in plan.get('segments', []) if s['from'] == 'r1' and s['to'] == 'r2'), {})
print(json.dumps({'stripes': n, 'run': run, 'valid': valid, 'size_bytes': size, 'download': dl,
                  'mbit_s': (size - dl['half_bytes']) * 8 / 1e6 / (dl['end_s'] - dl['half_s']),
                  'average_mbit_s': size * 8 / 1e6 / (dl['end_s'] - dl['first_s']),
                  'plan_chain': plan.get('chain'), 'plan_stripes': seg.get('stripes', 1),
                  'plan_predicted_bps': plan.get('predicted_bps'), 'plan_one_link_bps': seg.get('one_link_bps') or seg.get('rate_bps')}))
PY
}
for run in $(seq 1 "$runs"); do
  for n in "${stripes[@]}"; do
    lab_try run-stripe-bench.sh "$topo_dir/stripe-x$n.yaml" stripe_script stripe_collect
  done
done
python3 - "$jsonl" "$out/stripe.md" "$runs $size ${stripes[*]}" <<'PY'
import json, sys, subprocess, statistics, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()
date = datetime.date.today().isoformat()
by = {}
for r in rows:
    by.setdefault(r['stripes'], []).append(r)
base = statistics.median(r['mbit_s'] for r in by.get(1, [])) if 1 in by else None
with open(sys.argv[2], 'w') as f:
    f.write('# Striped segments: one download over a 200 ms, 400 Mbit/s crossing\n\n')
    f.write('Made by `sudo bench/run-stripe-bench.sh %s` on %s at commit %s; raw: [`stripe.jsonl`](stripe.jsonl).\n' % (sys.argv[3], date, commit))
    f.write('The lab is `configs/lab/stripe.yaml` (relays on stock buffers: 4 MiB `tcp_wmem`, 6 MiB `tcp_rmem`; CUBIC). '
            'a SOCKS5 client in the client namespace downloads %d MB through r1, whose chain is `relaymesh://r2:7000?stripes=N`; '
            'the steady rate is the second half of the bytes over the time they took (slow start over 200 ms is in the first half); '
            'the whole download\'s rate is from its first byte to its last. Each run is a fresh lab.\n\n' % (rows[0]['size_bytes'] // 1000000 if rows else 0))
    f.write('| links on r1 → r2 | runs | steady Mbit/s, each run | median | × one link | of 400 Mbit/s | whole download, median Mbit/s | self-check |\n|---:|---:|---|---:|---:|---:|---:|---|\n')
    for n in sorted(by):
        rs = by[n]
        med = statistics.median(r['mbit_s'] for r in rs)
        f.write('| %d | %d | %s | %.1f | %s | %.0f %% | %.1f | %s |\n' % (
            n, len(rs), ', '.join('%.1f' % r['mbit_s'] for r in rs), med,
            '%.2f×' % (med / base) if base else '–', 100 * med / 400, statistics.median(r['average_mbit_s'] for r in rs),
            'held' if all(r['valid'] for r in rs) else 'failed in %d: indicative only' % sum(not r['valid'] for r in rs)))
    f.write('\nWhat `relayctl plan --dst server:8000` said in each lab before the downloads (the plan does not depend on r1\'s configured chain):\n\n')
    f.write('| lab (links on r1 → r2) | run | chain | links it stripes r1 → r2 over | predicted Mbit/s | one link, predicted Mbit/s | measured at its N / predicted |\n|---:|---:|---|---:|---:|---:|---:|\n')
    for r in rows:
        at = by.get(r['plan_stripes'])
        meas = statistics.median(x['mbit_s'] for x in at) if at else None
        pred = (r['plan_predicted_bps'] or 0) / 1e6
        f.write('| %d | %d | %s | %s | %.1f | %.1f | %s |\n' % (
            r['stripes'], r['run'], ' → '.join(r['plan_chain'] or []) or 'direct', r['plan_stripes'], pred,
            (r['plan_one_link_bps'] or 0) / 1e6, '%.2f' % (meas / pred) if meas and pred else '– (not measured)'))
print(open(sys.argv[2]).read())
PY
