package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// historyLine is one bench's history line: a one-stream download of
// steadyBps over relays (none: direct).
func historyLine(t *testing.T, at time.Time, registry, target string, steadyBps float64, relays ...string) string {
	t.Helper()
	res := &pathbench.Result{Relays: relays, DownSteadyBps: steadyBps, DownStreams: []pathbench.Stream{{Bytes: 1 << 20, RTTMs: 90}}}
	b := benchJSON{Time: at, Destination: "tokyo", Target: target, Registry: registry, Streams: 1}
	if len(relays) == 0 {
		b.Direct = res
	} else {
		b.Chain = res
	}
	line, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(line)
}

// A bench counts for a path when it is recent, timed against the same
// destination in the same fleet with one stream; per path and direction
// the newest wins.
func TestBenchMeasurements(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const reg, target = "fleet:/etc/relaymesh/fleet.yaml", "srv-tokyo:8000"
	twoStreams := func() string {
		var b benchJSON
		if err := json.Unmarshal([]byte(historyLine(t, now.Add(-time.Minute), reg, target, 90e6)), &b); err != nil {
			t.Fatal(err)
		}
		b.Streams = 2
		line, _ := json.Marshal(b)
		return string(line)
	}()
	explored := func() string {
		var b benchJSON
		if err := json.Unmarshal([]byte(historyLine(t, now.Add(-time.Minute), reg, target, 70e6, "r1")), &b); err != nil {
			t.Fatal(err)
		}
		b.Explored = &pathbench.Result{Relays: []string{"r2"}, UpSteadyBps: 80e6, UpStreams: []pathbench.Stream{{Bytes: 1 << 20}}}
		line, _ := json.Marshal(b)
		return string(line)
	}()
	for _, tc := range []struct {
		name  string
		lines []string
		want  string // the measurements, formatted
	}{
		{"a chain and the untried one explored", []string{explored}, "[r1] down 70 Mbit/s 60 s; [r2] up 80 Mbit/s 60 s"},
		{"direct", []string{historyLine(t, now.Add(-10*time.Minute), reg, target, 30e6)}, "[] down 30 Mbit/s 600 s"},
		{"a chain", []string{historyLine(t, now.Add(-10*time.Minute), reg, target, 60e6, "r1", "r2")}, "[r1 r2] down 60 Mbit/s 600 s"},
		{"too old", []string{historyLine(t, now.Add(-2*time.Hour), reg, target, 30e6)}, ""},
		{"another fleet", []string{historyLine(t, now.Add(-time.Minute), "fleet:/tmp/lab/fleet.yaml", target, 30e6)}, ""},
		{"another destination", []string{historyLine(t, now.Add(-time.Minute), reg, "srv-paris:8000", 30e6)}, ""},
		{"two streams", []string{twoStreams}, ""},
		{"the newest wins, in any order", []string{
			historyLine(t, now.Add(-5*time.Minute), reg, target, 40e6),
			historyLine(t, now.Add(-20*time.Minute), reg, target, 30e6),
			historyLine(t, now.Add(-20*time.Minute), reg, target, 50e6, "r1"),
			"not json: an older relayctl's line, or a torn write",
		}, "[] down 40 Mbit/s 300 s; [r1] down 50 Mbit/s 1200 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readBenchHistory(strings.NewReader(strings.Join(tc.lines, "\n")), reg, target, now)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range h.measured {
				got = append(got, fmt.Sprintf("%v %s %.0f Mbit/s %.0f s", m.Chain, m.Direction, m.SteadyBps/1e6, m.AgeSec))
			}
			if g := strings.Join(got, "; "); g != tc.want {
				t.Errorf("measurements %q, want %q", g, tc.want)
			}
		})
	}
}

