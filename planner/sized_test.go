package planner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Slow start, round by round, worked out by hand: IW10 of 1448 B is
// 14,480 B; windows double each round; the first round arrives with the
// first byte, so a size the first round holds costs no ramp time.
func TestSlowStartRounds(t *testing.T) {
	const iw = 14480.0
	for _, tc := range []struct {
		name        string
		rateBps     float64 // the steady rate: one 10 ms round carries rate × 10 / 8000 bytes
		sizeBytes   int64
		rounds      int
		rampMs      float64
		steadyMs    float64
		completionM float64
	}{
		// Rounds carry 14,480, 28,960, 57,920 … (fast enough never to cap).
		{"first round", 10e9, 14480, 1, 0, 0, 100},
		{"one byte over", 10e9, 14481, 2, 10, 0, 110},
		{"two rounds", 10e9, 43440, 2, 10, 0, 110},
		{"three rounds", 10e9, 43441, 3, 20, 0, 120},
		// 40 Mbit/s over 10 ms is 50,000 B a round: 14,480 and 28,960 are
		// the ramp (43,440 B, 2 rounds); 57,920 would exceed it, so the
		// rest, 56,560 B, moves at 40 Mbit/s: 11.312 ms.
		{"ramp then steady", 40e6, 100000, 2, 10, 56560 * 8000 / 40e6, 100 + 10 + 11.312},
		// 8 Mbit/s is 10,000 B a round, below the initial window: no
		// ramp; the first round carries 10,000 B, the rest 20 ms.
		{"no ramp", 8e6, 30000, 1, 0, 20, 120},
		{"no ramp, small", 8e6, 5000, 1, 0, 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := flow{setupMs: 100, rttMs: 10, rateBps: tc.rateBps, iwBytes: iw}.transfer(tc.sizeBytes)
			if got.Rounds != tc.rounds || !near(got.RampMs, tc.rampMs) || !near(got.SteadyMs, tc.steadyMs) ||
				!near(got.CompletionMs, tc.completionM) || got.SetupMs != 100 || got.RampRTTMs != 10 {
				t.Errorf("got %+v, want %d rounds, ramp %v ms, steady %v ms, completion %v ms",
					got, tc.rounds, tc.rampMs, tc.steadyMs, tc.completionM)
			}
		})
	}
}

func TestSetupKinds(t *testing.T) {
	// 4 segments of 12.5 ms, the last 12.5 ms; direct 50 ms.
	for kind, want := range map[SetupKind]float64{SetupWarm: 100, SetupOptimistic: 62.5, SetupCold: 175} {
		if got := setupMs(kind, 3, 50, 12.5); got != want {
			t.Errorf("%s: %v ms, want %v", kind, got, want)
		}
		if got := setupMs(kind, 0, 50, 50); got != 100 {
			t.Errorf("%s direct: %v ms, want 100 (handshake + request)", kind, got)
		}
	}
}

// splitMatrix is split4: a 50 ms path with relays every 12.5 ms, all
// windows unknown (3 MiB).
func splitMatrix() *Matrix {
	return lineMatrix(
		spot{name: "client", x: 0}, spot{name: "srv", x: 50},
		spot{name: "r1", x: 12.5, relay: true}, spot{name: "r2", x: 25, relay: true}, spot{name: "r3", x: 37.5, relay: true},
	)
}

