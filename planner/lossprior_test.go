package planner

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

// lossyFleet is a fleet after a bench through r1, r2, r3: the relays learnt
// 0.5 % loss on both 30 ms links they carried. Beside that chain, r4 is one
// relay behind an 80 ms client segment nobody has measured; direct is
// 90 ms. Every window is 3 MiB and every sender CUBIC.
func lossyFleet() *Matrix {
	return &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "r1", Relay: true}, {Name: "r2", Relay: true}, {Name: "r3", Relay: true},
			{Name: "r4", Relay: true}, {Name: "srv"}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 90},
			{A: "client", B: "r1", RTTMs: 10},
			{A: "r1", B: "r2", RTTMs: 30, Loss: 0.005, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "r2", B: "r3", RTTMs: 30, Loss: 0.005, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "r3", B: "srv", RTTMs: 10},
			{A: "client", B: "r4", RTTMs: 80},
			{A: "r4", B: "srv", RTTMs: 10},
		},
	}
}

// TestLossPrior: a segment whose loss nobody measured gets the fleet's loss
// per ms of RTT, at most the worst measured, marked a prior; the untried
// r4, clean only because nobody measured its 80 ms segment, no longer
// outranks the chain whose loss is known.
func TestLossPrior(t *testing.T) {
	r := mustSearch(t, lossyFleet(), Request{})
	wantPerMs := 0.01 / 60.0
	if lp := r.LossPrior; math.Abs(lp.PerRTTMs-wantPerMs) > 1e-12 || lp.MaxLoss != 0.005 || lp.Segments != 2 || lp.Lossy != 2 {
		t.Fatalf("loss prior %+v, want %.3g per ms, at most 0.5 %%, from 2 lossy segments", lp, wantPerMs)
	}
	if !slices.Equal(r.Best.Chain, []string{"r1", "r2", "r3"}) {
		t.Fatalf("best %v, want the chain whose loss was learnt, r1, r2, r3; reasons %q", r.Best.Chain, r.Best.Reasons)
	}
	i := slices.IndexFunc(r.Alternatives, func(p Plan) bool { return slices.Equal(p.Chain, []string{"r4"}) })
	if i < 0 {
		t.Fatalf("alternatives %+v: want r4 among them", r.Alternatives)
	}
	r4 := r.Alternatives[i]
	first := r4.Segments[0] // r4 → client: 80 ms × the prior, capped at 0.5 %
	if first.LossSource != LossFromPrior || first.Loss != 0.005 || slices.Contains(first.Unknown, UnknownLoss) || first.LimitedBy != limitedByLoss {
		t.Fatalf("r4's client segment: loss %v from %q, unknown %q, limited by %s; want the 0.5 %% prior, not unknown, the bottleneck",
			first.Loss, first.LossSource, first.Unknown, first.LimitedBy)
	}
	last := r4.Segments[1] // srv → r4: 10 ms × the prior
	if last.LossSource != LossFromPrior || math.Abs(last.Loss-10*wantPerMs) > 1e-12 {
		t.Errorf("r4's server segment: loss %v from %q, want %.3g, a prior", last.Loss, last.LossSource, 10*wantPerMs)
	}
	if r.Direct.Segments[0].LossSource != LossFromPrior {
		t.Errorf("direct's loss from %q, want the prior", r.Direct.Segments[0].LossSource)
	}
	// A learnt loss stays what it is.
	if seg := r.Best.Segments[1]; seg.LossSource != LearntFromTunnels || seg.Loss != 0.005 {
		t.Errorf("r1→r2: loss %v from %q, want the learnt 0.5 %%", seg.Loss, seg.LossSource)
	}
	if !hasReason(r.Best.Reasons, "loss is a prior, not a measurement, on client→r1") {
		t.Errorf("best's reasons %q do not name its prior", r.Best.Reasons)
	}
	if !hasReason(r.Notes, "loss prior: a segment whose loss nobody measured gets 0.017% per ms of its RTT (at most 0.5%), the loss of the 2 segments") {
		t.Errorf("notes %q", r.Notes)
	}
	out := Explain(r)
	if !strings.Contains(out, "0.2% (prior)") {
		t.Errorf("Explain's table does not show client→r1's prior:\n%s", out)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); !strings.Contains(s, `"loss_source":"prior"`) || !strings.Contains(s, `"loss_prior":{"loss_per_rtt_ms":`) {
		t.Errorf("JSON without the prior: %s", s)
	}
}