// readHistory's measurements bound the plans of the paths bench timed,
// and the plan says where they came from.
func TestHistoryBoundsPlans(t *testing.T) {
	now := time.Now()
	const reg, target = "fleet:/etc/relaymesh/fleet.yaml", "srv-tokyo:8000"
	path := filepath.Join(t.TempDir(), "bench-history.jsonl")
	lines := historyLine(t, now.Add(-3*time.Minute), reg, target, 30e6) + "\n" + historyLine(t, now.Add(-3*time.Minute), reg, target, 25e6, "r1") + "\n"
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := planner.ParseMatrix([]byte(`{"nodes": {"client": {"window_bytes": 1048576}, "dst:tokyo": {}, "r1": {"relay": true, "window_bytes": 1048576}},
		"rtt_ms": [["client", "dst:tokyo", 60], ["client", "r1", 30], ["r1", "dst:tokyo", 30]]}`))
	if err != nil {
		t.Fatal(err)
	}
	req := planner.Request{Client: "client", Destination: "dst:tokyo"}
	before, err := planner.Search(m, req)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHistory(path, reg, target, now)
	if err != nil {
		t.Fatal(err)
	}
	if note := h.note(target, path); !strings.Contains(note, "timed 2 paths to srv-tokyo:8000 in the last hour (direct down 30.0 Mbit/s 3m0s ago; r1 down 25.0 Mbit/s 3m0s ago)") {
		t.Errorf("note %q", note)
	}
	req.Measured = h.measured
	after, err := planner.Search(m, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Best.Chain) == 0 || before.Direct.PredictedBps <= 30e6 {
		t.Fatalf("before: best %v, direct %v bit/s; want r1, direct above 30 Mbit/s", before.Best.Chain, before.Direct.PredictedBps)
	}
	if len(after.Best.Chain) != 0 || after.Direct.PredictedBps != 30e6 || after.Direct.Bound {
		t.Fatalf("after: best %v, direct %v bit/s (bound %v); want direct, measured at 30 Mbit/s, a point", after.Best.Chain, after.Direct.PredictedBps, after.Direct.Bound)
	}
	if txt := planner.Explain(after); !strings.Contains(txt, "measured by relayctl bench: down 30.0 Mbit/s steady 3 min ago") {
		t.Errorf("the plan does not say direct was measured:\n%s", txt)
	}

	// Without the file, or with --bench-history "", nothing.
	for _, p := range []string{"", filepath.Join(t.TempDir(), "none.jsonl")} {
		if h, err := readHistory(p, reg, target, now); err != nil || len(h.measured) > 0 || h.dstWindowBytes > 0 {
			t.Errorf("history %q: %+v, error %v; want none", p, h, err)
		}
	}
}

