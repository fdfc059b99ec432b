package planner

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The brute force below is an independent model: it enumerates every chain
// of distinct relays, computes each segment from the formulas in the
// package documentation written out again, and ranks with tolerance. Search
// must agree with it on the best plan.

// bfPlan is a chain as the brute force rates it.
type bfPlan struct {
	chain []string
	bps   float64 // prediction in the requested direction, bits/s
	rttMs float64
	// stepMs is the RTT of the first slowest segment when a window holds
	// its rate, else 0 (see flow.stepMs).
	stepMs float64
}

// bfEps is the relative tolerance between the brute force's arithmetic and
// Search's: the same formulas, other operation order.
const bfEps = 1e-9

func near(a, b float64) bool { return math.Abs(a-b) <= bfEps*math.Max(math.Abs(a), math.Abs(b)) }

// bfCompare ranks like compareCandidates, with tolerance.
func bfCompare(a, b bfPlan) int {
	if !near(a.bps, b.bps) {
		return cmp.Compare(b.bps, a.bps)
	}
	if !near(a.rttMs, b.rttMs) {
		return cmp.Compare(a.rttMs, b.rttMs)
	}
	return cmp.Or(cmp.Compare(len(a.chain), len(b.chain)), slices.Compare(a.chain, b.chain))
}

type bruteForce struct {
	m       *Matrix
	req     Request
	nodes   map[string]Node
	pairs   map[[2]string]Pair
	relays  []string
	maxHops int
	overhd  float64
	gain    float64
	margin  float64
	window  int64
	mss     float64
	// priorPerMs and priorMax are the loss prior (LossPrior): 0 = none.
	priorPerMs, priorMax float64
	// maxStripes is the request's most connections of a striped segment.
	maxStripes int
}

func newBruteForce(m *Matrix, req Request) *bruteForce {
	bf := &bruteForce{m: m, req: req, nodes: map[string]Node{}, pairs: map[[2]string]Pair{}}
	c := req.Constraints
	bf.maxHops = c.MaxHops
	if bf.maxHops == 0 {
		bf.maxHops = 4
	}
	bf.gain = c.MinGain
	if bf.gain == 0 {
		bf.gain = 0.10
	}
	bf.gain = math.Max(bf.gain, 0)
	bf.margin = req.Model.ErrorMargin
	if bf.margin == 0 {
		bf.margin = DefaultErrorMargin
	}
	bf.margin = math.Max(bf.margin, 0)
	maxAge := c.MaxAgeSec
	if maxAge == 0 {
		maxAge = 300
	}
	bf.overhd = req.Model.RelayOverhead
	if bf.overhd == 0 {
		bf.overhd = 0.02
	}
	bf.overhd = math.Max(bf.overhd, 0)
	bf.window = req.Model.DefaultWindowBytes
	if bf.window == 0 {
		bf.window = 3 << 20
	}
	bf.mss = float64(req.Model.MSSBytes)
	if bf.mss == 0 {
		bf.mss = 1448
	}
	bf.maxStripes = c.MaxStripes
	if bf.maxStripes == 0 {
		bf.maxStripes = 8
	}
	bf.maxStripes = max(bf.maxStripes, 1)
	// The loss prior, by its definition: Σ loss / Σ RTT over the fresh,
	// probed, reachable pairs whose loss someone measured, two at least,
	// one lossy; at most the highest of them.
	var sumLoss, sumRTT float64
	var measured int
	for _, p := range m.Pairs {
		if (p.Loss > 0 || p.ALossSource != "" || p.BLossSource != "") && p.Loss < 1 && !p.Estimated && (p.AgeSec <= maxAge || c.UseStale || maxAge < 0) {
			sumLoss, sumRTT, measured = sumLoss+p.Loss, sumRTT+p.RTTMs, measured+1
			bf.priorMax = math.Max(bf.priorMax, p.Loss)
		}
	}
	if measured >= 2 && sumLoss > 0 {
		bf.priorPerMs = sumLoss / sumRTT
	}
	for _, n := range m.Nodes {
		bf.nodes[n.Name] = n
		usable := n.Relay && n.Name != req.Client && n.Name != req.Destination &&
			(len(c.Include) == 0 || slices.Contains(c.Include, n.Name)) && !slices.Contains(c.Exclude, n.Name)
		if usable {
			bf.relays = append(bf.relays, n.Name)
		}
	}
	for _, p := range m.Pairs {
		if maxAge > 0 && p.AgeSec > maxAge && !c.UseStale {
			continue
		}
		bf.pairs[[2]string{p.A, p.B}] = p
		bf.pairs[[2]string{p.B, p.A}] = p
	}
	return bf
}

