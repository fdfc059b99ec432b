package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/planner"
)

// historyLine is one bench's history line: a direct download of steadyBps
// whose one stream's client window was windowBytes.
func historyLine(t *testing.T, at time.Time, registry, target string, steadyBps float64, windowBytes uint32) string {
	t.Helper()
	b := benchJSON{Time: at, Destination: "tokyo", Target: target, Registry: registry, Streams: 1,
		Direct: &pathbench.Result{DownSteadyBps: steadyBps, DownStreams: []pathbench.Stream{{Bytes: 1 << 20, RTTMs: 90, RcvWindowBytes: windowBytes}}}}
	line, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(line)
}

// A bench's direct download bounds the direct path only when something
// other than the client's window held it, it is recent, and it was timed
// against the same destination in the same fleet; the newest such wins.
func TestDirectCapacityFromHistory(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const reg, target = "fleet:/etc/relaymesh/fleet.yaml", "srv-tokyo:8000"
	// A 1 MB window over the path's 60 ms allows 139.8 Mbit/s.
	const window = 1 << 20
	for _, tc := range []struct {
		name  string
		lines []string
		want  float64 // 0: none
	}{
		{"capacity-held", []string{historyLine(t, now.Add(-10*time.Minute), reg, target, 30e6, window)}, 30e6},
		{"window-held", []string{historyLine(t, now.Add(-10*time.Minute), reg, target, 120e6, window)}, 0},
		{"too old", []string{historyLine(t, now.Add(-2*time.Hour), reg, target, 30e6, window)}, 0},
		{"another fleet", []string{historyLine(t, now.Add(-time.Minute), "fleet:/tmp/lab/fleet.yaml", target, 30e6, window)}, 0},
		{"another destination", []string{historyLine(t, now.Add(-time.Minute), reg, "srv-paris:8000", 30e6, window)}, 0},
		{"no window sampled", []string{historyLine(t, now.Add(-time.Minute), reg, target, 30e6, 0)}, 0},
		{"the newest wins, in any order", []string{
			historyLine(t, now.Add(-5*time.Minute), reg, target, 40e6, window),
			historyLine(t, now.Add(-20*time.Minute), reg, target, 30e6, window),
			"not json: an older relayctl's line, or a torn write",
		}, 40e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ok, err := directCapacity(strings.NewReader(strings.Join(tc.lines, "\n")), reg, target, 60, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := map[bool]float64{true: h.bps}[ok]; got != tc.want {
				t.Errorf("bound %v bit/s (found %v), want %v", h.bps, ok, tc.want)
			}
		})
	}
}

// applyHistory puts the bench's rate on the direct pair as the
// destination's learnt sends, and the plan bounds direct by it and says
// where it came from.
func TestHistoryBoundsDirect(t *testing.T) {
	now := time.Now()
	const reg, target = "fleet:/etc/relaymesh/fleet.yaml", "srv-tokyo:8000"
	path := filepath.Join(t.TempDir(), "bench-history.jsonl")
	if err := os.WriteFile(path, []byte(historyLine(t, now.Add(-3*time.Minute), reg, target, 30e6, 1<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	matrix := func() *planner.Matrix {
		m, err := planner.ParseMatrix([]byte(`{"nodes": {"client": {"window_bytes": 1048576}, "dst:tokyo": {}, "r1": {"relay": true, "window_bytes": 1048576}},
			"rtt_ms": [["client", "dst:tokyo", 60], ["client", "r1", 30], ["r1", "dst:tokyo", 30]]}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	req := planner.Request{Client: "client", Destination: "dst:tokyo"}

	before, err := planner.Search(matrix(), req)
	if err != nil {
		t.Fatal(err)
	}
	m := matrix()
	note, err := applyHistory(m, path, reg, "client", target, "dst:tokyo", now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "reached 30.0 Mbit/s in relayctl bench 3m0s ago") {
		t.Errorf("note %q", note)
	}
	after, err := planner.Search(m, req)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Direct
	if before.Direct.PredictedBps <= 30e6 || d.PredictedBps != 30e6 {
		t.Fatalf("direct predicted %v bit/s before, %v after; want it bounded to 30 Mbit/s", before.Direct.PredictedBps, d.PredictedBps)
	}
	if s := d.Segments[0]; s.LimitedBy != "learnt" || s.LearntSource != planner.LearntFromBench || s.LearntAgeSec < 179 || s.LearntAgeSec > 181 {
		t.Errorf("direct segment %+v: want limited by the learnt rate, from bench, 180 s old", s)
	}
	if txt := planner.Explain(after); !strings.Contains(txt, "set by the rate dst:tokyo's traffic to client reached, 30.0 Mbit/s (timed by relayctl bench, 3 min ago)") {
		t.Errorf("the plan does not say where direct's bound came from:\n%s", txt)
	}

	// Without the file, or with --bench-history "", nothing changes.
	for _, p := range []string{"", filepath.Join(t.TempDir(), "none.jsonl")} {
		m := matrix()
		if note, err := applyHistory(m, p, reg, "client", target, "dst:tokyo", now); err != nil || note != "" {
			t.Errorf("history %q: note %q, error %v; want none", p, note, err)
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