// What a plan learnt is kept per fleet between runs of relayctl: written
// whole, read back by the next run; a file that does not parse is
// replaced, not fatal.
func TestKeptPlans(t *testing.T) {
	dir := t.TempDir()
	if plansFile("fleet:/a/fleet.yaml") == plansFile("fleet:/b/fleet.yaml") {
		t.Fatal("two fleets share a plans file")
	}
	path := filepath.Join(dir, "plans", plansFile("fleet:/a/fleet.yaml"))
	at := time.Now().UTC().Format(time.RFC3339Nano)
	kept := `{"version": 1, "plans": {"dst:tokyo": {"prior": {"Chains": [["r1", "r2"]]}, "fresh_at": "` + at + `", "put_at": "` + at + `"}}}`
	r, keep := keptPlans(path)
	if err := r.Load(strings.NewReader(kept)); err != nil {
		t.Fatal(err)
	}
	if err := keep(); err != nil {
		t.Fatal(err)
	}
	again, _ := keptPlans(path)
	var buf strings.Builder
	if err := again.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"dst:tokyo"`) || !strings.Contains(buf.String(), `["r1","r2"]`) {
		t.Fatalf("the next run read %s", buf.String())
	}
	if err := os.WriteFile(path, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	torn, keep := keptPlans(path)
	buf.Reset()
	if err := torn.Save(&buf); err != nil || strings.Contains(buf.String(), "tokyo") {
		t.Fatalf("a torn file gave %s, %v", buf.String(), err)
	}
	if err := keep(); err != nil {
		t.Fatalf("a torn file was not replaced: %v", err)
	}
}

// The window the destination advertised to a direct upload becomes its
// window where the survey knew none: an upload's plan is then no longer a
// bound on an assumed window.
func TestHistoryLearnsTheDestinationsWindow(t *testing.T) {
	now := time.Now()
	const reg, target = "fleet:/etc/relaymesh/fleet.yaml", "srv-tokyo:8000"
	b := benchJSON{Time: now.Add(-2 * time.Minute), Target: target, Registry: reg, Streams: 1,
		Direct: &pathbench.Result{UpSteadyBps: 13e6, UpStreams: []pathbench.Stream{{Bytes: 1 << 20, PeerWindowBytes: 256 << 10}}}}
	line, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readBenchHistory(strings.NewReader(string(line)), reg, target, now)
	if err != nil {
		t.Fatal(err)
	}
	if h.dstWindowBytes != 256<<10 || h.dstWindowAgeSec < 119 || h.dstWindowAgeSec > 121 {
		t.Fatalf("destination window %d bytes, %v s old; want 256 KiB, 120 s", h.dstWindowBytes, h.dstWindowAgeSec)
	}
	m, err := planner.ParseMatrix([]byte(`{"nodes": {"client": {"window_bytes": 1048576}, "dst:tokyo": {}, "r1": {"relay": true, "window_bytes": 1048576}},
		"rtt_ms": [{"a": "client", "b": "dst:tokyo", "rtt_ms": 60, "a_loss_source": "bench", "b_loss_source": "bench"}, ["client", "r1", 30], {"a": "r1", "b": "dst:tokyo", "rtt_ms": 30, "a_loss_source": "tunnels", "b_loss_source": "tunnels"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if note := h.applyDstWindow(m, "dst:tokyo", target, nil); !strings.Contains(note, "advertised a 262144-byte window to a direct upload relayctl bench timed 2m0s ago") {
		t.Errorf("note %q", note)
	}
	r, err := planner.Search(m, planner.Request{Client: "client", Destination: "dst:tokyo", Direction: planner.Up})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Direct.Segments[0]
	if last.Receiver != "dst:tokyo" || last.WindowBytes != 256<<10 || last.WindowAssumed {
		t.Errorf("direct upload's segment %+v: want the destination's 256 KiB window, not assumed", last)
	}
	m.Nodes[1].WindowBytes = 1 << 20 // the survey measured one (dst:tokyo sorts second)
	if note := h.applyDstWindow(m, "dst:tokyo", target, nil); note != "" || m.Nodes[1].WindowBytes != 1<<20 {
		t.Errorf("a known window was replaced: note %q, window %d", note, m.Nodes[1].WindowBytes)
	}
	// One learnt from connect's traffic: the newer of the two wins.
	older := &survey.OwnWindow{Bytes: 1 << 20, AgeSec: 600}
	if note := h.applyDstWindow(m, "dst:tokyo", target, older); !strings.Contains(note, "after the 1048576 bytes learnt from relayctl connect's traffic 10m0s ago: the plan takes the bench's") ||
		m.Nodes[1].WindowBytes != 256<<10 {
		t.Errorf("bench 2 min ago against connect 10 min ago: note %q, window %d; want the bench's", note, m.Nodes[1].WindowBytes)
	}
	m.Nodes[1].WindowBytes = 1 << 20
	newer := &survey.OwnWindow{Bytes: 1 << 20, AgeSec: 60}
	if note := h.applyDstWindow(m, "dst:tokyo", target, newer); note != "" || m.Nodes[1].WindowBytes != 1<<20 {
		t.Errorf("bench 2 min ago against connect 1 min ago: note %q, window %d; want connect's", note, m.Nodes[1].WindowBytes)
	}
}