// Direct 50 ms against the chain of 4 × 12.5 ms, by hand (IW 14,480 B,
// windows 3 MiB):
//
//   - both set up in 100 ms (direct: 2 × 50; warm chain: 2 × 50), and
//     the first 14,480 B arrive with the first byte: at 10 KB they tie
//     and direct wins the tie;
//   - above 14,480 B direct needs another 50 ms round, the chain another
//     12.5 ms, and the chain stays ahead: the crossover is 14,480 B;
//   - 64 MiB: direct ramps 8 rounds (14,480 × 255 = 3,692,400 B in
//     7 × 50 ms) then 503.3 Mbit/s; the chain ramps 8 rounds in 7 × 12.5
//     ms then 2,013 × 0.98³ Mbit/s (three relays).
func TestSizeHandComputed(t *testing.T) {
	m := splitMatrix()
	const ramp = 14480 * 255
	directBps := float64(3<<20) * 8 / 0.050
	chainBps := float64(3<<20) * 8 / 0.0125 * math.Pow(0.98, 3)

	small := mustSearch(t, m, Request{SizeBytes: 10000})
	wantChain(t, small)
	if d := small.Direct.Transfer; d == nil || d.CompletionMs != 100 || d.Rounds != 1 {
		t.Fatalf("10 KB direct: %+v, want 100 ms in 1 round", d)
	}
	// Every chain along the path sets up in 100 ms too: all tie, and the
	// tie goes to the fewest relays, then the first by name.
	if c := small.Alternatives[0]; !slices.Equal(c.Chain, []string{"r1"}) || c.Transfer.CompletionMs != 100 {
		t.Fatalf("10 KB first alternative %v %+v: want r1 at 100 ms", c.Chain, c.Transfer)
	}
	wantReason(t, small, small.Best.Reasons, "direct wins: best chain via r1 finishes 10.0 KB only 0% sooner than direct (100 ms vs 100 ms) < the 10% minimum")
	if c := small.Crossover; c == nil || c.Kind != CrossoverAbove || c.Bytes != 14480 || !slices.Equal(c.Chain, []string{"r1", "r2", "r3"}) {
		t.Errorf("crossover %+v, want above 14480 bytes via r1, r2, r3", c)
	}

	const big = 64 << 20
	large := mustSearch(t, m, Request{SizeBytes: big})
	wantChain(t, large, "r1", "r2", "r3")
	// After the ramp, whole flights of a round trip (windows hold both
	// rates): 20.6 of direct's 50 ms, 21.4 of the chain's 12.5 ms.
	wantDirect := 100 + 7*50 + math.Ceil((big-ramp)*8000/directBps/50)*50
	wantChainMs := 100 + 7*12.5 + math.Ceil((big-ramp)*8000/chainBps/12.5)*12.5
	if d, c := large.Direct.Transfer, large.Best.Transfer; !near(d.CompletionMs, wantDirect) || !near(c.CompletionMs, wantChainMs) ||
		c.Rounds != 8 || !near(c.RampMs, 87.5) || !near(c.Speedup, wantDirect/wantChainMs) || d.Flights != 21 || c.Flights != 22 {
		t.Errorf("64 MiB: direct %+v, chain %+v; want %.2f and %.2f ms", d, c, wantDirect, wantChainMs)
	}
	// PredictTransfer, from the plans alone, says what the sized search did.
	for _, p := range []Plan{large.Best, large.Direct} {
		want := *p.Transfer
		want.Speedup = 0
		if got := PredictTransfer(p, Model{}, p.PredictedBps, big); got == nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("PredictTransfer(%v) = %+v, want %+v", p.Chain, got, want)
		}
	}
	if got := PredictTransfer(large.Best, Model{}, 0, big); got != nil {
		t.Errorf("PredictTransfer at 0 bit/s = %+v, want nil", got)
	}
	if !reflect.DeepEqual(large.Crossover, small.Crossover) {
		t.Errorf("the crossover depends on the size asked: %+v vs %+v", large.Crossover, small.Crossover)
	}
	txt := Explain(large)
	for _, want := range []string{
		"plan client → srv (down, 67.1 MB: ranked by completion time)",
		"67.1 MB in 462 ms (setup 100 ms + ramp 87.5 ms + steady 275 ms)",
		"crossover: the chain via r1, r2, r3 (best steady rate) finishes sooner than direct above 14.5 KB (14480 bytes)",
		"direct: client ──50.0 ms──▶ srv  503 Mbit/s, 67.1 MB in 1.50 s",
		"setup 100 ms (warm: 2 × 50.0 ms total RTT) + ramp 87.5 ms (8 rounds of slow start at 12.5 ms from 14.1 KiB) + steady 275 ms at 1.89 Gbit/s (22 window flights, a round trip each)",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("explain lacks %q:\n%s", want, txt)
		}
	}

	// Cold, by hand: the chain sets up in 2 × 50 + 2 × 37.5 = 175 ms.
	// Direct's round m ends at 100 + 50(m−1), the chain's at 175 +
	// 12.5(m−1): 150 vs 187.5, 200 vs 200 (a tie: not sooner), 250 vs
	// 212.5. So the chain is sooner above three rounds: 14,480 × 7 B.
	cold := mustSearch(t, m, Request{SizeBytes: 10000, Model: Model{Setup: SetupCold}})
	if c := cold.Crossover; c == nil || c.Kind != CrossoverAbove || c.Bytes != 14480*7 {
		t.Errorf("cold crossover %+v, want above %d bytes", c, 14480*7)
	}
	// Optimistic: 50 + 12.5 = 62.5 ms of setup, sooner at every size.
	// At 10 KB any chain ending in r3 sets up that fast: the one relay r3.
	opt := mustSearch(t, m, Request{SizeBytes: 10000, Model: Model{Setup: SetupOptimistic}})
	wantChain(t, opt, "r3")
	if c := opt.Crossover; c == nil || c.Kind != CrossoverAlways || c.Bytes != 0 {
		t.Errorf("optimistic crossover %+v, want always", c)
	}
	if !near(opt.Best.Transfer.CompletionMs, 62.5) {
		t.Errorf("optimistic 10 KB: %+v, want 62.5 ms", opt.Best.Transfer)
	}
}

