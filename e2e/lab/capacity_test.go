package lab_test

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/relaymesh/relaymesh/planner"
)

// TestLabPlanProbesCapacity: on plan-rates (nothing declared; relay links
// of 90 and 100 Mbit/s through the link emulator's rate limit), the first
// plan leans on r1 → r2 → r3 on its windows; asked, r2 and r3 measure
// their sends with packet trains, and the plan made again shows each relay
// segment's probed capacity: the link's rate as a TCP payload rate
// (× 1448/1500), within 10 %.
func TestLabPlanProbesCapacity(t *testing.T) {
	labBins(t)
	script := settle + `relayctl plan --dst server:8000 --bench-history "" --probe-capacity=false -o json > "$OUT/bound.json"
relayctl plan --dst server:8000 --bench-history "" -o json > "$OUT/probed.json"
`
	dir := inLab(t, filepath.Join("..", "..", "configs", "lab", "plan-rates.yaml"), script)
	type plan struct {
		planOut
		Segments []planner.Segment `json:"segments"`
		Notes    []string          `json:"notes"`
	}
	var bound, probed plan
	readJSON(t, filepath.Join(dir, "bound.json"), &bound)
	readJSON(t, filepath.Join(dir, "probed.json"), &probed)
	long := []string{"r1", "r2", "r3"}
	if !slices.Equal(bound.Chain, long) {
		t.Fatalf("plan without the probe: %v, want r1 → r2 → r3 on its windows; reasons %q", bound.Chain, bound.Reasons)
	}
	t.Logf("without the probe: %v predicted %.2f Mbit/s; with it: %v predicted %.2f; notes %q",
		bound.Chain, bound.PredictedDownBps/1e6, probed.Chain, probed.PredictedDownBps/1e6, probed.Notes)
	if !slices.Equal(probed.Chain, long) {
		t.Fatalf("plan with the probe: %v, want r1 → r2 → r3 still (it beats direct's 80 ms at ~31 Mbit/s); reasons %q", probed.Chain, probed.Reasons)
	}
	// A download: r2 sends to r1 over 90 Mbit/s, r3 to r2 over 100.
	want := map[[2]string]float64{{"r1", "r2"}: 90e6, {"r2", "r3"}: 100e6}
	for _, seg := range probed.Segments {
		link, ok := want[[2]string{seg.From, seg.To}]
		if !ok {
			continue
		}
		delete(want, [2]string{seg.From, seg.To})
		wantBps := link * 1448 / 1500
		t.Logf("%s→%s: %s sends, probed %.2f Mbit/s (link %.0f, as TCP payload %.2f)", seg.From, seg.To, seg.Sender, seg.LearntBps/1e6, link/1e6, wantBps/1e6)
		if seg.LearntSource != planner.LearntFromProbe || slices.Contains(seg.Unknown, planner.UnknownCapacity) {
			t.Errorf("%s→%s: learnt from %q, unknown %q; want the probe's figure", seg.From, seg.To, seg.LearntSource, seg.Unknown)
		}
		if math.Abs(seg.LearntBps-wantBps) > 0.1*wantBps {
			t.Errorf("%s→%s: probed %.2f Mbit/s, want %.2f ± 10 %%", seg.From, seg.To, seg.LearntBps/1e6, wantBps/1e6)
		}
	}
	if len(want) > 0 {
		t.Errorf("segments %v not in the plan", want)
	}
	if probed.PredictedDownBps > 90e6 {
		t.Errorf("predicted %.2f Mbit/s through a 90 Mbit/s relay link", probed.PredictedDownBps/1e6)
	}
}
