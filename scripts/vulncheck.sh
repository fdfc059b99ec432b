#!/usr/bin/env bash
# govulncheck over every package, against a pinned snapshot of the Go
# vulnerability database. The database is the golang.org/x/vulndb module
# (its OSV files) fetched from the Go module proxy like any module, indexed
# once into bin/vulndb/VERSION (git-ignored) with the module's own indexdb
# tool: no other server is reached, so CI works where vuln.go.dev cannot be.
# The snapshot is only as new as its version: bump VULNDB in the Makefile to
# refresh it. Usage: scripts/vulncheck.sh GOVULNCHECK_MODULE@V VULNDB_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
tool=$1 ver=$2
GO=${GO:-go}
db=bin/vulndb/$ver
if [ ! -f "$db/index/db.json" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Outside this module, so neither go.mod nor go.sum changes.
  src=$(cd "$tmp" && GOFLAGS=-mod=mod "$GO" mod download -json "golang.org/x/vulndb@$ver" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/data/osv" ] || { echo "vulncheck: no data/osv in golang.org/x/vulndb@$ver" >&2; exit 1; }
  (cd "$tmp" && "$GO" run "golang.org/x/vulndb/cmd/indexdb@$ver" -vulns "$src/data/osv" -out "$tmp/db")
  mkdir -p bin/vulndb && rm -rf "$db" && mv "$tmp/db" "$db"
fi
echo "vulncheck: Go vulnerability database golang.org/x/vulndb@$ver, $("$GO" version)"
"$GO" run "$tool" -db "file://$PWD/$db" ./...
