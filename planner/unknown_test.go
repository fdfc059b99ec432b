package planner

import (
	"slices"
	"strings"
	"testing"
)

// knownMatrix is client → r1 → srv beside a direct path, with every
// capacity declared and every loss learnt from traffic: nothing unknown.
func knownMatrix() *Matrix {
	return &Matrix{
		Nodes: []Node{
			{Name: "client", WindowBytes: 256 << 10, LimitBps: 100e6},
			{Name: "r1", Relay: true, WindowBytes: 4 << 20, LimitBps: 1e9},
			{Name: "srv", WindowBytes: 4 << 20, LimitBps: 1e9},
		},
		Pairs: []Pair{
			{A: "client", B: "r1", RTTMs: 10, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "r1", B: "srv", RTTMs: 40, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "client", B: "srv", RTTMs: 50, ALossSource: LearntFromBench, BLossSource: LearntFromBench},
		},
	}
}

func unknownOf(p Plan) [][]string {
	out := make([][]string, len(p.Segments))
	for i, seg := range p.Segments {
		out[i] = seg.Unknown
	}
	return out
}

func TestKnownInputsArePoints(t *testing.T) {
	r := mustSearch(t, knownMatrix(), Request{})
	for _, p := range []Plan{r.Best, r.Direct} {
		if p.Bound || slices.ContainsFunc(unknownOf(p), func(u []string) bool { return len(u) > 0 }) {
			t.Errorf("plan %v: bound %v, unknown %q; want a point with nothing unknown", p.Chain, p.Bound, unknownOf(p))
		}
	}
	if hasReason(r.Best.Reasons, "rests on") || hasReason(r.Best.Reasons, "upper bound") {
		t.Errorf("reasons %q speak of unknowns", r.Best.Reasons)
	}
}

// TestUnknownCapacityIsABound: nothing declared, nothing learnt: every
// segment's capacity is unknown, the prediction is an upper bound, and the
// pick says what it needs of each segment to beat direct.
func TestUnknownCapacityIsABound(t *testing.T) {
	m := knownMatrix()
	for i := range m.Nodes {
		m.Nodes[i].LimitBps = 0
	}
	r := mustSearch(t, m, Request{})
	if !slices.Equal(r.Best.Chain, []string{"r1"}) {
		t.Fatalf("best %v, want [r1]", r.Best.Chain)
	}
	want := [][]string{{UnknownCapacity}, {UnknownCapacity}}
	if got := unknownOf(r.Best); !r.Best.Bound || !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("bound %v, unknown %q; want a bound with %q", r.Best.Bound, got, want)
	}
	if !r.Direct.Bound {
		t.Errorf("direct with its capacity unknown is not a bound")
	}
	// Direct is the client's 256 KiB window over 50 ms: 41.9 Mbit/s; the
	// chain must carry 10 % more, before one relay's 2 % overhead.
	need := fmtBps(r.Direct.PredictedBps * 1.1 / 0.98)
	if !hasReason(r.Best.Reasons, "the pick rests on what is not known", "client→r1, r1→srv each carry at least "+need) {
		t.Errorf("no reason naming the bar %s in %q", need, r.Best.Reasons)
	}
	if !hasReason(r.Best.Reasons, "an upper bound", "the capacity of client→r1, r1→srv") {
		t.Errorf("no upper-bound reason in %q", r.Best.Reasons)
	}
	if out := Explain(r); !strings.Contains(out, "predicted ≤ ") {
		t.Errorf("Explain does not say ≤:\n%s", out)
	}

	// A rate learnt for the sender makes that segment's capacity known:
	// r1's sends to the client (a download's first segment).
	m.Pairs[0].BSendBps = 80e6
	r = mustSearch(t, m, Request{})
	if got := r.Best.Segments[0].Unknown; slices.Contains(got, UnknownCapacity) {
		t.Errorf("client→r1 with r1's rate learnt: unknown %q", got)
	}
	if got := r.Best.Segments[1].Unknown; !slices.Contains(got, UnknownCapacity) {
		t.Errorf("r1→srv, nothing learnt: unknown %q, want capacity", got)
	}
}