// heldRate is segment from→to's rate in direction dir, bits/s; whether
// the receiver's (or sender's send) window sets it: no other bound is
// lower, nor equal but a limit (as Segment.LimitedBy ranks ties); and ok,
// false without a usable pair. A striped segment runs bf.stripes
// connections, each with the window and loss bounds.
func (bf *bruteForce) heldRate(from, to string, dir Direction) (float64, bool, bool) {
	if _, ok := bf.pairs[[2]string{from, to}]; !ok {
		return 0, false, false
	}
	if dir == Both {
		down, dHeld, _ := bf.heldRate(from, to, Down)
		up, uHeld, _ := bf.heldRate(from, to, Up)
		switch {
		case down < up:
			return down, dHeld, true
		case up < down:
			return up, uHeld, true
		}
		return down, dHeld || uHeld, true
	}
	n := float64(bf.stripes(from, to))
	b := bf.bounds(from, to, dir)
	r, held := n*b.window, true
	if b.capBps < r {
		r, held = b.capBps, false
	}
	if n*b.mathis <= r {
		r, held = n*b.mathis, false
	}
	if b.learnt <= r {
		r, held = b.learnt, false
	}
	return r, held, true
}

// bfBounds are what one connection of a segment's way carries at most,
// bits/s: its window (or send window) per round trip, its sender's Mathis
// bound (+Inf: none), the rate its sender was learnt to reach (+Inf:
// unknown) and the ends' limit (+Inf: none; 0: nothing answered).
type bfBounds struct{ window, mathis, learnt, capBps float64 }

// bounds are segment from→to's bounds in direction dir, Down or Up.
func (bf *bruteForce) bounds(from, to string, dir Direction) bfBounds {
	p := bf.pairs[[2]string{from, to}]
	recv, send := bf.nodes[from], bf.nodes[to]
	if dir == Up {
		recv, send = send, recv
	}
	w := recv.WindowBytes
	if w == 0 {
		w = bf.window
	}
	// A window measured on the pair wins over the node's.
	if pw := map[string]int64{p.A: p.AWindowBytes, p.B: p.BWindowBytes}[recv.Name]; pw > 0 {
		w = pw
	}
	if send.SendWindowBytes > 0 {
		w = min(w, send.SendWindowBytes)
	}
	rttSec := p.RTTMs / 1000
	inf := math.Inf(1)
	b := bfBounds{window: float64(w) * 8 / rttSec, mathis: inf, learnt: inf, capBps: inf}
	for _, lim := range []float64{bf.nodes[from].LimitBps, bf.nodes[to].LimitBps} {
		if lim > 0 && lim < b.capBps {
			b.capBps = lim
		}
	}
	loss := bf.sendLoss(p, send)
	switch {
	case p.Loss == 1: // nothing answered: unusable, not the Mathis value
		b.capBps = 0
	case loss > 0 && (loss >= 0.15 || !strings.HasPrefix(send.CongestionControl, "bbr")):
		// Loss bounds a loss-based sender, and BBR from 15 %.
		b.mathis = bf.mss * 8 * 1.22 / (rttSec * math.Sqrt(loss))
	}
	// What the sender's traffic was learnt to reach bounds it too.
	if learnt := map[string]float64{p.A: p.ASendBps, p.B: p.BSendBps}[send.Name]; learnt > 0 {
		b.learnt = learnt
	}
	return b
}

// olderRelayUp says a usable relay takes no striped segments (max_stripes
// 0) while another would stripe: then nothing is striped.
func (bf *bruteForce) olderRelayUp() bool {
	older, striping := false, false
	for _, r := range bf.relays {
		older = older || bf.nodes[r].MaxStripes <= 0
		striping = striping || min(bf.nodes[r].MaxStripes, bf.maxStripes) >= 2
	}
	return older && striping
}

