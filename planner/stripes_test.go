package planner

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// Stock Linux buffers, as numbers (the planner reads no host): tcp_rmem's
// max of 6 MiB makes a receive window of 0.60 × it, tcp_wmem's max of
// 4 MiB a send window of 0.97 × it (pkg/hostnet's ratios).
const (
	stockWindowBytes     = 3774873 // hostnet.WindowOfRmem(6 << 20)
	stockSendWindowBytes = 4068474 // hostnet.SendWindowOfWmem(4 << 20)
)

func TestStockBuffers(t *testing.T) {
	if w, s := hostnet.WindowOfRmem(6<<20), hostnet.SendWindowOfWmem(4<<20); w != stockWindowBytes || s != stockSendWindowBytes {
		t.Fatalf("hostnet: window %d, send window %d; the tests here use %d, %d", w, s, stockWindowBytes, stockSendWindowBytes)
	}
}

func TestChooseStripes(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name      string
		w         way
		capBps    float64
		maxN      int
		want      int
		wantRateB float64 // what want connections carry, bits/s
	}{
		{"200 ms crossing, stock window", way{151e6, inf}, 400e6, 8, 3, 400e6},
		{"the least n, not the most", way{100e6, inf}, 400e6, 8, 4, 400e6},
		{"20 ms crossing: one reaches the link", way{1.5e9, inf}, 400e6, 8, 1, 400e6},
		{"one within the target", way{370e6, inf}, 400e6, 8, 1, 370e6},
		{"just below the target", way{350e6, inf}, 400e6, 8, 2, 400e6},
		{"capacity unknown", way{151e6, inf}, inf, 8, 1, 151e6},
		{"unusable", way{151e6, inf}, 0, 8, 1, 0},
		{"cannot stripe", way{151e6, inf}, 400e6, 1, 1, 151e6},
		{"at most maxN", way{30e6, inf}, 400e6, 8, 8, 240e6},
		{"maxN 2", way{151e6, inf}, 400e6, 2, 2, 302e6},
		{"held by a learnt rate", way{151e6, 120e6}, 400e6, 8, 1, 120e6},
		{"learnt above one connection", way{100e6, 200e6}, 400e6, 8, 2, 200e6},
		{"gain below 10 %", way{100e6, 105e6}, 400e6, 8, 1, 100e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := chooseStripes(tc.w, tc.capBps, tc.maxN)
			if got := tc.w.rateBps(n, tc.capBps); n != tc.want || got != tc.wantRateB {
				t.Fatalf("%d connections carrying %v bit/s, want %d carrying %v", n, got, tc.want, tc.wantRateB)
			}
		})
	}
}

// crossing is client → r1 → r2 → srv beside a direct path, the relays
// with stock buffers either side of a long link: what the striping tests
// vary.
type crossing struct {
	rttMs              float64 // r1–r2
	limitBps           float64 // the relays' limit_bps; 0 = unknown
	stripes1, stripes2 int     // r1's and r2's max_stripes
	loss               float64 // r1–r2, declared
	cc                 string  // the relays' congestion control
	learntBps          float64 // what r2's sends to r1 were learnt to reach; 0 = unknown
}

func (c crossing) matrix() *Matrix {
	node := func(name string, relay bool, stripes int) Node {
		n := Node{Name: name, Relay: relay, WindowBytes: stockWindowBytes, SendWindowBytes: stockSendWindowBytes, MaxStripes: stripes}
		if relay {
			n.LimitBps, n.CongestionControl = c.limitBps, c.cc
		}
		return n
	}
	link := Pair{A: "r1", B: "r2", RTTMs: c.rttMs, Loss: c.loss, BSendBps: c.learntBps}
	if c.loss > 0 {
		link.ALossSource, link.BLossSource = LossDeclared, LossDeclared
	}
	return &Matrix{
		Nodes: []Node{node("client", false, 0), node("r1", true, c.stripes1), node("r2", true, c.stripes2), node("srv", false, 0)},
		Pairs: []Pair{
			{A: "client", B: "r1", RTTMs: 5}, link, {A: "r2", B: "srv", RTTMs: 5},
			{A: "client", B: "srv", RTTMs: c.rttMs + 10},
		},
	}
}