// TestUnknownDestinationWindow: on an upload the destination receives the
// last segment; its window unknown, the plan is a bound and says so. On a
// download the destination's window does not count.
func TestUnknownDestinationWindow(t *testing.T) {
	m := knownMatrix()
	m.Nodes[2].WindowBytes = 0
	up := mustSearch(t, m, Request{Direction: Up})
	last := up.Best.Segments[len(up.Best.Segments)-1]
	if last.Receiver != "srv" || !last.WindowAssumed || !slices.Equal(last.Unknown, []string{UnknownWindow}) || !up.Best.Bound {
		t.Fatalf("upload's last segment: receiver %s, assumed %v, unknown %q, bound %v; want srv's window unknown and a bound",
			last.Receiver, last.WindowAssumed, last.Unknown, up.Best.Bound)
	}
	if !hasReason(up.Best.Reasons, "window unknown, assumed 3 MiB: srv") {
		t.Errorf("reasons %q do not say srv's window is assumed", up.Best.Reasons)
	}
	if up.Direct.Segments[0].Receiver != "srv" || !up.Direct.Bound {
		t.Errorf("direct upload: receiver %s, bound %v; want srv and a bound", up.Direct.Segments[0].Receiver, up.Direct.Bound)
	}
	down := mustSearch(t, m, Request{})
	if down.Best.Bound || down.Direct.Bound {
		t.Errorf("download: bound %v (best), %v (direct); the destination's window does not count", down.Best.Bound, down.Direct.Bound)
	}
}

// TestUnknownLoss: a 0 from the probes alone is unknown for a loss-based
// sender, not for a BBR one (the loss probes miss does not bind it); a
// loss learnt from traffic, even 0, is known.
func TestUnknownLoss(t *testing.T) {
	m := knownMatrix()
	m.Pairs[1].ALossSource, m.Pairs[1].BLossSource = "", "" // r1–srv: probes only
	r := mustSearch(t, m, Request{})
	seg := r.Best.Segments[1]
	if !slices.Equal(seg.Unknown, []string{UnknownLoss}) || !r.Best.Bound {
		t.Fatalf("r1→srv, loss from probes: unknown %q, bound %v; want loss and a bound", seg.Unknown, r.Best.Bound)
	}
	if !hasReason(r.Best.Reasons, "the loss of r1→srv") {
		t.Errorf("reasons %q do not name r1→srv's loss", r.Best.Reasons)
	}
	// The download's sender on r1→srv is srv.
	m.Nodes[2].CongestionControl = "bbr"
	if r := mustSearch(t, m, Request{}); len(r.Best.Segments[1].Unknown) > 0 || r.Best.Bound {
		t.Errorf("BBR sender: unknown %q, bound %v; want nothing unknown", r.Best.Segments[1].Unknown, r.Best.Bound)
	}
	m.Nodes[2].CongestionControl = ""
	m.Pairs[1].Loss = 0.02 // the probes saw loss: a measurement, however coarse
	if r := mustSearch(t, m, Request{}); slices.Contains(r.Alternatives[0].Segments[1].Unknown, UnknownLoss) {
		t.Errorf("loss 2 %% from probes: unknown %q", r.Alternatives[0].Segments[1].Unknown)
	}
}

// TestAwaiting: relays usable but no chain connects: direct, for want of
// measurements, and the result says which.
func TestAwaiting(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "a", Relay: true}, {Name: "b", Relay: true}, {Name: "srv"}},
		Pairs: []Pair{{A: "client", B: "srv", RTTMs: 100}},
	}
	r := mustSearch(t, m, Request{})
	if want := []string{"no RTT from client to any of the 2 relays", "no relay's RTT to srv"}; !slices.Equal(r.Awaiting, want) {
		t.Fatalf("awaiting %q, want %q", r.Awaiting, want)
	}
	if !hasReason(r.Best.Reasons, "direct wins: no chain", "waiting for measurements: no RTT from client") {
		t.Errorf("reasons %q", r.Best.Reasons)
	}
	// The client reaches a, b reaches srv, nothing between them.
	m.Pairs = append(m.Pairs, Pair{A: "client", B: "a", RTTMs: 20}, Pair{A: "b", B: "srv", RTTMs: 20})
	r = mustSearch(t, m, Request{})
	if want := []string{"no RTT between the relays client reaches (a) and those that reach srv (b)"}; !slices.Equal(r.Awaiting, want) {
		t.Fatalf("awaiting %q, want %q", r.Awaiting, want)
	}
	if r := mustSearch(t, m, Request{Constraints: Constraints{MaxHops: 1}}); len(r.Awaiting) != 1 || !strings.Contains(r.Awaiting[0], "no relay with both") {
		t.Errorf("one hop at most: awaiting %q, want a relay with both ends", r.Awaiting)
	}
	// A pair between two other relays does not hide the missing one.
	m.Nodes = append(m.Nodes, Node{Name: "c", Relay: true}, Node{Name: "d", Relay: true})
	m.Pairs = append(m.Pairs, Pair{A: "c", B: "d", RTTMs: 5})
	if r := mustSearch(t, m, Request{}); len(r.Awaiting) != 1 || !strings.Contains(r.Awaiting[0], "no RTT between the relays client reaches (a)") {
		t.Errorf("with c–d measured: awaiting %q", r.Awaiting)
	}
	m.Nodes, m.Pairs = m.Nodes[:4], m.Pairs[:len(m.Pairs)-1]
	m.Pairs = append(m.Pairs, Pair{A: "a", B: "b", RTTMs: 40})
	if r := mustSearch(t, m, Request{}); len(r.Awaiting) > 0 || len(r.Best.Chain) == 0 {
		t.Errorf("every pair measured: awaiting %q, best %v", r.Awaiting, r.Best.Chain)
	}
	// A relay measured unreachable from the destination is an answer.
	if r := mustSearch(t, &Matrix{Nodes: []Node{{Name: "client"}, {Name: "a", Relay: true}, {Name: "srv"}},
		Pairs: []Pair{{A: "client", B: "srv", RTTMs: 100}, {A: "client", B: "a", RTTMs: 20}, {A: "a", B: "srv", RTTMs: 20, Loss: 1}}}, Request{}); len(r.Awaiting) > 0 {
		t.Errorf("a–srv unreachable: awaiting %q, want nothing", r.Awaiting)
	}
	// A chain that loses on its merits awaits nothing.
	m.Pairs = []Pair{{A: "client", B: "srv", RTTMs: 10}, {A: "client", B: "a", RTTMs: 20}, {A: "a", B: "srv", RTTMs: 20}}
	if r := mustSearch(t, m, Request{}); len(r.Awaiting) > 0 || len(r.Best.Chain) > 0 {
		t.Errorf("a detour: awaiting %q, best %v; want direct on its merits", r.Awaiting, r.Best.Chain)
	}
}

