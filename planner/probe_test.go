package planner

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// probedMatrix is client → r1 → r2 → srv beside a direct path, with large
// windows and nothing declared: without capacities, more relays always
// look faster.
func probedMatrix() *Matrix {
	return &Matrix{
		Nodes: []Node{
			{Name: "client", WindowBytes: 8 << 20},
			{Name: "r1", Relay: true, WindowBytes: 8 << 20},
			{Name: "r2", Relay: true, WindowBytes: 8 << 20},
			{Name: "srv", WindowBytes: 8 << 20},
		},
		Pairs: []Pair{
			{A: "client", B: "r1", RTTMs: 5},
			{A: "r1", B: "r2", RTTMs: 60},
			{A: "r2", B: "srv", RTTMs: 5},
			{A: "client", B: "srv", RTTMs: 72},
		},
	}
}

// A relay's capacity probe of its sends makes that segment's capacity
// known: the segment is no longer UnknownCapacity, its rate is held to the
// probed figure, and the table, the reasons and the JSON say it was
// probed, by whom and how long ago.
func TestProbedCapacity(t *testing.T) {
	m := probedMatrix()
	before := mustSearch(t, m, Request{Constraints: Constraints{Include: []string{"r1", "r2"}}})
	seg := before.Best.Segments[1]
	if seg.From != "r1" || seg.To != "r2" || !slices.Contains(seg.Unknown, UnknownCapacity) {
		t.Fatalf("segment %s→%s unknown %q; want r1→r2 with its capacity unknown", seg.From, seg.To, seg.Unknown)
	}
	if seg.RateBps < 500e6 {
		t.Fatalf("r1→r2 unprobed predicts %s; the test wants windows that promise far more than the link", fmtBps(seg.RateBps))
	}

	// A download: r2 sends to r1. Its probe measured 90 Mbit/s ten
	// minutes ago.
	m.Pairs[1].BSendBps, m.Pairs[1].BSendAgeSec, m.Pairs[1].BSendSource = 90e6, 600, LearntFromProbe
	r := mustSearch(t, m, Request{Constraints: Constraints{Include: []string{"r1", "r2"}}})
	if !slices.Equal(before.Best.Chain, []string{"r1", "r2"}) || len(r.Best.Chain) != 0 {
		t.Errorf("best %v before the probe, %v after; want [r1 r2], then direct: the probed link is slower than direct", before.Best.Chain, r.Best.Chain)
	}
	i := slices.IndexFunc(r.Alternatives, func(p Plan) bool { return slices.Equal(p.Chain, []string{"r1", "r2"}) })
	if i < 0 {
		t.Fatalf("no plan through r1, r2 among %d alternatives", len(r.Alternatives))
	}
	probed := r.Alternatives[i]
	seg = probed.Segments[1]
	if slices.Contains(seg.Unknown, UnknownCapacity) {
		t.Errorf("r1→r2 still unknown %q after r2's probe", seg.Unknown)
	}
	if seg.LearntSource != LearntFromProbe || seg.LearntBps != 90e6 || seg.LearntAgeSec != 600 || seg.LimitedBy != limitedByLearnt || seg.RateBps != 90e6 {
		t.Errorf("r1→r2: learnt %v from %q %v s ago, limited by %s at %v; want 9e7 from probe, 600 s, learnt, 9e7",
			seg.LearntBps, seg.LearntSource, seg.LearntAgeSec, seg.LimitedBy, seg.RateBps)
	}
	if probed.PredictedBps > 90e6 {
		t.Errorf("predicted %s through a 90 Mbit/s segment", fmtBps(probed.PredictedBps))
	}
	if !hasReason(probed.Reasons, "the capacity r2's probe measured towards r1, 90.0 Mbit/s (trains of datagrams, 10 min ago)") {
		t.Errorf("no reason naming the probe in %q", probed.Reasons)
	}
	// Direct a detour of 1 s: the probed chain wins, and the table says
	// where its figure came from.
	m.Pairs[3].RTTMs = 1000
	if r := mustSearch(t, m, Request{}); !slices.Equal(r.Best.Chain, []string{"r1", "r2"}) {
		t.Errorf("best %v past a 1 s direct path, want [r1 r2]", r.Best.Chain)
	} else if out := Explain(r); !strings.Contains(out, "90.0 Mbit/s probed (r2, 10 min ago)") {
		t.Errorf("the table does not say the capacity was probed:\n%s", out)
	}
	js, err := json.Marshal(seg)
	if err != nil || !strings.Contains(string(js), `"learnt_source":"probe"`) {
		t.Errorf("segment JSON %s (%v) has no learnt_source probe", js, err)
	}

	// An upload: r1 sends; r2's probe says nothing of it.
	up := mustSearch(t, m, Request{Direction: Up, Constraints: Constraints{Include: []string{"r1", "r2"}}})
	if seg := up.Best.Segments[1]; !slices.Contains(seg.Unknown, UnknownCapacity) || seg.LearntBps != 0 {
		t.Errorf("upload r1→r2: unknown %q, learnt %v; r2's probe of its own sends must not bound r1's", seg.Unknown, seg.LearntBps)
	}
}

// A matrix file carries the probe as a send source, and only there.
func TestProbeSourceInMatrix(t *testing.T) {
	const base = `{"nodes": {"a": {"relay": true}, "b": {"relay": true}},
	"rtt_ms": [{"a": "a", "b": "b", "rtt_ms": 10, "a_send_bps": 9e7, %s}]}`
	if _, err := ParseMatrix([]byte(strings.Replace(base, "%s", `"a_send_source": "probe"`, 1))); err != nil {
		t.Errorf("a_send_source probe refused: %v", err)
	}
	if _, err := ParseMatrix([]byte(strings.Replace(base, "%s", `"a_loss_source": "probe"`, 1))); err == nil {
		t.Error("a_loss_source probe accepted: a capacity probe measures no loss")
	}
}
