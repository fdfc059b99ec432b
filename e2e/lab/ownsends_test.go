package lab_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/planner"
)

// TestLabConnectLearnsUpload: relayctl connect, planning uploads to the
// server (--dst, --direction up), carries 32 MiB there directly over a
// 40 ms path of 20 Mbit/s whose server's window is capped (tcp_rmem max
// 256 KiB); r1 is a detour, so the plan is direct throughout. Its next
// plan's direct segment carries what connect's own socket taught: the
// rate its sends sustained and the server's window, each within 15 % of
// what relayctl bench then measures on the same path (its steady upload
// rate, and the largest window the server advertised to it); the loss
// learnt from tunnels.
func TestLabConnectLearnsUpload(t *testing.T) {
	labBins(t)
	topo := labTopology(t, `name: connect-learns
defaults: {sysctl: {net.ipv4.tcp_congestion_control: cubic}}
nodes:
  client: {}
  r1:     {role: relay}
  server: {role: server, region: tokyo, sysctl: {net.ipv4.tcp_rmem: "4096 131072 262144"}}
links:
  - {between: [client, server], rtt_ms: 40, rate_mbit: 20}
  - {between: [client, r1], rtt_ms: 40}
  - {between: [r1, server], rtt_ms: 40}
`)
	dir := inLab(t, topo, settle+`set -e
relayctl connect --dst server:8000 --direction up --replan 5s --bench-history "" --socks 127.0.0.1:1080 --http "" --log-level debug > "$OUT/connect.log" 2>&1 &
pid=$!
for i in $(seq 1 150); do grep -q "SOCKS5 on" "$OUT/connect.log" && break; sleep 0.2; done
head -c 33554432 /dev/zero | curl -sS --max-time 60 -x socks5h://127.0.0.1:1080 --data-binary @- -H "Content-Type: application/octet-stream" http://server:8000/upload > /dev/null
sleep 12
kill $pid; wait $pid || true
relayctl bench --dst server:8000 --via direct --transfers up --size 16777216 --history "" -o json > "$OUT/bench.json"`)
	logBytes, err := os.ReadFile(filepath.Join(dir, "connect.log"))
	if err != nil {
		t.Fatal(err)
	}
	var last struct {
		Chain          []string          `json:"chain"`
		DirectSegments []planner.Segment `json:"direct_segments"`
		Notes          []string          `json:"notes"`
	}
	const msg = "\tplan details\t"
	for _, line := range strings.Split(string(logBytes), "\n") {
		if i := strings.Index(line, msg); i >= 0 {
			if err := json.Unmarshal([]byte(line[i+len(msg):]), &last); err != nil {
				t.Fatalf("plan details: %v\n%s", err, line)
			}
		}
	}
	var bench struct {
		Direct struct {
			UpSteadyBps float64  `json:"up_steady_bps"`
			Errors      []string `json:"errors"`
			UpStreams   []struct {
				PeerWindowBytes uint32 `json:"peer_window_bytes"`
			} `json:"up_streams"`
		} `json:"direct"`
	}
	readJSON(t, filepath.Join(dir, "bench.json"), &bench)
	if len(last.DirectSegments) != 1 {
		t.Fatalf("no plan details with a direct segment in connect's log:\n%s", logBytes)
	}
	seg := last.DirectSegments[0]
	d := bench.Direct
	if len(d.Errors) > 0 || len(d.UpStreams) != 1 || !(d.UpSteadyBps > 0) {
		t.Fatalf("bench's direct upload: %+v", d)
	}
	t.Logf("connect learnt %.1f Mbit/s (%s), window %d bytes, loss %.3f %% (%s); bench measured %.1f Mbit/s steady, window %d bytes; plan %v",
		seg.LearntBps/1e6, seg.LearntSource, seg.WindowBytes, 100*seg.Loss, seg.LossSource, d.UpSteadyBps/1e6, d.UpStreams[0].PeerWindowBytes, last.Chain)
	if len(last.Chain) != 0 {
		t.Errorf("the last plan %v: want direct", last.Chain)
	}
	if seg.Sender != "client" || seg.LearntSource != planner.LearntFromTunnels || seg.LossSource != planner.LearntFromTunnels {
		t.Fatalf("direct segment %+v: want this host's sends learnt from its tunnels", seg)
	}
	if r := seg.LearntBps / d.UpSteadyBps; r < 0.85 || r > 1.15 {
		t.Errorf("connect learnt %.1f Mbit/s, %.2f of bench's %.1f: want within 15 %%", seg.LearntBps/1e6, r, d.UpSteadyBps/1e6)
	}
	if r := float64(seg.WindowBytes) / float64(d.UpStreams[0].PeerWindowBytes); seg.WindowAssumed || r < 0.85 || r > 1.15 {
		t.Errorf("connect's window %d bytes (assumed: %v), %.2f of bench's %d: want within 15 %%", seg.WindowBytes, seg.WindowAssumed, r, d.UpStreams[0].PeerWindowBytes)
	}
	if !strings.Contains(strings.Join(last.Notes, "\n"), "learnt from relayctl connect's traffic") {
		t.Errorf("notes %q: want the window's source", last.Notes)
	}
}