// TestMeasuredPath: a timed transfer over a plan's path lowers its
// prediction to what it moved, and makes it a point; a download's
// measurement says nothing of an upload.
func TestMeasuredPath(t *testing.T) {
	m := knownMatrix()
	for i := range m.Nodes {
		m.Nodes[i].LimitBps = 0
	}
	req := Request{Measured: []Measurement{
		{Chain: []string{"r1"}, Direction: Down, SteadyBps: 30e6, AgeSec: 60},
		{Chain: []string{"r1"}, Direction: Down, SteadyBps: 20e6, AgeSec: 600}, // older: not used
		{Chain: []string{}, Direction: Down, SteadyBps: 35e6, AgeSec: 30},
	}}
	r := mustSearch(t, m, req)
	if len(r.Best.Chain) != 0 || r.Best.PredictedBps != 35e6 || r.Best.Bound {
		t.Fatalf("best %v at %.1f Mbit/s, bound %v: want direct at its measured 35, a point", r.Best.Chain, r.Best.PredictedBps/1e6, r.Best.Bound)
	}
	if len(r.Alternatives) == 0 || r.Alternatives[0].PredictedBps != 30e6 || r.Alternatives[0].Bound || len(r.Alternatives[0].Measured) != 1 {
		t.Fatalf("alternatives %+v: want r1 at its measured 30 Mbit/s, a point", r.Alternatives)
	}
	if !hasReason(r.Alternatives[0].Reasons, "measured by relayctl bench: down 30.0 Mbit/s steady 60 s ago (the model alone: 206 Mbit/s)") {
		t.Errorf("reasons %q", r.Alternatives[0].Reasons)
	}
	req.Direction = Up
	if r := mustSearch(t, m, req); len(r.Best.Chain) == 0 || !r.Best.Bound || len(r.Best.Measured) != 0 {
		t.Errorf("upload: best %v, bound %v, measured %v: a download's measurement must not count", r.Best.Chain, r.Best.Bound, r.Best.Measured)
	}
	if _, err := Search(m, Request{Client: "client", Destination: "srv", Measured: []Measurement{{Direction: Down}}}); err == nil {
		t.Error("a measurement of 0 bit/s accepted")
	}
}

