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
set -uo pipefail
budget=$1; shift
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
  pkg=${t%%:*}; fn=${t##*:}
  dir="$pkg/testdata/fuzz/$fn"
  before=$(ls "$dir" 2>/dev/null | sort)
  echo "fuzz $pkg $fn ($budget)"
  if go test -run '^$' -fuzz "^$fn\$" -fuzztime "$budget" "$pkg" >"$log" 2>&1; then
    tail -n 3 "$log" | grep -E 'execs|^ok' | tail -n 1
    continue
  fi
  after=$(ls "$dir" 2>/dev/null | sort)
  if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" \
      && ! grep -qE 'panic:|Failing input written' "$log"; then
    echo "  stopped by the Go fuzz-deadline race (golang/go#75804), no failing input: treated as a clean stop"
    continue
  fi
  cat "$log"
  echo "fuzz: $pkg $fn FAILED (new inputs, if any, are in $dir)" >&2
  exit 1
done