// TLS links' framing, by hand on split4 at 100 KB: direct's segments carry
// 1,448 B each, so its IW10 and the two rounds after it carry 70 × 1,448 =
// 101,360 B ≥ 100,000 (3 rounds: 100 + 2 × 50 ms); a chain's carry 1,426 B
// each, 70 × 1,426 = 99,820 B < 100,000, so the chain needs a fourth round
// (100 + 3 × 12.5 ms). The crossover stays at direct's first round,
// 14,480 B: from 14,261 B up the chain needs a second round (112.5 ms)
// while direct still delivers in its first (100 ms).
func TestSizeLinkFraming(t *testing.T) {
	m := splitMatrix()
	framed := Model{LinkFramingBytes: 22} // a TLS record's header, content type and tag
	res := mustSearch(t, m, Request{SizeBytes: 100000, Model: framed})
	wantChain(t, res, "r1", "r2", "r3")
	if d, c := res.Direct.Transfer, res.Best.Transfer; d.Rounds != 3 || !near(d.CompletionMs, 200) || c.Rounds != 4 || !near(c.CompletionMs, 137.5) {
		t.Errorf("100 KB framed: direct %+v, chain %+v; want 200 ms in 3 rounds and 137.5 ms in 4", d, c)
	}
	if c := res.Crossover; c == nil || c.Kind != CrossoverAbove || c.Bytes != 14480 {
		t.Errorf("framed crossover %+v, want above 14480 bytes", c)
	}
	if got := PredictTransfer(res.Best, framed, res.Best.PredictedBps, 100000); got == nil || got.Rounds != 4 {
		t.Errorf("PredictTransfer with framing = %+v, want 4 rounds", got)
	}
	plain := mustSearch(t, m, Request{SizeBytes: 100000})
	if c := plain.Best.Transfer; c.Rounds != 3 || !near(c.CompletionMs, 125) {
		t.Errorf("100 KB unframed chain %+v, want 125 ms in 3 rounds", c)
	}
	if _, err := Search(m, Request{SizeBytes: 1, Model: Model{LinkFramingBytes: DefaultMSSBytes}}); err == nil || !strings.Contains(err.Error(), "model.link_framing_bytes") {
		t.Errorf("framing of a whole MSS: err %v, want one naming model.link_framing_bytes", err)
	}
}

// A chain that is a detour: one relay 5 ms off a 50 ms path doubles the
// steady rate but adds 10 ms to every setup round trip. Small transfers
// go direct, large ones through the relay, and the crossover separates
// them.
func TestSizeDetour(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r", Relay: true}},
		Pairs: []Pair{{A: "client", B: "srv", RTTMs: 50}, {A: "client", B: "r", RTTMs: 30}, {A: "r", B: "srv", RTTMs: 30}},
	}
	rate := mustSearch(t, m, Request{})
	wantChain(t, rate, "r")
	cross := mustSearch(t, m, Request{SizeBytes: 1}).Crossover
	if cross == nil || cross.Kind != CrossoverAbove {
		t.Fatalf("crossover %+v", cross)
	}
	below, above := mustSearch(t, m, Request{SizeBytes: cross.Bytes}), mustSearch(t, m, Request{SizeBytes: cross.Bytes + 1, Constraints: Constraints{MinGain: -1}})
	if b, d := below.Alternatives[0].Transfer.CompletionMs, below.Direct.Transfer.CompletionMs; b < d {
		t.Errorf("at the crossover %d B the chain finishes sooner (%v < %v ms)", cross.Bytes, b, d)
	}
	wantChain(t, below)
	wantChain(t, above, "r")
	if b, d := above.Best.Transfer.CompletionMs, above.Direct.Transfer.CompletionMs; b >= d {
		t.Errorf("above the crossover the chain is not sooner (%v >= %v ms)", b, d)
	}
	// The setup, by hand: direct 2 × 50, the chain 2 × 60.
	if below.Direct.Transfer.SetupMs != 100 || below.Alternatives[0].Transfer.SetupMs != 120 {
		t.Errorf("setups %v and %v ms, want 100 and 120", below.Direct.Transfer.SetupMs, below.Alternatives[0].Transfer.SetupMs)
	}
	wantReason(t, below, below.Best.Reasons, "direct wins: best chain via r finishes")
}

// With a size the fastest chain is not always the soonest: here the
// chain via a, b, c has the best steady rate (three 40 ms segments), but
// a (two 50 ms segments, 20 ms less in all) sets up sooner. Small
// transfers take a, large ones b, c.
func TestSizePrefersShorterChain(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "a", Relay: true}, {Name: "b", Relay: true}, {Name: "c", Relay: true}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 100},
			{A: "client", B: "a", RTTMs: 50}, {A: "a", B: "srv", RTTMs: 50},
			{A: "client", B: "b", RTTMs: 40}, {A: "b", B: "c", RTTMs: 40}, {A: "c", B: "srv", RTTMs: 40},
		},
	}
	wantChain(t, mustSearch(t, m, Request{}), "b", "c")
	// Sooner outright, not a tie won by fewer relays.
	wantChain(t, mustSearch(t, m, Request{SizeBytes: 1 << 18, Model: Model{ErrorMargin: -1}}), "a")
	wantChain(t, mustSearch(t, m, Request{SizeBytes: 1 << 30}), "b", "c")
}

