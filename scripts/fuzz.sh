#!/usr/bin/env bash
# Runs each fuzz target given as package:FuzzName for a budget.
#
#   scripts/fuzz.sh BUDGET pkg:Fuzz [pkg:Fuzz ...]
#
# BUDGET is either a count ("200000x", what `make test` uses) or a duration
# ("5m", what `make fuzz-long` uses). Go 1.26's fuzz coordinator has a race
# (golang/go#75804, fixed in 1.27): a duration budget can end with a bare
# "context deadline exceeded" FAIL and no failing input. A count budget has no
# deadline to race, so CI uses counts. For duration runs we treat that exact
# signature as a clean stop *only* when no new failing input was written to
# testdata/fuzz/<Fuzz>/; any other failure, or a new input, fails the run.
#
# Environment:
#   FUZZ_PARALLEL=N     fuzz workers per target (default: GOMAXPROCS), e.g. 1 to
#                       leave a core free on a 2-core machine.
#   FUZZ_SAVE_CORPUS=1  after a clean run, copy the inputs the fuzzer found
#                       interesting (kept in $(go env GOCACHE)/fuzz) into
#                       testdata/fuzz/<Fuzz>/, where every plain `go test` runs
#                       them as seeds: that is the committed corpus.
set -uo pipefail
parallel=()
[ -n "${FUZZ_PARALLEL:-}" ] && parallel=(-parallel "$FUZZ_PARALLEL")
cache=$(go env GOCACHE)/fuzz
module=$(go list -m)
save_corpus() { # pkg fn
  [ "${FUZZ_SAVE_CORPUS:-}" = 1 ] || return 0
  local src="$cache/$module/${1#./}/$2" dst="$1/testdata/fuzz/$2"
  [ -d "$src" ] || return 0
  mkdir -p "$dst" && cp -n "$src"/* "$dst"/ 2>/dev/null
  echo "  corpus: $(ls "$dst" | wc -l) inputs in $dst"
}
budget=$1; shift
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
  pkg=${t%%:*}; fn=${t##*:}
  dir="$pkg/testdata/fuzz/$fn"
  before=$(ls "$dir" 2>/dev/null | sort)
  echo "fuzz $pkg $fn ($budget)"
  if go test -run '^$' -fuzz "^$fn\$" -fuzztime "$budget" "${parallel[@]}" "$pkg" >"$log" 2>&1; then
    tail -n 3 "$log" | grep -E 'execs|^ok' | tail -n 1
    save_corpus "$pkg" "$fn"
    continue
  fi
  after=$(ls "$dir" 2>/dev/null | sort)
  if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" \
      && ! grep -qE 'panic:|Failing input written' "$log"; then
    echo "  stopped by the Go fuzz-deadline race (golang/go#75804), no failing input: treated as a clean stop"
    grep -E 'execs' "$log" | tail -n 1
    save_corpus "$pkg" "$fn"
    continue
  fi
  cat "$log"
  echo "fuzz: $pkg $fn FAILED (new inputs, if any, are in $dir)" >&2
  exit 1
done
