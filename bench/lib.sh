# Shared by the benchmark scripts: source it from the repository root.

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
# configs/lab/TOPO.yaml, or of the file TOPO when it holds a slash
# (relayctl lab run, with bin/ first on the PATH),
# the shell script that `SCRIPT_FN DIR` prints, DIR being a fresh
# directory for its output; up to three times while the emulator's
# self-check fails (lab run exits 3). Then `COLLECT_FN DIR VALID`, VALID
# true or false: whether the last attempt's self-check held. Any other
# failure of the lab run exits the calling script. NAME prefixes the
# messages. With LAB_RELAYD set, the relays run that relayd binary instead
# of bin/relayd (another build, to compare).
lab_try() {
  local name=$1 topo=$2 script_fn=$3 collect_fn=$4 attempt tmp code valid path
  path=configs/lab/$topo.yaml
  case $topo in */*) path=$topo ;; esac
  for attempt in 1 2 3; do
    tmp=$(mktemp -d)
    set +e
    ./bin/relayctl lab run ${LAB_RELAYD:+--relayd "$LAB_RELAYD"} -t "$path" -- sh -c "export PATH=$PWD/bin:\$PATH
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

# install_peers NAME PKG...: install the Debian packages among PKG
# (dante-server, squid, curl, proxychains4) that this machine lacks, then
# stop the instances their packages start on their default configs (only
# those: the benchmarks run their own). NAME prefixes the message.
install_peers() {
  local name=$1 pkg
  shift
  local need=()
  for pkg in "$@"; do
    case $pkg in
      dante-server) [ -x /usr/sbin/danted ] || need+=(dante-server) ;;
      squid) command -v squid >/dev/null || [ -x /usr/sbin/squid ] || need+=(squid) ;;
      *) command -v "$pkg" >/dev/null || need+=("$pkg") ;;
    esac
  done
  [ ${#need[@]} -gt 0 ] || return 0
  echo "$name: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian may start the packages' own services: stop those instances
  # (only them: the ones using the packages' default configs), the
  # benchmark runs its own.
  for s in danted squid; do
    systemctl stop "$s" 2>/dev/null || service "$s" stop 2>/dev/null || true
  done
  if pgrep -x squid >/dev/null; then
    squid -k shutdown -f /etc/squid/squid.conf 2>/dev/null || true
    for _ in $(seq 1 50); do pgrep -x squid >/dev/null || break; sleep 0.2; done
  fi
  # Any instance left on the packages' default config (no -f, or /etc/...):
  # those are the packages' own, never one with a lab config.
  for svc in squid danted; do
    # (pgrep finds none: no failure, under pipefail.)
    { pgrep -x "$svc" -a 2>/dev/null || true; } | while read -r pid cmd; do
      # Main processes only ("/usr/sbin/squid ..."), not children or kids
      # ("danted: io-child", "(squid-1) ...") of anyone's instances.
      case "$cmd" in "/usr/sbin/$svc"|"/usr/sbin/$svc "*|"$svc"|"$svc "*) ;; *) continue ;; esac
      case "$cmd" in
        *" -f /etc/"*) kill "$pid" 2>/dev/null || true ;;
        *" -f "*) ;;
        *) kill "$pid" 2>/dev/null || true ;;
      esac
    done
  done
}

# sim_bench_start: what the simulator benchmarks that record several runs
# do first: build bench/.bin/relayctl from this checkout, make $out, and
# note this checkout's commit for sim_run.
sim_bench_start() {
  mkdir -p bench/.bin "$out"
  go build -o bench/.bin/relayctl ./cmd/relayctl
  sim_commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
}

# sim_bench_json FILE FUNCTION ARGS...: builds relayctl (sim_bench_start),
# then writes bench/results/FILE, a JSON object whose members FUNCTION
# prints (sim_run, with "," between them), called with ARGS; the file is
# replaced only once FUNCTION has succeeded.
sim_bench_json() {
  local file=$1 fn=$2
  shift 2
  out=bench/results
  sim_bench_start
  {
    echo "{"
    "$fn" "$@"
    echo "}"
  } > "$out/$file.tmp"
  mv "$out/$file.tmp" "$out/$file"
  echo "wrote $out/$file"
}

# sim_run NAME FLAGS... prints "NAME": {the command, date, commit and
# "report": relayctl sim's JSON report}, a member of the JSON object the
# calling script writes.
sim_run() {
  local name=$1 a cmd=""
  shift
  # The command as typed: an argument with spaces (a --variant) quoted.
  for a in "$@"; do
    case $a in *" "*) cmd+=" '$a'" ;; *) cmd+=" $a" ;; esac
  done
  echo "\"$name\": {\"command\": \"relayctl sim${cmd} -o json\", \"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$sim_commit\", \"report\":"
  bench/.bin/relayctl sim "$@" -o json
  echo "}"
}