// Size 0 is the steady-rate planner: no transfer, no crossover, the same
// Result as a Request that never heard of sizes.
func TestSizeZeroUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		m, req := randomCase(rng)
		res, err := Search(m, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.SizeBytes != 0 || res.Crossover != nil {
			t.Fatalf("case %d: size %d, crossover %+v", i, res.SizeBytes, res.Crossover)
		}
		for _, p := range append([]Plan{res.Best, res.Direct}, res.Alternatives...) {
			if p.Transfer != nil {
				t.Fatalf("case %d: a transfer without a size: %+v", i, p.Transfer)
			}
		}
	}
	if _, err := Search(splitMatrix(), Request{Client: "client", Destination: "srv", SizeBytes: -1}); err == nil {
		t.Error("a negative size is accepted")
	}
	if _, err := Search(splitMatrix(), Request{Client: "client", Destination: "srv", Model: Model{Setup: "lukewarm"}}); err == nil {
		t.Error("an unknown setup kind is accepted")
	}
}

// bfCompletionMs is the completion model written out again, round by
// round: time in ms for sizeBytes over a path through relays relays whose
// RTTs are rttsMs (client side first) at steady rate rateBps, set up as
// req's model says, the steady state flowing, without loss.
func bfCompletionMs(bf *bruteForce, req Request, sizeBytes int64, relays int, rttsMs []float64, rateBps float64) float64 {
	return bfPathMs(bf, req, sizeBytes, relays, rttsMs, nil, rateBps, 0)
}

// bfPathMs is the time of the path's slowest ramp: each segment ramps on
// its own, carrying mss bytes a packet, a relay link (every segment of a
// chain but the destination's) LinkFramingBytes less; of segments that
// carry alike, the longest is the slowest, so the path's time is the
// later of its longest link's and its destination segment's (direct: its
// one segment's). losses and stepMs as bfLossyCompletionMs.
func bfPathMs(bf *bruteForce, req Request, sizeBytes int64, relays int, rttsMs, losses []float64, rateBps, stepMs float64) float64 {
	kind := SetupKind(cmpOr(string(req.Model.Setup), "warm"))
	segments := float64(cmpOr(req.Model.InitialWindowSegments, 10))
	last := len(rttsMs) - 1
	t := bfLossyCompletionMs(sizeBytes, kind, segments*bf.mss, rttsMs, rttsMs[last], losses, bf.mss, rateBps, stepMs)
	if relays > 0 {
		framed := bf.mss - float64(req.Model.LinkFramingBytes)
		t = math.Max(t, bfLossyCompletionMs(sizeBytes, kind, segments*framed, rttsMs, slices.Max(rttsMs[:last]), losses, framed, rateBps, stepMs))
	}
	return t
}

// bfLossyCompletionMs is the time of a path whose RTTs are rttsMs as one
// ramp of rampMs from iwBytes, with each segment's loss (losses beside
// rttsMs; nil: none) and packets of pktBytes: the rounds of the ramp
// walked again, each segment with loss p adding its RTT times the chance
// that a round of n packets lost one, 1 − (1 − p)ⁿ, for each round of the
// ramp the transfer takes and once more for its last flight (the last
// round's packets, or, past the ramp, a round trip of that segment at the
// steady rate). stepMs > 0: the steady state in whole flights of that
// round trip (bfRampedMs).
func bfLossyCompletionMs(sizeBytes int64, kind SetupKind, iwBytes float64, rttsMs []float64, rampMs float64, losses []float64, pktBytes, rateBps, stepMs float64) float64 {
	t := bfRampedMs(sizeBytes, kind, iwBytes, rttsMs, rampMs, rateBps, stepMs)
	if math.IsInf(t, 1) || pktBytes <= 0 {
		return t
	}
	perRound := rateBps * rampMs / 8000
	size := float64(sizeBytes)
	var rounds []float64 // bytes of each ramp round the transfer takes
	got, steady := 0.0, false
	for w := iwBytes; got < size; w *= 2 {
		if len(rounds) > 0 && w >= perRound {
			steady = true
			break
		}
		b := math.Min(math.Min(w, perRound), size-got)
		rounds = append(rounds, b)
		got += b
	}
	for i, p := range losses {
		if p <= 0 || p >= 1 {
			continue
		}
		lost := func(bytes float64) float64 { return 1 - math.Pow(1-p, math.Ceil(bytes/pktBytes)) }
		last := rounds[len(rounds)-1]
		if steady {
			last = math.Min(size, rateBps*rttsMs[i]/8000)
		}
		n := lost(last)
		for _, b := range rounds {
			n += lost(b)
		}
		t += n * rttsMs[i]
	}
	return t
}

