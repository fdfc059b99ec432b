#!/usr/bin/env bash
# Runs inside the lab's client node (see scripts/demo.sh).
set -euo pipefail
size=${SIZE:-8388608}
url=http://srv-tokyo:8000/bytes/$size
"$RELAYD" run --name local --socks 127.0.0.1:1080 --http "" --admin "" --allow-private \
  --next socks5://frankfurt:1080 --next socks5://tokyo:1080 --log-level warn &
relayd_pid=$!
trap 'kill $relayd_pid 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 50); do curl -s -o /dev/null --max-time 1 -x socks5h://127.0.0.1:1080 http://srv-tokyo:8000/healthz && break; sleep 0.1; done

echo "== lab 'world': client in Frankfurt (receive window ~160 KiB), server in Tokyo"
echo "== direct path: one TCP connection across 230 ms"
direct=$(curl -sS -o /dev/null --max-time 300 -w '%{speed_download}' "$url")
awk -v b="$direct" 'BEGIN { printf "   %.2f Mbit/s\n", b * 8 / 1e6 }'
echo "== through relays: client -5 ms-> frankfurt -225 ms-> tokyo -2 ms-> server"
echo "   (the client's small window now only covers the 5 ms segment; relays have large buffers)"
chained=$(curl -sS -o /dev/null --max-time 300 -w '%{speed_download}' -x socks5h://127.0.0.1:1080 "$url")
awk -v b="$chained" 'BEGIN { printf "   %.2f Mbit/s\n", b * 8 / 1e6 }'
awk -v c="$chained" -v d="$direct" -v n="$size" 'BEGIN { printf "== speed-up over direct: %.1fx (%d bytes per download)\n", c / d, n }'
