#!/usr/bin/env bash
# Completion time against the model's, per object size: relayctl bench
# --size N (10 KB, 100 KB, 1 MB, 64 MB), direct and through the plan, in
# every shipped lab topology (configs/lab/*.yaml; the traffic service on
# the server, plain HTTP; in world, tokyo's admin API over TLS). Each bench
# plans afresh, then times one download per path; its "modelled" entries
# hold the model's completion time for the bytes moved
# (planner.PredictTransfer, as `relayctl bench` prints it). Where the plan
# is direct (split1, plan-detour) both paths are direct. In world, direct
# (230 ms, 5 Mbit/s) is not timed at 64 MB: it would take two minutes a
# run. The topologies whose relays learn from traffic first carry it
# before the sizes: plan-learnt* 16 MiB through r1 (its links' rate),
# plan-lossy* 3 MB through r1 → r2 (its loss), as their own benches do.
# Writes OUT/sizes.jsonl (one bench a line, with its topology and whether
# the emulator's self-check held) and OUT/sizes.md. Needs root; run alone
# (the lab's self-check fails under other load). About an hour at 3 runs.
# Usage: sudo bench/run-size-bench.sh [RUNS] [OUT_DIR] [TOPOLOGIES]
#        (default 3, bench/results, every configs/lab file; TOPOLOGIES is
#        comma-separated, e.g. split4,world)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
runs=${1:-3}
out=${2:-bench/results}
topos=${3:-$(cd configs/lab && ls *.yaml | sed 's/\.yaml$//' | paste -sd,)}
lab_bench_start run-size-bench.sh
# The commit the binaries were built from (a run outlasts commits made
# meanwhile), marked when the tree differed from it.
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!bench/results' || commit="$commit + uncommitted changes"
jsonl=$out/sizes.jsonl
: > "$jsonl"
# sizes_script DIR: the downloads of one lab run, each bench's JSON in DIR.
sizes_script() {
  cat <<SCRIPT
sleep 10
SCRIPT
  # What the relays learn from traffic, before the plans (see above).
  case $topo in
    plan-learnt*) echo "relayctl bench --dst $dst --chain r1 --via plan --transfers down --size 16777216 --history '' -o json > /dev/null || exit 1" ;;
    plan-lossy*) echo "relayctl bench --dst $dst --chain r1,r2 --via plan --transfers down --size 3000000 --history '' -o json > /dev/null || exit 1; sleep 5" ;;
  esac
  cat <<SCRIPT
for size in ${SIZES:-10KB 100KB 1MB 64MB}; do
  via=both
  [ $topo = world ] && [ \$size = 64MB ] && via=plan
  for run in \$(seq 1 $runs); do
    relayctl bench --dst $dst --size \$size --via \$via --transfers down --history '' -o json > $1/\$size-\$run.json || exit 1
    # The plan for this size (direct, or the chain that finishes
    # soonest), against direct's time above.
    relayctl bench --dst $dst --size \$size --plan-for-size --via plan --transfers down --history '' -o json > $1/\$size-sized-\$run.json || exit 1
  done
done
SCRIPT
}
# sizes_collect DIR VALID: one line of sizes.jsonl per bench.
sizes_collect() {
  for f in "$1"/*.json; do
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['topology']=sys.argv[2]; d['valid']=sys.argv[3]=='true'; print(json.dumps(d))" "$f" "$topo" "$2" >> "$jsonl"
  done
}
for topo in ${topos//,/ }; do
  case $topo in
    world) dst=tokyo ;;
    *) dst=server:8000 ;;
  esac
  lab_try run-size-bench.sh "$topo" sizes_script sizes_collect
done
python3 - "$jsonl" "$out/sizes.md" "$runs" "$commit" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
sized = {}  # (topology, size) -> [(chain, measured_s, valid)]: the plan for that size
for r in rows:
    for m in r.get('modelled') or []:
        if r.get('planned_for_size'):
            sized.setdefault((r['topology'], r['size_bytes']), []).append((tuple(r['chain']['relays']), m['measured_s'], r['valid']))
            continue
        chain = tuple(r['chain']['relays']) if m['path'] == 'chain' else None
        by.setdefault((r['topology'], r['size_bytes'], m['path']), []).append((m['measured_s'], m['model_s'], r['valid'], chain))
def human(n):
    for unit, f in (('MB', 1e6), ('KB', 1e3)):
        if n >= f:
            return '%g %s' % (n / f, unit)
    return '%d B' % n
commit = sys.argv[4]
with open(sys.argv[2], 'w') as f:
    f.write('# Completion time against the model, per object size\n\n')
    f.write('Made by `sudo bench/run-size-bench.sh %s` at commit %s; raw: [`sizes.jsonl`](sizes.jsonl).\n' % (sys.argv[3], commit))
    f.write('Each row: the median over its runs of one download\'s time (from the first packet to the last byte: connect, request, transfer) and of the model\'s completion time for its bytes (`relayctl bench`\'s per-stream line: a warm chain\'s setup or direct\'s, one more round trip of the path for an admin API\'s TLS, slow start over the slowest segment to ramp, then the predicted rate); ratio = measured / modelled, 1 = as modelled, above 1 slower.\n\n')
    f.write('| topology | size | path | runs | measured, median | modelled, median | ratio, median (range) | self-check |\n|---|---:|---|---:|---:|---:|---|---|\n')
    chains = lambda v: ', '.join(sorted({' → '.join(x[3]) if x[3] else 'direct' for x in v}))
    for (topo, size, path), v in sorted(by.items()):
        meas = statistics.median(x[0] for x in v)
        mod = statistics.median(x[1] for x in v)
        ratios = [x[0] / x[1] for x in v]
        valid = 'held' if all(x[2] for x in v) else 'failed: indicative only'
        f.write('| %s | %s | %s | %d | %.3f s | %.3f s | %.2f (%.2f–%.2f) | %s |\n' % (topo, human(size), path if path == 'direct' else 'plan: ' + chains(v), len(v), meas, mod, statistics.median(ratios), min(ratios), max(ratios), valid))
    if sized:
        f.write('\n## The plan for the size against direct\n\n')
        f.write('`relayctl bench --size N --plan-for-size --via plan`: the plan ranked by predicted completion time for N bytes (direct, or the chain that finishes soonest), timed, against direct\'s time in the table above (the median of each; ratio above 1: the plan was slower than direct).\n\n')
        f.write('| topology | size | the plan (runs) | runs | measured, median | direct, median | ratio | self-check |\n|---|---:|---|---:|---:|---:|---:|---|\n')
        for (topo, size), v in sorted(sized.items()):
            d = by.get((topo, size, 'direct'))
            if not d:
                continue
            picks = {}
            for c, _, _ in v:
                picks[c] = picks.get(c, 0) + 1
            pick = ', '.join('%s (%d)' % (' → '.join(c) if c else 'direct', n) for c, n in sorted(picks.items()))
            meas = statistics.median(x[1] for x in v)
            dmeas = statistics.median(x[0] for x in d)
            valid = 'held' if all(x[2] for x in v) else 'failed: indicative only'
            f.write('| %s | %s | %s | %d | %.3f s | %.3f s | %.2f | %s |\n' % (topo, human(size), pick, len(v), meas, dmeas, meas / dmeas, valid))
print(open(sys.argv[2]).read())
EOF