// stripes is how many connections segment from→to runs: 1 unless both
// ends are usable relays that stripe and its capacity is known; then the
// least n (up to the most both ends and the request allow) whose n × one
// connection's bound, in the requested direction, reaches 90 % of the
// capacity (or of a learnt rate below it), if that gains 10 % over one.
func (bf *bruteForce) stripes(from, to string) int {
	maxN := min(bf.nodes[from].MaxStripes, bf.nodes[to].MaxStripes, bf.maxStripes)
	if !slices.Contains(bf.relays, from) || !slices.Contains(bf.relays, to) || maxN < 2 || bf.olderRelayUp() {
		return 1
	}
	var ways []bfBounds
	switch dir := cmp.Or(bf.req.Direction, Down); dir {
	case Both:
		ways = []bfBounds{bf.bounds(from, to, Down), bf.bounds(from, to, Up)}
	default:
		ways = []bfBounds{bf.bounds(from, to, dir)}
	}
	capBps := ways[0].capBps
	if capBps == 0 || math.IsInf(capBps, 1) {
		return 1
	}
	rate := func(n int) float64 {
		r := capBps
		for _, b := range ways {
			r = min(r, float64(n)*min(b.window, b.mathis), b.learnt)
		}
		return r
	}
	target := capBps
	for _, b := range ways {
		target = min(target, b.learnt)
	}
	n := 1
	for ; n < maxN; n++ {
		reaches := true
		for _, b := range ways {
			reaches = reaches && float64(n)*min(b.window, b.mathis) >= 0.9*target
		}
		if reaches {
			break
		}
	}
	if rate(n) < 1.1*rate(1) {
		return 1
	}
	return n
}

// sendLoss is the loss of send's sends over p: the pair's, else (nobody
// measured it, the sender loss-based) the prior.
func (bf *bruteForce) sendLoss(p Pair, send Node) float64 {
	source := map[string]string{p.A: p.ALossSource, p.B: p.BLossSource}[send.Name]
	if p.Loss > 0 || source != "" || strings.HasPrefix(send.CongestionControl, "bbr") {
		return p.Loss
	}
	return math.Min(bf.priorPerMs*p.RTTMs, bf.priorMax)
}

// segLoss is the loss of segment from→to (from on the client side) in
// direction dir: its sender's, the higher way's for Both.
func (bf *bruteForce) segLoss(from, to string, dir Direction) float64 {
	p := bf.pairs[[2]string{from, to}]
	switch dir {
	case Up:
		return bf.sendLoss(p, bf.nodes[from])
	case Both:
		return math.Max(bf.sendLoss(p, bf.nodes[from]), bf.sendLoss(p, bf.nodes[to]))
	}
	return bf.sendLoss(p, bf.nodes[to])
}

// plan rates the path through chain in the requested direction; ok false
// when a pair is missing or a segment moves nothing.
func (bf *bruteForce) plan(chain []string, dir Direction) (bfPlan, bool) {
	if dir == "" {
		dir = Down
	}
	path := append(append([]string{bf.req.Client}, chain...), bf.req.Destination)
	p := bfPlan{chain: chain, bps: math.Inf(1)}
	for i := 0; i+1 < len(path); i++ {
		r, held, ok := bf.heldRate(path[i], path[i+1], dir)
		if !ok {
			return p, false
		}
		rtt := bf.pairs[[2]string{path[i], path[i+1]}].RTTMs
		if r < p.bps {
			p.bps, p.stepMs = r, 0
			if held {
				p.stepMs = rtt
			}
		}
		p.rttMs += rtt
	}
	p.bps *= math.Pow(1-bf.overhd, float64(len(chain)))
	return p, len(chain) == 0 || p.bps > 0
}

// chains enumerates every usable chain, ranked.
func (bf *bruteForce) chains() []bfPlan {
	var out []bfPlan
	var walk func(chain []string)
	walk = func(chain []string) {
		if len(chain) > 0 {
			if p, ok := bf.plan(slices.Clone(chain), bf.req.Direction); ok {
				out = append(out, p)
			}
		}
		if len(chain) == bf.maxHops {
			return
		}
		for _, r := range bf.relays {
			if !slices.Contains(chain, r) {
				walk(append(chain, r))
			}
		}
	}
	if bf.maxHops > 0 {
		walk(nil)
	}
	slices.SortFunc(out, bfCompare)
	// Ties within the error margin go to the fewest relays: that chain
	// comes first.
	if len(out) > 1 {
		floor, w := out[0].bps*(1-bf.margin), 0
		for i := 1; i < len(out) && (out[i].bps >= floor || near(out[i].bps, floor)); i++ {
			if len(out[i].chain) < len(out[w].chain) {
				w = i
			}
		}
		win := out[w]
		copy(out[1:w+1], out[:w])
		out[0] = win
	}
	return out
}