// TestLossPriorNeedsEvidence: no prior from one lossy segment (that link's
// own), from segments measured clean, or from nothing: the loss stays
// unknown, the plan a bound, as without a prior, and the notes say why.
func TestLossPriorNeedsEvidence(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m *Matrix)
		note string
	}{
		{"one lossy segment", func(m *Matrix) { m.Pairs[3].Loss, m.Pairs[3].ALossSource, m.Pairs[3].BLossSource = 0, "", "" },
			"no loss prior: 1 of the 1 segment measured lost packets (a prior needs 2"},
		// A clean segment measured beside it (a client's segment to its
		// relay) says nothing of the links beyond.
		{"one lossy segment beside a clean one", func(m *Matrix) { m.Pairs[3].Loss = 0 },
			"no loss prior: 1 of the 2 segments measured lost packets (a prior needs 2"},
		{"measured clean", func(m *Matrix) { m.Pairs[2].Loss, m.Pairs[3].Loss = 0, 0 },
			"no loss prior: the 2 segments whose loss was measured lost nothing"},
		{"nothing measured", func(m *Matrix) {
			for i := range m.Pairs {
				m.Pairs[i].Loss, m.Pairs[i].ALossSource, m.Pairs[i].BLossSource = 0, "", ""
			}
		}, "no loss measured anywhere in the fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := lossyFleet()
			tc.edit(m)
			r := mustSearch(t, m, Request{})
			if r.LossPrior.PerRTTMs != 0 || !hasReason(r.Notes, tc.note) {
				t.Errorf("prior %+v, notes %q; want none, and a note %q", r.LossPrior, r.Notes, tc.note)
			}
			r4 := planVia(t, r, "r4")
			if seg := r4.Segments[0]; !r4.Bound || !slices.Contains(seg.Unknown, UnknownLoss) || seg.LossSource != "" || seg.Loss != 0 {
				t.Errorf("via r4: bound %v, first segment unknown %q, loss %v from %q; want its loss unknown, a bound",
					r4.Bound, seg.Unknown, seg.Loss, seg.LossSource)
			}
			if tc.name == "one lossy segment" && !slices.Equal(r.Best.Chain, []string{"r4"}) {
				t.Errorf("best %v: without a prior the untried r4 outranks the chain whose loss was learnt", r.Best.Chain)
			}
		})
	}
}

// TestLossPriorSkipsBBR: a BBR sender is not bound by the loss probes
// miss, so it gets no prior, and an upload's first segment's sender is the
// client: its prior follows the direction.
func TestLossPriorSkipsBBR(t *testing.T) {
	m := lossyFleet()
	m.Nodes[4].CongestionControl = "bbr" // r4 sends to the client on a download
	r := mustSearch(t, m, Request{})
	if seg := planVia(t, r, "r4").Segments[0]; seg.LossSource != "" || seg.Loss != 0 || slices.Contains(seg.Unknown, UnknownLoss) {
		t.Errorf("r4 (BBR) → client: loss %v from %q, unknown %q; want no prior, and its loss not unknown", seg.Loss, seg.LossSource, seg.Unknown)
	}
	up := mustSearch(t, m, Request{Direction: Up})
	if seg := up.Direct.Segments[0]; seg.Sender != "client" || seg.LossSource != LossFromPrior {
		t.Errorf("upload, direct: sender %s, loss from %q; want the client's sends, a prior", seg.Sender, seg.LossSource)
	}
}

// planVia is r's plan (best or alternative) through chain.
func planVia(t *testing.T, r *Result, chain ...string) Plan {
	t.Helper()
	for _, p := range slices.Concat([]Plan{r.Best}, r.Alternatives) {
		if slices.Equal(p.Chain, chain) {
			return p
		}
	}
	t.Fatalf("no plan via %v: best %v, alternatives %d", chain, r.Best.Chain, len(r.Alternatives))
	return Plan{}
}

// TestLossPriorOneLossyLink is plan-lossy-cubic after a transfer through
// r1 → r2 taught the relays its 1 % loss: the only link whose loss anyone
// measured is the lossy one. A prior from it would price the clean
// r3 → r4 and direct as lossy too; there is none, and the plan leaves
// r1 → r2 for r3 → r4, as the lab measures it must.
func TestLossPriorOneLossyLink(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client", WindowBytes: 157286, CongestionControl: "cubic"},
			{Name: "r1", Relay: true, LimitBps: 50e6, CongestionControl: "cubic"}, {Name: "r2", Relay: true, LimitBps: 50e6, CongestionControl: "cubic"},
			{Name: "r3", Relay: true, LimitBps: 30e6, CongestionControl: "cubic"}, {Name: "r4", Relay: true, LimitBps: 30e6, CongestionControl: "cubic"},
			{Name: "srv"}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 100},
			{A: "client", B: "r1", RTTMs: 10}, {A: "r1", B: "r2", RTTMs: 40, Loss: 0.01, BLossSource: LearntFromTunnels}, {A: "r2", B: "srv", RTTMs: 5},
			{A: "client", B: "r3", RTTMs: 10}, {A: "r3", B: "r4", RTTMs: 70}, {A: "r4", B: "srv", RTTMs: 5},
		},
	}
	r := mustSearch(t, m, Request{})
	if r.LossPrior.PerRTTMs != 0 || r.LossPrior.Segments != 1 {
		t.Errorf("loss prior %+v: want none, from 1 segment", r.LossPrior)
	}
	if !slices.Equal(r.Best.Chain, []string{"r3", "r4"}) {
		t.Errorf("best %v, want r3, r4; reasons %q", r.Best.Chain, r.Best.Reasons)
	}
}
