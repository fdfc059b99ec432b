#!/usr/bin/env bash
# Installs the Debian packages the test suite drives as real peers: curl (an
# independent HTTP/SOCKS5 client), microsocks and dante-server (third-party
# SOCKS5 hops), chromium (a browser taking relayctl connect's PAC file),
# systemd (systemd-analyze verifies the shipped unit; no systemd need run)
# and prometheus (promtool checks the shipped alert rules; the server scrapes
# a relay and evaluates them), python3-socks and python3-dnspython (PySocks and
# dnspython: real SOCKS5 UDP clients, a DNS query through a chain).
# Without root or apt it says what is missing; the tests that need a missing
# tool skip with a printed reason (under CI=true they fail).
set -euo pipefail
need=()
command -v curl >/dev/null || need+=(curl)
command -v microsocks >/dev/null || need+=(microsocks)
command -v danted >/dev/null || [ -x /usr/sbin/danted ] || need+=(dante-server)
command -v chromium >/dev/null || need+=(chromium)
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v promtool >/dev/null || need+=(prometheus)
# PySocks and dnspython, the real SOCKS5 UDP clients of e2e/udp_test.go, for
# Debian's python3 (another python3 first on the PATH, e.g. pyenv's, lacks them).
/usr/bin/python3 -c 'import socks' 2>/dev/null || need+=(python3-socks)
/usr/bin/python3 -c 'import dns.query' 2>/dev/null || need+=(python3-dnspython)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "test-deps: not root or no apt-get; missing ${need[*]} (tests using them will skip; under CI=true, fail)" >&2
  exit 0
fi
echo "test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The package starts danted as a service; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet danted 2>/dev/null; then systemctl stop danted || true; fi
# The prometheus package starts a server on :9090, relayd's admin port: only
# promtool is wanted.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl disable --now prometheus 2>/dev/null || true
fi
# Without systemd (a container), an init script may have started it.
if pgrep -x prometheus >/dev/null 2>&1; then
  /etc/init.d/prometheus stop >/dev/null 2>&1 || pkill -x prometheus || true
fi