// bfRampedMs is bfLossyCompletionMs without loss; with stepMs > 0 the
// bytes after the ramp arrive rateBps × stepMs at a time, one flight per
// stepMs.
func bfRampedMs(sizeBytes int64, kind SetupKind, iwBytes float64, rttsMs []float64, rampMs, rateBps, stepMs float64) float64 {
	if rateBps <= 0 {
		return math.Inf(1)
	}
	sum := 0.0
	for _, r := range rttsMs {
		sum += r
	}
	longest := rampMs
	last := rttsMs[len(rttsMs)-1]
	t := 2 * sum // direct: handshake + request; warm chain: header there, status back, request and response
	if len(rttsMs) > 1 {
		switch kind {
		case SetupOptimistic:
			t = sum + last
		case SetupCold:
			t = 2*sum + 2*(sum-last)
		}
	}
	perRound := rateBps * longest / 8000 // bytes a round carries at the steady rate
	got := math.Min(iwBytes, perRound)   // the first round, with the first byte
	size := float64(sizeBytes)
	for w := iwBytes * 2; got < size; w *= 2 {
		if w >= perRound {
			if stepMs > 0 {
				flight := rateBps * stepMs / 8000
				for ; got < size && !near(got, size); got += flight {
					t += stepMs
				}
				return t
			}
			return t + (size-got)*8/rateBps*1000
		}
		t += longest
		got += w
	}
	return t
}

// bfSized is every chain of the brute force with its completion time,
// ranked by completion time with ties within the error margin going to
// the fewest relays, and direct's.
func bfSized(bf *bruteForce, req Request) (chains []bfPlan, times map[string]float64, direct float64) {
	times = map[string]float64{}
	timeOf := func(p bfPlan) float64 {
		path := append(append([]string{req.Client}, p.chain...), req.Destination)
		var rtts, losses []float64
		for i := 0; i+1 < len(path); i++ {
			pair := bf.pairs[[2]string{path[i], path[i+1]}]
			rtts, losses = append(rtts, pair.RTTMs), append(losses, bf.segLoss(path[i], path[i+1], cmpOr(req.Direction, Down)))
		}
		return bfPathMs(bf, req, req.SizeBytes, len(p.chain), rtts, losses, p.bps, p.stepMs)
	}
	chains = bf.chains()
	for _, p := range chains {
		times[strings.Join(p.chain, ",")] = timeOf(p)
	}
	slices.SortFunc(chains, func(a, b bfPlan) int {
		ta, tb := times[strings.Join(a.chain, ",")], times[strings.Join(b.chain, ",")]
		if !near(ta, tb) {
			return cmpCompare(ta, tb)
		}
		if !near(a.rttMs, b.rttMs) {
			return cmpCompare(a.rttMs, b.rttMs)
		}
		if len(a.chain) != len(b.chain) {
			return len(a.chain) - len(b.chain)
		}
		return slices.Compare(a.chain, b.chain)
	})
	if len(chains) > 1 {
		ceiling, w := times[strings.Join(chains[0].chain, ",")]*(1+bf.margin), 0
		for i := 1; i < len(chains); i++ {
			ti := times[strings.Join(chains[i].chain, ",")]
			if ti > ceiling && !near(ti, ceiling) {
				break
			}
			if len(chains[i].chain) < len(chains[w].chain) {
				w = i
			}
		}
		win := chains[w]
		copy(chains[1:w+1], chains[:w])
		chains[0] = win
	}
	direct = math.Inf(1)
	if d, ok := bf.plan(nil, req.Direction); ok {
		direct = timeOf(d)
	}
	return chains, times, direct
}

func cmpOr[T comparable](v, dflt T) T {
	var zero T
	if v == zero {
		return dflt
	}
	return v
}