// randomCase builds a small random matrix and request. Half the cases use
// coarse values (integer RTTs, a few window sizes) so that ties happen.
func randomCase(rng *rand.Rand) (*Matrix, Request) {
	coarse := rng.IntN(2) == 0
	relays := rng.IntN(9)
	m := &Matrix{}
	names := []string{"client", "dst", "other"}
	for i := range relays {
		names = append(names, fmt.Sprintf("r%d", i))
	}
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	windows := []int64{0, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	for _, name := range names {
		n := Node{Name: name, Relay: strings.HasPrefix(name, "r")}
		if rng.IntN(3) > 0 {
			n.WindowBytes = windows[rng.IntN(len(windows))]
			if !coarse && n.WindowBytes > 0 {
				n.WindowBytes += rng.Int64N(n.WindowBytes)
			}
		}
		if rng.IntN(3) == 0 {
			n.SendWindowBytes = windows[1+rng.IntN(len(windows)-1)]
		}
		if rng.IntN(4) == 0 {
			n.LimitBps = float64(1+rng.IntN(100)) * 1e7
		}
		n.CongestionControl = []string{"", "cubic", "bbr"}[rng.IntN(3)]
		m.Nodes = append(m.Nodes, n)
	}
	density := 0.5 + rng.Float64()/2
	for i, a := range names {
		for _, b := range names[i+1:] {
			if rng.Float64() > density {
				continue
			}
			p := Pair{A: a, B: b, RTTMs: 0.5 + rng.Float64()*100}
			if coarse {
				p.RTTMs = float64(1 + rng.IntN(12))
			}
			if rng.IntN(2) == 0 {
				p.A, p.B = b, a
			}
			switch rng.IntN(10) {
			case 0:
				p.Loss = 1
			case 1, 2:
				p.Loss = rng.Float64() * 0.05
			case 3:
				p.Loss = rng.Float64() * 0.3 // above BBR's tolerance too
			}
			p.Estimated = rng.IntN(5) == 0
			if rng.IntN(6) == 0 {
				p.AWindowBytes = windows[1+rng.IntN(len(windows)-1)]
			}
			if rng.IntN(6) == 0 {
				p.BWindowBytes = windows[1+rng.IntN(len(windows)-1)]
			}
			if rng.IntN(4) == 0 {
				p.AgeSec = rng.Float64() * 600
			}
			if rng.IntN(6) == 0 {
				p.ASendBps, p.ASendAgeSec = 1e6+rng.Float64()*500e6, rng.Float64()*600
			}
			if rng.IntN(6) == 0 {
				p.BSendBps = 1e6 + rng.Float64()*500e6
			}
			m.Pairs = append(m.Pairs, p)
		}
	}
	rng.Shuffle(len(m.Pairs), func(i, j int) { m.Pairs[i], m.Pairs[j] = m.Pairs[j], m.Pairs[i] })

	req := Request{Client: "client", Destination: "dst", Direction: []Direction{"", Down, Up, Both}[rng.IntN(4)]}
	c := &req.Constraints
	c.MaxHops = rng.IntN(6) - 1 // −1 (none) .. 4, 0 = default
	var relayNames []string
	for _, n := range names {
		if strings.HasPrefix(n, "r") {
			relayNames = append(relayNames, n)
		}
	}
	for _, r := range relayNames {
		switch rng.IntN(12) {
		case 0:
			c.Exclude = append(c.Exclude, r)
		case 1, 2:
			c.Include = append(c.Include, r)
		}
	}
	c.MinGain = []float64{0, -1, rng.Float64() * 0.5}[rng.IntN(3)]
	c.MaxAgeSec = []float64{0, -1, rng.Float64() * 600}[rng.IntN(3)]
	c.UseStale = rng.IntN(3) == 0
	req.Model.RelayOverhead = []float64{0, -1, rng.Float64() * 0.2}[rng.IntN(3)]
	if rng.IntN(3) == 0 {
		req.Model.DefaultWindowBytes = windows[1+rng.IntN(len(windows)-1)]
	}
	if rng.IntN(4) == 0 {
		req.Model.MSSBytes = 536 + rng.IntN(8000)
	}
	req.Model.ErrorMargin = []float64{0, -1, rng.Float64() * 0.2}[rng.IntN(3)]
	return m, req
}

// TestSearchMatchesBruteForce is the exactness proof: on thousands of
// random inputs Search's best plan predicts what the best of all chains
// predicts, and every plan it returns is a valid chain rated right.
func TestSearchMatchesBruteForce(t *testing.T) {
	searchMatchesBruteForce(t, rand.New(rand.NewPCG(1, 2)), 3000, nil)
}

// searchMatchesBruteForce is TestSearchMatchesBruteForce over cases
// random inputs (a tenth with -short), each changed by vary where not nil.
func searchMatchesBruteForce(t *testing.T, rng *rand.Rand, cases int, vary func(*Matrix, *Request)) {
	if testing.Short() {
		cases /= 10
	}
	chainWins, tieBroken, boundary, kept := 0, 0, 0, 0
	for i := range cases {
		m, req := randomCase(rng)
		if vary != nil {
			vary(m, &req)
		}
		res, err := Search(m, req)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		bf := newBruteForce(m, req)
		all := bf.chains()
		direct, directKnown := bf.plan(nil, req.Direction)

		wantChain := len(all) > 0 && (!directKnown || direct.bps == 0 ||
			(all[0].bps >= direct.bps*(1+bf.gain) && bfCompare(all[0], direct) < 0))
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s\nrequest %+v\nmatrix %+v\nbrute force top %+v\nresult:\n%s",
				i, fmt.Sprintf(format, args...), req, m, all[:min(len(all), 3)], Explain(res))
		}
		if directKnown && !near(res.Direct.PredictedBps, direct.bps) {
			fail("direct predicts %v, brute force %v", res.Direct.PredictedBps, direct.bps)
		}
		switch got := len(res.Best.Chain) > 0; {
		case len(res.KeptOver) > 0:
			// A tried plan was kept ahead of the chain ranked first
			// (keepMeasured, tested on its own): that chain is still
			// the brute force's best, and beats direct.
			kept++
			if top, _ := bf.plan(res.KeptOver, req.Direction); !wantChain || !near(top.bps, all[0].bps) {
				fail("kept over %v (%v bit/s), brute force's best %v (%v), beating direct %v", res.KeptOver, top.bps, all[0].chain, all[0].bps, wantChain)
			}
			if got {
				checkPlan(t, bf, req, res.Best)
			}
		case got != wantChain:
			if !near(all[0].bps, direct.bps*(1+bf.gain)) {
				fail("chain wins = %v, brute force says %v", got, wantChain)
			}
			boundary++ // a prediction at the min-gain boundary, within rounding
		case wantChain:
			chainWins++
			if !near(res.Best.PredictedBps, all[0].bps) {
				fail("best predicts %v, brute force %v (via %v)", res.Best.PredictedBps, all[0].bps, all[0].chain)
			}
			if !slices.Equal(res.Best.Chain, all[0].chain) {
				// Allowed only where the brute force's tolerant ranking
				// ties them on prediction: Search ranks exact floats.
				got, _ := bf.plan(res.Best.Chain, req.Direction)
				if !near(got.bps, all[0].bps) {
					fail("best chain %v, brute force %v", res.Best.Chain, all[0].chain)
				}
				tieBroken++
			}
			checkPlan(t, bf, req, res.Best)
		case len(all) > 0 && len(res.Alternatives) == 0:
			fail("direct won, no alternatives, brute force has %d chains", len(all))
		case len(all) > 0 && !slices.Equal(res.Alternatives[0].Chain, all[0].chain):
			// Direct won: the first alternative is the best chain.
			if got, _ := bf.plan(res.Alternatives[0].Chain, req.Direction); !near(got.bps, all[0].bps) {
				fail("first alternative %v, brute force's best chain %v", res.Alternatives[0].Chain, all[0].chain)
			}
		}
		for _, p := range res.Alternatives {
			checkPlan(t, bf, req, p)
			checkOrigin(t, all, p)
		}
		// Ranked by prediction, except that where direct won the first
		// alternative is the chain that won the ties, which may predict
		// less than the next.
		for j := 1; j < len(res.Alternatives); j++ {
			a, b := res.Alternatives[j-1], res.Alternatives[j]
			if (a.PredictedBps < b.PredictedBps && (j > 1 || len(res.Best.Chain) > 0)) || slices.Equal(a.Chain, b.Chain) {
				fail("alternatives %d and %d out of order or equal", j-1, j)
			}
		}
	}
	t.Logf("%d cases, %d won by a chain, %d resolved differently within rounding, %d at the min-gain boundary, %d kept a tried plan",
		cases, chainWins, tieBroken, boundary, kept)
	if chainWins < cases/5 {
		t.Errorf("only %d of %d cases exercise a winning chain", chainWins, cases)
	}
	if tieBroken+boundary > chainWins/100 {
		t.Errorf("%d of %d chain wins differ from the brute force's choice", tieBroken, chainWins)
	}
}