// The targets, on the link r1→r2: striped where both relays
// stripe, the capacity is known and one connection falls short of it.
func TestStripedSegments(t *testing.T) {
	long := crossing{rttMs: 200, limitBps: 400e6, stripes1: 8, stripes2: 8}
	with := func(f func(*crossing)) crossing { c := long; f(&c); return c }
	for _, tc := range []struct {
		name        string
		c           crossing
		dir         Direction
		maxStripes  int     // the request's; 0 = default
		stripes     int     // Segment.Stripes of r1→r2
		limitedBy   string  // of the striped rate
		oneLimit    string  // Segment.OneLinkLimitedBy
		minPredBps  float64 // the chain's prediction at least, bits/s
		reason      string  // a reason of the chain's holds this
		wantChainOn bool    // the chain is the best plan
	}{
		{name: "200 ms, 400 Mbit/s, stock buffers", c: long, stripes: 3, limitedBy: "limit", oneLimit: "window", minPredBps: 0.8 * 400e6,
			reason: "r1→r2 striped ×3: one connection's window holds it to 151 Mbit/s of a 400 Mbit/s link; 3 carry 400 Mbit/s", wantChainOn: true},
		{name: "upload", c: long, dir: Up, stripes: 3, limitedBy: "limit", oneLimit: "window", minPredBps: 0.8 * 400e6, wantChainOn: true},
		{name: "both ways", c: long, dir: Both, stripes: 3, limitedBy: "limit", oneLimit: "window", minPredBps: 0.8 * 400e6, wantChainOn: true},
		{name: "20 ms: one connection reaches the link", c: with(func(c *crossing) { c.rttMs = 20 }), limitedBy: "limit",
			reason: "r1→r2 not striped: one connection reaches the 400 Mbit/s link"},
		{name: "capacity unknown", c: with(func(c *crossing) { c.limitBps = 0 }), limitedBy: "window",
			reason: "r1→r2 not striped: its capacity is unknown"},
		{name: "r2 cannot stripe", c: with(func(c *crossing) { c.stripes2 = 0 }), limitedBy: "window"},
		{name: "r1 takes 2", c: with(func(c *crossing) { c.stripes1 = 2 }), stripes: 2, limitedBy: "window", oneLimit: "window",
			reason: "2 carry 302 Mbit/s, the most both ends and the request allow (2)", wantChainOn: true},
		{name: "request allows 2", c: long, maxStripes: 2, stripes: 2, limitedBy: "window", oneLimit: "window", wantChainOn: true},
		{name: "request turns it off", c: long, maxStripes: 1, limitedBy: "window"},
		{name: "loss-bound CUBIC", c: with(func(c *crossing) { c.loss, c.cc = 1e-6, "cubic" }), stripes: 6, limitedBy: "limit", oneLimit: "loss",
			reason: "r1→r2 striped ×6: one connection's loss bound holds it to 70.7 Mbit/s", wantChainOn: true},
		{name: "loss-bound CUBIC, at most 4", c: with(func(c *crossing) { c.loss, c.cc = 1e-6, "cubic" }), maxStripes: 4, stripes: 4, limitedBy: "loss", oneLimit: "loss", wantChainOn: true},
		{name: "BBR with loss: not loss-bound", c: with(func(c *crossing) { c.loss, c.cc = 1e-6, "bbr" }), stripes: 3, limitedBy: "limit", oneLimit: "window", wantChainOn: true},
		{name: "held by a learnt rate", c: with(func(c *crossing) { c.learntBps = 120e6 }), limitedBy: "learnt",
			reason: "r1→r2 not striped: the rate its traffic was learnt to reach holds it (120 Mbit/s), measured per tunnel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Direction: tc.dir}
			req.Constraints.MaxStripes = tc.maxStripes
			r := mustSearch(t, tc.c.matrix(), req)
			p := planVia(t, r, "r1", "r2")
			seg := p.Segments[1]
			if seg.Stripes != tc.stripes || seg.LimitedBy != tc.limitedBy || seg.OneLinkLimitedBy != tc.oneLimit {
				t.Fatalf("r1→r2: ×%d limited by %q (one connection: %q), want ×%d by %q (%q)\n%s",
					seg.Stripes, seg.LimitedBy, seg.OneLinkLimitedBy, tc.stripes, tc.limitedBy, tc.oneLimit, Explain(r))
			}
			if tc.stripes == 0 && (seg.OneLinkBps != 0 || hasReason(p.Reasons, "striped ×")) {
				t.Fatalf("not striped, but one link %v, reasons %q", seg.OneLinkBps, p.Reasons)
			}
			if tc.stripes > 0 && !(seg.RateBps >= (1+stripeMinGain)*seg.OneLinkBps) {
				t.Fatalf("striped at %v bit/s, one connection %v", seg.RateBps, seg.OneLinkBps)
			}
			if p.PredictedBps < tc.minPredBps {
				t.Fatalf("predicts %v bit/s, want at least %v", p.PredictedBps, tc.minPredBps)
			}
			if tc.reason != "" {
				wantReason(t, r, p.Reasons, tc.reason)
			}
			if tc.c.stripes2 < 2 && hasReason(p.Reasons, "striped") {
				t.Fatalf("r2 does not stripe, yet reasons %q speak of it", p.Reasons)
			}
			if tc.wantChainOn {
				wantChain(t, r, "r1", "r2")
			}
		})
	}
}