func cmpCompare(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestSizedSearchMatchesBruteForce: with a size, on random small matrices,
// the plan Search picks finishes as soon as the best of all chains by the
// brute force's own completion model, direct wins exactly when it should,
// and every plan's transfer is the brute force's.
func TestSizedSearchMatchesBruteForce(t *testing.T) {
	sizedSearchMatchesBruteForce(t, rand.New(rand.NewPCG(5, 6)), 2000, nil)
}

// sizedSearchMatchesBruteForce is TestSizedSearchMatchesBruteForce over
// cases random inputs (a tenth with -short), each changed by vary where
// not nil.
func sizedSearchMatchesBruteForce(t *testing.T, rng *rand.Rand, cases int, vary func(*Matrix, *Request)) {
	if testing.Short() {
		cases /= 10
	}
	chainWins, smallWins, boundary := 0, 0, 0
	for i := range cases {
		m, req := randomCase(rng)
		req.SizeBytes = int64(math.Exp(rng.Float64() * math.Log(4e9))) // 1 B .. 4 GB, log-uniform
		req.Model.Setup = []SetupKind{"", SetupWarm, SetupOptimistic, SetupCold}[rng.IntN(4)]
		if rng.IntN(4) == 0 {
			req.Model.InitialWindowSegments = 1 + rng.IntN(40)
		}
		if rng.IntN(3) == 0 {
			req.Model.LinkFramingBytes = rng.IntN(100) // below any MSS the cases draw (536 up)
		}
		if vary != nil {
			vary(m, &req)
		}
		res, err := Search(m, req)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		bf := newBruteForce(m, req)
		all, times, direct := bfSized(bf, req)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s\nrequest %+v\nmatrix %+v\nbrute force top %+v, direct %v ms\nresult:\n%s",
				i, fmt.Sprintf(format, args...), req, m, all[:min(len(all), 3)], direct, Explain(res))
		}
		dPlan, directKnown := bf.plan(nil, req.Direction)
		if directKnown && dPlan.bps > 0 && (res.Direct.Transfer == nil || !near(res.Direct.Transfer.CompletionMs, direct)) {
			fail("direct transfer %+v, brute force %v ms", res.Direct.Transfer, direct)
		}
		var best float64
		if len(all) > 0 {
			best = times[strings.Join(all[0].chain, ",")]
		}
		// Ranked above direct: sooner, or as soon with less total RTT.
		rankedAbove := len(all) > 0 && (best < direct && !near(best, direct) || near(best, direct) && all[0].rttMs < dPlan.rttMs && !near(all[0].rttMs, dPlan.rttMs))
		wantChain := len(all) > 0 && (!directKnown || dPlan.bps == 0 || best*(1+bf.gain) <= direct && rankedAbove)
		switch got := len(res.Best.Chain) > 0; {
		case got != wantChain:
			if !near(best*(1+bf.gain), direct) {
				fail("chain wins = %v, brute force says %v", got, wantChain)
			}
			boundary++
		case wantChain:
			chainWins++
			if res.Best.Transfer == nil || !near(res.Best.Transfer.CompletionMs, best) {
				fail("best %v finishes %+v, brute force %v ms (via %v)", res.Best.Chain, res.Best.Transfer, best, all[0].chain)
			}
			byRate := bf.chains()[0]
			if times[strings.Join(byRate.chain, ",")] > best*(1+bf.margin) {
				smallWins++ // the steady-rate pick would have been wrong here
			}
		}
		if !wantChain && len(all) > 0 && len(res.Alternatives) > 0 && !near(res.Alternatives[0].Transfer.CompletionMs, best) {
			fail("direct won; first alternative %v finishes %+v, brute force's best chain %v ms", res.Alternatives[0].Chain, res.Alternatives[0].Transfer, best)
		}
		checkCrossover(t, bf, req, res, direct, fail)
		for _, p := range append([]Plan{res.Best}, res.Alternatives...) {
			if len(p.Chain) == 0 {
				continue
			}
			checkPlan(t, bf, req, p)
			if want, ok := times[strings.Join(p.Chain, ",")]; !ok || p.Transfer == nil || !near(p.Transfer.CompletionMs, want) {
				fail("chain %v finishes %+v, brute force %v ms", p.Chain, p.Transfer, want)
			}
		}
		for j := 1; j < len(res.Alternatives); j++ {
			a, b := res.Alternatives[j-1], res.Alternatives[j]
			if (a.Transfer.CompletionMs > b.Transfer.CompletionMs && (j > 1 || len(res.Best.Chain) > 0)) || slices.Equal(a.Chain, b.Chain) {
				fail("alternatives %d and %d out of order or equal", j-1, j)
			}
		}
	}
	t.Logf("%d cases, %d won by a chain, %d of them where the fastest chain is not the soonest, %d at a boundary within rounding",
		cases, chainWins, smallWins, boundary)
	if chainWins < cases/5 || smallWins < cases/100 {
		t.Errorf("only %d chain wins and %d where size matters, of %d cases", chainWins, smallWins, cases)
	}
	if boundary > chainWins/100 {
		t.Errorf("%d boundary cases of %d chain wins", boundary, chainWins)
	}
}