// TestMeasuredChainKeptOverUntried: a chain measured to beat direct is not
// displaced by an untried one whose prediction is a bound; it is by one
// whose inputs are all known.
func TestMeasuredChainKeptOverUntried(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client", WindowBytes: 256 << 10}, {Name: "r1", Relay: true, WindowBytes: 4 << 20},
			{Name: "r2", Relay: true, WindowBytes: 4 << 20}, {Name: "srv", WindowBytes: 4 << 20}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 200},
			{A: "client", B: "r1", RTTMs: 60}, {A: "r1", B: "srv", RTTMs: 140},
			{A: "client", B: "r2", RTTMs: 20}, {A: "r2", B: "srv", RTTMs: 180},
		},
	}
	if r := mustSearch(t, m, Request{}); !slices.Equal(r.Best.Chain, []string{"r2"}) {
		t.Fatalf("nothing measured: best %v, want r2 (the shortest client segment)", r.Best.Chain)
	}
	// Direct moves 10.5 Mbit/s on the client's window; r1 was measured
	// at 20, r2 never.
	req := Request{Measured: []Measurement{{Chain: []string{"r1"}, Direction: Down, SteadyBps: 20e6, AgeSec: 60}}}
	r := mustSearch(t, m, req)
	if !slices.Equal(r.Best.Chain, []string{"r1"}) || r.Best.Bound {
		t.Fatalf("best %v (bound %v), want the measured r1", r.Best.Chain, r.Best.Bound)
	}
	if !slices.Equal(r.KeptOver, []string{"r2"}) {
		t.Errorf("kept over %v, want r2", r.KeptOver)
	}
	if !hasReason(r.Best.Reasons, "kept the measured chain via r1", "untried chain via r2", "relayctl bench --chain r2") {
		t.Errorf("best's reasons %q", r.Best.Reasons)
	}
	if len(r.Alternatives) == 0 || !slices.Equal(r.Alternatives[0].Chain, []string{"r2"}) || !strings.HasPrefix(r.Alternatives[0].Reasons[0], "untried: predicts ≤ ") {
		t.Errorf("alternatives %+v: want r2, untried", r.Alternatives)
	}
	// A measured chain that does not beat direct is not kept.
	req.Measured[0].SteadyBps = 11e6
	if r := mustSearch(t, m, req); !slices.Equal(r.Best.Chain, []string{"r2"}) {
		t.Errorf("r1 measured at 1.05× direct: best %v, want r2", r.Best.Chain)
	}
	// Direct measured too: it is kept ahead of the untried r2.
	req.Measured = append(req.Measured, Measurement{Chain: []string{}, Direction: Down, SteadyBps: 10.5e6, AgeSec: 30})
	r = mustSearch(t, m, req)
	if len(r.Best.Chain) != 0 || !hasReason(r.Best.Reasons, "direct wins: kept the measured direct path (measured at 10.5 Mbit/s, predicted 10.5 Mbit/s) ahead of the untried chain via r2") {
		t.Errorf("direct measured, r1 measured below the minimum gain: best %v, reasons %q; want direct, kept", r.Best.Chain, r.Best.Reasons)
	}
	if i := slices.IndexFunc(r.Alternatives, func(p Plan) bool { return slices.Equal(p.Chain, []string{"r2"}) }); i < 0 ||
		!strings.HasPrefix(r.Alternatives[i].Reasons[0], "untried: predicts ≤ ") || !strings.Contains(r.Alternatives[i].Reasons[0], "the direct path was measured at 10.5 Mbit/s") {
		t.Errorf("alternatives %+v: want r2, untried", r.Alternatives)
	}
	req.Measured = req.Measured[:1]
	// r2 fully known (capacities declared, loss learnt) wins on its merits.
	req.Measured[0].SteadyBps = 20e6
	for i := range m.Nodes {
		m.Nodes[i].LimitBps = 1e9
	}
	for i := range m.Pairs {
		m.Pairs[i].ALossSource, m.Pairs[i].BLossSource = LearntFromTunnels, LearntFromTunnels
	}
	if r := mustSearch(t, m, req); !slices.Equal(r.Best.Chain, []string{"r2"}) || r.Best.Bound {
		t.Errorf("r2 known: best %v (bound %v), want r2, a point", r.Best.Chain, r.Best.Bound)
	}
}

// TestUnknownsEachWay: a loss is known for the way whose sender learnt it;
// planning for both ways counts either way's unknowns.
func TestUnknownsEachWay(t *testing.T) {
	m := knownMatrix()
	m.Pairs[1].BLossSource = "" // r1–srv: r1 learnt its sends' loss, srv's nobody did
	if r := mustSearch(t, m, Request{}); !slices.Equal(r.Best.Segments[1].Unknown, []string{UnknownLoss}) {
		t.Errorf("download (srv sends on r1→srv): unknown %q, want loss", r.Best.Segments[1].Unknown)
	}
	up := mustSearch(t, m, Request{Direction: Up})
	viaR1 := slices.Concat([]Plan{up.Best}, up.Alternatives)
	i := slices.IndexFunc(viaR1, func(p Plan) bool { return slices.Equal(p.Chain, []string{"r1"}) })
	if i < 0 || len(viaR1[i].Segments[1].Unknown) > 0 {
		t.Errorf("upload (r1 sends on r1→srv): plans %+v, want r1's second segment with nothing unknown", viaR1)
	}
	// Both: direct's download rests on the client's assumed window even
	// where the upload is the slower way.
	m = knownMatrix()
	m.Nodes[0].WindowBytes = 0
	r := mustSearch(t, m, Request{Direction: Both})
	if !r.Direct.Bound || !slices.Contains(r.Direct.Segments[0].Unknown, UnknownWindow) {
		t.Errorf("both ways, the client's window unknown: direct bound %v, unknown %q", r.Direct.Bound, r.Direct.Segments[0].Unknown)
	}
}
