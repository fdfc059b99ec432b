# Shared by the lab benchmark scripts: source it from the repository root.

# lab_bench_start NAME: what every lab benchmark does first: refuse to run
# without root (the lab needs it), make the output directory $out, and
# build bin/ from this checkout. NAME is the script's, for the message.
lab_bench_start() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$1: the lab needs root: sudo bench/$1" >&2
    exit 1
  fi
  mkdir -p "$out"
  make -s build
}

# lab_try NAME TOPO SCRIPT_FN COLLECT_FN runs, inside a lab of
# configs/lab/TOPO.yaml (relayctl lab run, with bin/ first on the PATH),
# the shell script that `SCRIPT_FN DIR` prints, DIR being a fresh
# directory for its output; up to three times while the emulator's
# self-check fails (lab run exits 3). Then `COLLECT_FN DIR VALID`, VALID
# true or false: whether the last attempt's self-check held. Any other
# failure of the lab run exits the calling script. NAME prefixes the
# messages.
lab_try() {
  local name=$1 topo=$2 script_fn=$3 collect_fn=$4 attempt tmp code valid
  for attempt in 1 2 3; do
    tmp=$(mktemp -d)
    set +e
    ./bin/relayctl lab run -t "configs/lab/$topo.yaml" -- sh -c "export PATH=$PWD/bin:\$PATH
$("$script_fn" "$tmp")"
    code=$?
    set -e
    valid=true
    [ "$code" -eq 3 ] && valid=false
    if [ "$code" -ne 0 ] && [ "$code" -ne 3 ]; then
      echo "$name: $topo: the lab run failed (exit $code)" >&2
      rm -rf "$tmp"
      exit 1
    fi
    if [ "$valid" = true ] || [ "$attempt" -eq 3 ]; then
      "$collect_fn" "$tmp" "$valid"
      rm -rf "$tmp"
      return 0
    fi
    echo "$name: $topo: the emulator's self-check failed; again ($attempt of 3)" >&2
    rm -rf "$tmp"
  done
}