// checkCrossover verifies res.Crossover by the brute force's completion
// model: not sooner at the crossover, sooner just above it and at sizes
// far above; always sooner; or not sooner for a huge transfer.
func checkCrossover(t *testing.T, bf *bruteForce, req Request, res *Result, direct float64, fail func(string, ...any)) {
	t.Helper()
	c := res.Crossover
	dPlan, directKnown := bf.plan(nil, req.Direction)
	byRate := bf.chains()
	if c == nil {
		if directKnown && len(byRate) > 0 {
			fail("no crossover")
		}
		return
	}
	p, ok := bf.plan(c.Chain, req.Direction)
	if !ok || !near(p.bps, byRate[0].bps) {
		fail("crossover chain %v is not the best by steady rate (%v)", c.Chain, byRate[0].chain)
	}
	if dPlan.bps == 0 {
		if c.Kind != CrossoverAlways {
			fail("direct moves nothing, crossover %+v", c)
		}
		return
	}
	rttsOf := func(chain []string) []float64 {
		path := append(append([]string{req.Client}, chain...), req.Destination)
		var rtts []float64
		for i := 0; i+1 < len(path); i++ {
			rtts = append(rtts, bf.pairs[[2]string{path[i], path[i+1]}].RTTMs)
		}
		return rtts
	}
	tie := func(size int64) bool {
		return near(bfCompletionMs(bf, req, size, len(c.Chain), rttsOf(c.Chain), p.bps), bfCompletionMs(bf, req, size, 0, rttsOf(nil), dPlan.bps))
	}
	sooner := func(size int64) bool {
		ct := bfCompletionMs(bf, req, size, len(c.Chain), rttsOf(c.Chain), p.bps)
		dt := bfCompletionMs(bf, req, size, 0, rttsOf(nil), dPlan.bps)
		if near(ct, dt) {
			return false
		}
		return ct < dt
	}
	switch c.Kind {
	case CrossoverAlways:
		for _, size := range []int64{1, 1000, 1e5, 1e7, 1e9, 1e12} {
			if !sooner(size) {
				fail("crossover always, not sooner at %d B", size)
			}
		}
	case CrossoverNever:
		if sooner(1e15) {
			fail("crossover never, sooner at 1e15 B")
		}
	case CrossoverAbove:
		x := c.Bytes
		// Just above: 1 B, or a millionth, where the brute force's
		// tolerance calls sizes right at the crossing a tie (with rates
		// that differ by less than a thousandth, also a millionth above).
		above := x + 1 + x/1e6
		if sooner(x) && x > 0 || !sooner(above) && !tie(above) || !sooner(x*2+1) || !sooner(x*100+1) {
			fail("crossover above %d B: sooner at it %v, just above %v, twice %v, 100× %v", x, sooner(x), sooner(x+1), sooner(2*x+1), sooner(100*x+1))
		}
	default:
		fail("crossover kind %q", c.Kind)
	}
}

// Loss, by hand: packets of 1,000 B, IW10, a 40 ms segment losing 1 %. A
// 70,000 B transfer is three rounds of 10, 20 and 40 packets, the last
// also its last flight: each round loses a packet with probability
// 1 − 0.99ⁿ (0.0956, 0.1821, 0.3310), the last flight once more, and each
// such round costs 40 ms: 40 × 0.9397 = 37.59 ms. In the steady state
// only the last flight counts, so 64 MiB and 128 MiB add the same: at
// 1 Gbit/s over 40 ms (5,000,000 B a round) the ramp is 9 rounds of 10 …
// 2,560 packets, which lose one with probability summing to 5.92, and the
// last flight of 5,000 packets surely: 40 × 6.92 = 276.8 ms.
func TestLossStallHandComputed(t *testing.T) {
	f := flow{setupMs: 100, rttMs: 40, rateBps: 1e9, iwBytes: 10000, pktBytes: 1000,
		lossy: []lossySegment{{rttMs: 40, loss: 0.01}}}
	got := f.transfer(70000)
	if got.Rounds != 3 || math.Abs(got.LossMs-37.59) > 0.01 || !near(got.CompletionMs, 100+80+got.LossMs) {
		t.Errorf("70 KB: %+v, want 3 rounds and 37.59 ms of loss", got)
	}
	clean := f
	clean.lossy = nil
	if c := clean.transfer(70000); c.LossMs != 0 || !near(c.CompletionMs, 180) {
		t.Errorf("70 KB without loss: %+v", c)
	}
	a, b := f.transfer(64<<20), f.transfer(128<<20)
	if a.LossMs != b.LossMs || math.Abs(a.LossMs-276.8) > 0.1 {
		t.Errorf("64 MiB loss %.1f ms, 128 MiB %.1f ms: want both 276.8 ms", a.LossMs, b.LossMs)
	}
}

