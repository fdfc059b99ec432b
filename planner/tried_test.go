package planner

import (
	"slices"
	"strings"
	"testing"
)

// triedFleet: direct is 200 ms on the client's 256 KiB window (10.5
// Mbit/s); via r1 60 + 140 ms, via r2 20 + 180 ms. On windows alone r2
// promises the most.
func triedFleet() *Matrix {
	return &Matrix{
		Nodes: []Node{{Name: "client", WindowBytes: 256 << 10}, {Name: "r1", Relay: true, WindowBytes: 4 << 20},
			{Name: "r2", Relay: true, WindowBytes: 4 << 20}, {Name: "srv", WindowBytes: 4 << 20}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 200},
			{A: "client", B: "r1", RTTMs: 60}, {A: "r1", B: "srv", RTTMs: 140},
			{A: "client", B: "r2", RTTMs: 20}, {A: "r2", B: "srv", RTTMs: 180},
		},
	}
}

// TestTriedChainKeptWithoutHistory: no bench history, but r1's traffic
// taught the rate its sends to the client reach (20 Mbit/s), which holds
// r1's bottleneck: r1 is tried and beats direct, so the untried r2, ahead
// only on what nobody measured, does not displace it.
func TestTriedChainKeptWithoutHistory(t *testing.T) {
	m := triedFleet()
	m.Pairs[1].BSendBps, m.Pairs[1].BSendAgeSec = 20e6, 30 // r1 → client
	r := mustSearch(t, m, Request{})
	if !slices.Equal(r.Best.Chain, []string{"r1"}) || !slices.Equal(r.KeptOver, []string{"r2"}) || r.Exploring {
		t.Fatalf("best %v, kept over %v, exploring %v; want r1 kept over r2; reasons %q", r.Best.Chain, r.KeptOver, r.Exploring, r.Best.Reasons)
	}
	if !hasReason(r.Best.Reasons, "kept the tried chain via r1 (held at 20.0 Mbit/s on client→r1 by the rate its traffic was learnt to reach", "ahead of the untried chain via r2", "relayctl bench --chain r2") {
		t.Errorf("best's reasons %q", r.Best.Reasons)
	}
	if p := planVia(t, r, "r2"); !strings.HasPrefix(p.Reasons[0], "untried: predicts ≤ ") || !strings.Contains(p.Reasons[0], "the chain via r1 was held at 20.0 Mbit/s") {
		t.Errorf("r2's reason %q", p.Reasons[0])
	}
	// Learnt below direct's minimum gain, r1 cannot be kept: the plan
	// moves onto r2, and says it is exploring.
	m.Pairs[1].BSendBps = 11e6
	r = mustSearch(t, m, Request{})
	if !slices.Equal(r.Best.Chain, []string{"r2"}) || len(r.KeptOver) > 0 || !r.Exploring {
		t.Fatalf("r1 learnt at 11 Mbit/s: best %v, kept over %v, exploring %v; want r2, exploring", r.Best.Chain, r.KeptOver, r.Exploring)
	}
	if !hasReason(r.Best.Reasons, "exploring: the chain via r2 is untried", "ahead of the tried chain via r1, held at 11.0 Mbit/s on client→r1", "relayctl bench --chain r2") {
		t.Errorf("best's reasons %q", r.Best.Reasons)
	}
	// Nothing tried: r2 wins on windows, and nothing says it explores.
	m.Pairs[1].BSendBps = 0
	if r := mustSearch(t, m, Request{}); !slices.Equal(r.Best.Chain, []string{"r2"}) || r.Exploring || hasReason(r.Best.Reasons, "exploring") {
		t.Errorf("nothing tried: best %v, exploring %v", r.Best.Chain, r.Exploring)
	}
}

// TestTriedDirectKept: direct's loss learnt from a timed transfer holds
// it: direct is tried, and an untried chain that beats it only on what
// nobody measured does not displace it.
func TestTriedDirectKept(t *testing.T) {
	m := triedFleet()
	m.Pairs[0].Loss, m.Pairs[0].ALossSource, m.Pairs[0].BLossSource = 0.002, LearntFromBench, LearntFromBench
	r := mustSearch(t, m, Request{})
	if len(r.Best.Chain) != 0 || !slices.Equal(r.KeptOver, []string{"r2"}) {
		t.Fatalf("best %v, kept over %v; want direct kept over r2; reasons %q", r.Best.Chain, r.KeptOver, r.Best.Reasons)
	}
	if !hasReason(r.Best.Reasons, "direct wins: kept the tried direct path (held at ", "on client→srv by the 0.2% loss its traffic met") {
		t.Errorf("reasons %q", r.Best.Reasons)
	}
}

// TestTriedLossyChainKept is the lossy lab after one bench with its history
// off: the relays learnt the loss of the links r1, r2, r3 carried; r4's
// sender to the client runs BBR, so its 80 ms segment gets no prior, and
// r4 is ahead on its windows. The chain whose loss traffic taught beats
// direct, and is kept.
func TestTriedLossyChainKept(t *testing.T) {
	m := lossyFleet()
	m.Nodes[4].CongestionControl = "bbr"
	r := mustSearch(t, m, Request{})
	if !slices.Equal(r.Best.Chain, []string{"r1", "r2", "r3"}) || !slices.Equal(r.KeptOver, []string{"r4"}) {
		t.Fatalf("best %v, kept over %v; want r1, r2, r3 kept over r4; reasons %q", r.Best.Chain, r.KeptOver, r.Best.Reasons)
	}
	if !hasReason(r.Best.Reasons, "kept the tried chain via r1, r2, r3 (held at 6.66 Mbit/s on r1→r2 by the 0.5% loss its traffic met") {
		t.Errorf("reasons %q", r.Best.Reasons)
	}
	// Ranked by completion time, nothing is kept.
	if r := mustSearch(t, m, Request{SizeBytes: 1 << 30}); len(r.KeptOver) > 0 || r.Exploring {
		t.Errorf("with a size: kept over %v, exploring %v", r.KeptOver, r.Exploring)
	}
}

// TestPriorIsUntried: a chain whose only guess is a loss prior (capacities
// declared, windows known) is still untried: it does not displace the
// chain whose loss traffic taught, and its reason says its prediction
// rests on a prior, not that it is a bound.
func TestPriorIsUntried(t *testing.T) {
	m := lossyFleet()
	for i := range m.Nodes {
		m.Nodes[i].LimitBps, m.Nodes[i].WindowBytes = 1e9, 3<<20
	}
	m.Pairs[5].RTTMs = 10 // client–r4: short, so r4 ranks first on its prior
	r := mustSearch(t, m, Request{})
	if !slices.Equal(r.Best.Chain, []string{"r1", "r2", "r3"}) || !slices.Equal(r.KeptOver, []string{"r4"}) {
		t.Fatalf("best %v, kept over %v; want r1, r2, r3 kept over r4; reasons %q", r.Best.Chain, r.KeptOver, r.Best.Reasons)
	}
	if p := planVia(t, r, "r4"); p.Bound || !strings.HasPrefix(p.Reasons[0], "untried: predicts ") || !strings.Contains(p.Reasons[0], " on a loss prior, but nobody has measured it") {
		t.Errorf("r4: bound %v, reason %q", p.Bound, p.Reasons[0])
	}
}