// checkPlan verifies that p is a valid chain (distinct usable relays, the
// segments of that path) and that its numbers are the brute force's.
func checkPlan(t *testing.T, bf *bruteForce, req Request, p Plan) {
	t.Helper()
	for i, r := range p.Chain {
		if !slices.Contains(bf.relays, r) || slices.Contains(p.Chain[i+1:], r) {
			t.Fatalf("chain %v: relay %q not usable or repeated", p.Chain, r)
		}
	}
	path := append(append([]string{req.Client}, p.Chain...), req.Destination)
	if len(p.Segments) != len(path)-1 {
		t.Fatalf("chain %v: %d segments", p.Chain, len(p.Segments))
	}
	for i, seg := range p.Segments {
		if seg.From != path[i] || seg.To != path[i+1] {
			t.Fatalf("chain %v: segment %d is %s→%s", p.Chain, i, seg.From, seg.To)
		}
	}
	dir := cmp.Or(req.Direction, Down)
	want, ok := bf.plan(p.Chain, dir)
	down, _ := bf.plan(p.Chain, Down)
	up, _ := bf.plan(p.Chain, Up)
	if !ok || !near(p.PredictedBps, want.bps) || !near(p.PredictedDownBps, down.bps) || !near(p.PredictedUpBps, up.bps) {
		t.Fatalf("chain %v predicts %v (down %v, up %v), brute force %v (down %v, up %v)",
			p.Chain, p.PredictedBps, p.PredictedDownBps, p.PredictedUpBps, want.bps, down.bps, up.bps)
	}
	if !near(p.TotalRTTMs, want.rttMs) {
		t.Fatalf("chain %v: total RTT %v, brute force %v", p.Chain, p.TotalRTTMs, want.rttMs)
	}
	if p.Segments[p.Bottleneck].RateBps*math.Pow(1-bf.overhd, float64(len(p.Chain))) > p.PredictedBps*(1+bfEps) {
		t.Fatalf("chain %v: bottleneck segment %d is not the slowest", p.Chain, p.Bottleneck)
	}
}