// A relay from before striping (no max_stripes) refuses a striped header,
// and a chain may pass one through it: while any usable relay is such, no
// segment is striped, and the plan says why.
func TestNoStripesWhileAnOlderRelayIsUp(t *testing.T) {
	m := crossing{rttMs: 200, limitBps: 400e6, stripes1: 8, stripes2: 8}.matrix()
	m.Nodes = append(m.Nodes, Node{Name: "old", Relay: true, WindowBytes: stockWindowBytes})
	m.Pairs = append(m.Pairs, Pair{A: "client", B: "old", RTTMs: 5}, Pair{A: "old", B: "r1", RTTMs: 5}, Pair{A: "old", B: "srv", RTTMs: 300})
	r := mustSearch(t, m, Request{})
	p := planVia(t, r, "r1", "r2")
	if p.Segments[1].Stripes > 1 {
		t.Fatalf("r1→r2 striped ×%d with an older relay up\n%s", p.Segments[1].Stripes, Explain(r))
	}
	wantReason(t, r, p.Reasons, "r1→r2 not striped: relay old takes no striped segments")
}

// The client's segment and the destination's are never striped, though
// both ends are relays that stripe and the links are long and known.
func TestStripesOnlyBetweenRelays(t *testing.T) {
	c := crossing{rttMs: 200, limitBps: 400e6, stripes1: 8, stripes2: 8}
	m := c.matrix()
	for i := range m.Nodes {
		m.Nodes[i].Relay, m.Nodes[i].MaxStripes, m.Nodes[i].LimitBps = true, 8, 400e6
	}
	for i := range m.Pairs {
		m.Pairs[i].RTTMs = 200
	}
	r := mustSearch(t, m, Request{})
	for _, p := range append([]Plan{r.Best, r.Direct}, r.Alternatives...) {
		for _, seg := range p.Segments {
			relays := seg.From != "client" && seg.To != "srv"
			if striped := seg.Stripes > 1; striped != relays {
				t.Fatalf("plan %v: %s→%s striped ×%d\n%s", p.Chain, seg.From, seg.To, seg.Stripes, Explain(r))
			}
		}
	}
}

// A plan's transfer moves at the striped rate, and PredictTransfer, which
// reads the plan's segments, agrees with the search.
func TestStripedTransfer(t *testing.T) {
	m := crossing{rttMs: 200, limitBps: 400e6, stripes1: 8, stripes2: 8}.matrix()
	const size = 1 << 30
	striped := mustSearch(t, m, Request{SizeBytes: size}).Best
	one := mustSearch(t, m, Request{SizeBytes: size, Constraints: Constraints{MaxStripes: 1}}).Best
	if !slices.Equal(striped.Chain, []string{"r1", "r2"}) || striped.Transfer == nil || one.Transfer == nil {
		t.Fatalf("striped %v %+v, one link %v %+v", striped.Chain, striped.Transfer, one.Chain, one.Transfer)
	}
	if striped.Transfer.Flights != 0 || striped.Transfer.CompletionMs >= one.Transfer.CompletionMs*0.5 {
		t.Fatalf("striped %+v, one link %+v: want capacity-held and under half the time", striped.Transfer, one.Transfer)
	}
	got := PredictTransfer(striped, Model{}, striped.PredictedBps, size)
	want := *striped.Transfer
	want.Speedup = 0
	if got == nil || *got != want {
		t.Fatalf("PredictTransfer %+v, the search's %+v", got, want)
	}
}