// The search counts loss in completion times as PredictTransfer does: a
// lossy first segment on the 1 MiB plan's chain (BBR senders: the loss
// does not bound the rate), the plan carries LossMs, and PredictTransfer
// from the plan alone agrees.
func TestSizeCountsLoss(t *testing.T) {
	m := splitMatrix()
	for i := range m.Nodes {
		m.Nodes[i].CongestionControl = "bbr"
	}
	first := mustSearch(t, m, Request{SizeBytes: 1 << 20}).Best.Chain
	if len(first) == 0 {
		t.Fatal("want a chain at 1 MiB")
	}
	for i := range m.Pairs {
		if p := &m.Pairs[i]; p.A == "client" && p.B == first[0] || p.B == "client" && p.A == first[0] {
			p.Loss = 0.01
		}
	}
	res := mustSearch(t, m, Request{SizeBytes: 1 << 20})
	var lossy *Plan
	for _, p := range append([]Plan{res.Best}, res.Alternatives...) {
		if len(p.Chain) > 0 && p.Chain[0] == first[0] {
			lossy = &p
			break
		}
	}
	if lossy == nil || lossy.Transfer == nil || !(lossy.Transfer.LossMs > 0) {
		t.Fatalf("no plan through the lossy client–%s with loss counted: best %v %+v, alternatives %d", first[0], res.Best.Chain, res.Best.Transfer, len(res.Alternatives))
	}
	want := *lossy.Transfer
	want.Speedup = 0
	if got := PredictTransfer(*lossy, Model{}, lossy.PredictedBps, 1<<20); got == nil || !reflect.DeepEqual(*got, want) {
		t.Errorf("PredictTransfer(%v) = %+v, want %+v", lossy.Chain, got, want)
	}
}

// After the ramp a window-held rate delivers whole flights, one a round
// trip of the bottleneck segment; a capacity-held one flows. By hand: 84
// Mbit/s over 30 ms is 315,000 B a flight; the ramp's five rounds carry
// 448,880 B (14,480 × 31); 1 MB leaves 551,120 B, 1.75 flights: two, 60
// ms, where a flowing steady state takes 52.49.
func TestWindowFlights(t *testing.T) {
	f := flow{setupMs: 100, rttMs: 30, rateBps: 84e6, iwBytes: 14480, stepMs: 30}
	if got := f.transfer(1e6); got.Flights != 2 || !near(got.SteadyMs, 60) || !near(got.CompletionMs, 280) {
		t.Errorf("1 MB held by a window: %+v, want 2 flights, steady 60 ms, 280 ms", got)
	}
	if got := f.transfer(448880 + 315000); got.Flights != 1 || !near(got.CompletionMs, 250) {
		t.Errorf("a size that ends a flight: %+v, want 1 flight, 250 ms", got)
	}
	f.stepMs = 0
	if got := f.transfer(1e6); got.Flights != 0 || !near(got.SteadyMs, 551120*8000/84e6) {
		t.Errorf("1 MB held by a capacity: %+v, want the rest at the rate, 52.49 ms", got)
	}

	// Through Search: split4's plans are held by windows; a limit on the
	// destination below every window bound makes them flow.
	m := splitMatrix()
	if p := mustSearch(t, m, Request{SizeBytes: 64 << 20}).Best; p.Transfer.Flights == 0 {
		t.Errorf("window-held plan %v: %+v, want whole flights", p.Chain, p.Transfer)
	}
	for i := range m.Nodes {
		if m.Nodes[i].Name == "srv" {
			m.Nodes[i].LimitBps = 100e6
		}
	}
	res := mustSearch(t, m, Request{SizeBytes: 64 << 20})
	for _, p := range []Plan{res.Best, res.Direct} {
		if p.Transfer.Flights != 0 {
			t.Errorf("limit-held plan %v: %+v, want the steady state flowing", p.Chain, p.Transfer)
		}
		want := *p.Transfer
		want.Speedup = 0
		if got := PredictTransfer(p, Model{}, p.PredictedBps, 64<<20); got == nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("PredictTransfer(%v) = %+v, want %+v", p.Chain, got, want)
		}
	}
}

// The destination's segment carries full packets, the relay links framed
// ones, so a shorter link can ramp as slowly as a longer destination
// segment, or the other way round: the path takes the later. By hand, 100
// KB: a 1,426 B link needs four rounds (99,820 B in three), a 1,448 B
// destination segment three (101,360 B). sweep-20-30 (20 ms link, 30 ms
// to the server): 3 × 20 = 2 × 30 = 60 ms of ramp; sweep-10-40: 3 × 10
// against 2 × 40, 80 ms, the server's segment. Four rounds of the longest
// segment, as before, said 90 and 120.
func TestLastSegmentRampsOnFullPackets(t *testing.T) {
	req, err := Request{Model: Model{LinkFramingBytes: 22}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		linkMs, lastMs, rampMs, rampRTTMs float64
	}{{20, 30, 60, 20}, {10, 40, 80, 40}, {40, 10, 120, 40}} {
		got := req.Model.pathFlow(1, 100, tc.linkMs, tc.lastMs, 1e10).transfer(100000)
		if !near(got.RampMs, tc.rampMs) || !near(got.CompletionMs, 100+tc.rampMs) || got.RampRTTMs != tc.rampRTTMs {
			t.Errorf("link %v ms, then %v ms: %+v, want a ramp of %v ms over the %v ms segment", tc.linkMs, tc.lastMs, got, tc.rampMs, tc.rampRTTMs)
		}
	}
}