// checkOrigin verifies an alternative is what its reason says it is: the
// best chain with k relays, or the best chain avoiding a relay, or both.
func checkOrigin(t *testing.T, all []bfPlan, p Plan) {
	t.Helper()
	_, origins, ok := strings.Cut(p.Reasons[0], " — ")
	if !ok {
		t.Fatalf("alternative %v: no origin in %q", p.Chain, p.Reasons[0])
	}
	for _, origin := range strings.Split(origins, "; ") {
		var keep func(bfPlan) bool
		var k int
		if avoid, ok := strings.CutPrefix(origin, "best chain avoiding "); ok {
			keep = func(c bfPlan) bool { return !slices.Contains(c.chain, avoid) }
		} else if _, err := fmt.Sscanf(origin, "best chain with %d relay", &k); err == nil {
			keep = func(c bfPlan) bool { return len(c.chain) == k }
		} else {
			t.Fatalf("alternative %v: origin %q", p.Chain, origin)
		}
		i := slices.IndexFunc(all, keep) // ranked: the first kept is the best
		if i < 0 || !near(all[i].bps, p.PredictedBps) {
			t.Fatalf("alternative %v (%s) predicts %v; brute force's: %v", p.Chain, origin, p.PredictedBps, all[max(i, 0):])
		}
	}
}
