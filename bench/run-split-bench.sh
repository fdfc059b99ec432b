#!/usr/bin/env bash
# The split experiment in the emulated WAN lab: one window-limited TCP
# download over a 50 ms path, direct and through 1-3 relays (and one relay at
# five positions), relayd vs dante vs squid on the same relay nodes.
# Writes bench/results/split.{md,json} and split-{segments,position}.svg.
# Needs root (the lab builds network namespaces and TUN devices).
# Usage: bench/run-split-bench.sh [bench/split flags, e.g. -runs 5 -size 67108864
#        -topologies split2,split3 | -plot-only]
set -euo pipefail
cd "$(dirname "$0")/.."

plot_only=0
for a in "$@"; do
  case "$a" in -plot-only|--plot-only|-plot-only=true|--plot-only=true) plot_only=1 ;; esac
done

if [ "$plot_only" -eq 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "run-split-bench.sh: the lab needs root: sudo make bench-split" >&2
    exit 1
  fi
  # Peers from Debian packages.
  need=()
  [ -x /usr/sbin/danted ] || need+=(dante-server)
  command -v squid >/dev/null || [ -x /usr/sbin/squid ] || need+=(squid)
  command -v curl >/dev/null || need+=(curl)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
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
    for name in squid danted; do
      pgrep -x "$name" -a 2>/dev/null | while read -r pid cmd; do
        # Main processes only ("/usr/sbin/squid ..."), not children or kids
        # ("danted: io-child", "(squid-1) ...") of anyone's instances.
        case "$cmd" in "/usr/sbin/$name"|"/usr/sbin/$name "*|"$name"|"$name "*) ;; *) continue ;; esac
        case "$cmd" in
          *" -f /etc/"*) kill "$pid" 2>/dev/null || true ;;
          *" -f "*) ;;
          *) kill "$pid" 2>/dev/null || true ;;
        esac
      done
    done
  fi
  make build
fi

go build -o bench/.bin/split ./bench/split
exec bench/.bin/split -cmdline "bench/run-split-bench.sh $*" "$@"