// The table and the diagram show a striped segment's connections.
func TestExplainStripes(t *testing.T) {
	out := Explain(mustSearch(t, crossing{rttMs: 200, limitBps: 400e6, stripes1: 8, stripes2: 8}.matrix(), Request{}))
	for _, want := range []string{
		"client ──5.00 ms──▶ r1 ──200 ms ×3──▶ r2 ──5.00 ms──▶ srv",
		"striped ×3 (one connection: 151 Mbit/s)",
		"×N segment striped over N TCP connections",
		"r1→r2 striped ×3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// With striping off, a matrix whose relays advertise it plans exactly as
// one whose relays do not; and a plan without a striped segment carries
// no striping field in its JSON.
func TestStripingOffUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 300 {
		m, req := randomCase(rng)
		want, err := Search(m, req)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(data); strings.Contains(s, "stripes") || strings.Contains(s, "one_link") {
			t.Fatalf("case %d: JSON without striping: %s", i, s)
		}
		advertised := &Matrix{Nodes: slices.Clone(m.Nodes), Pairs: m.Pairs}
		for k := range advertised.Nodes {
			advertised.Nodes[k].MaxStripes = 8
		}
		req.Constraints.MaxStripes = []int{1, -1}[rng.IntN(2)]
		got, err := Search(advertised, req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: striping off differs:\n%s\n%s", i, Explain(got), Explain(want))
		}
	}
}

// stripeAll has random nodes (the client and destination too) advertise
// striping, more relays declare a capacity, and the request cap vary.
func stripeAll(rng *rand.Rand) func(*Matrix, *Request) {
	return func(m *Matrix, req *Request) {
		for i := range m.Nodes {
			m.Nodes[i].MaxStripes = []int{0, 1, 2, 3, 8, 16, 8, 8}[rng.IntN(8)]
			if m.Nodes[i].LimitBps == 0 && rng.IntN(2) == 0 {
				m.Nodes[i].LimitBps = float64(1+rng.IntN(100)) * 1e7
			}
		}
		req.Constraints.MaxStripes = []int{0, 0, -1, 1, 2, 4, 8}[rng.IntN(7)]
	}
}

// Search's striped segments are the brute force's, by rate and by
// completion time: the search tables, the segments and the ramps agree.
func TestStripedSearchMatchesBruteForce(t *testing.T) {
	searchMatchesBruteForce(t, rand.New(rand.NewPCG(13, 14)), 1500, stripeAll(rand.New(rand.NewPCG(15, 16))))
	sizedSearchMatchesBruteForce(t, rand.New(rand.NewPCG(17, 18)), 800, stripeAll(rand.New(rand.NewPCG(19, 20))))
}

func TestMaxStripesInputs(t *testing.T) {
	m, err := ParseMatrix([]byte(`{"nodes": {"r1": {"relay": true, "max_stripes": 4}, "r2": {"relay": true}}}`))
	if err != nil || m.Nodes[0].MaxStripes != 4 || m.Nodes[1].MaxStripes != 0 {
		t.Fatalf("parsed %+v, %v", m, err)
	}
	data, err := json.Marshal(m)
	if err != nil || !strings.Contains(string(data), `"r1":{"relay":true,"max_stripes":4}`) || strings.Count(string(data), "max_stripes") != 1 {
		t.Fatalf("marshal: %s, %v", data, err)
	}
	for _, bad := range []int{9, 100} {
		_, err := Search(crossing{rttMs: 200}.matrix(), Request{Client: "client", Destination: "srv", Constraints: Constraints{MaxStripes: bad}})
		if err == nil || !strings.Contains(err.Error(), "constraints.max_stripes") {
			t.Errorf("max_stripes %d: %v", bad, err)
		}
	}
}
