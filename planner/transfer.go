package planner

import (
	"math"
	"slices"
)

// The completion-time model for a transfer of known size (Request.SizeBytes).
//
// A transfer's time is setup, then slow start, then the steady rate:
//
//	completion_ms = setup_ms + ramp_ms + steady_ms (+ loss_ms, see lossStallMs)
//
// It is computed for a flow: the setup time, the RTT slow start is
// counted in, and the steady rate (Plan.PredictedBps). A chain's segments
// ramp up in parallel, each doubling its window once per its own round
// trip, so the chain delivers as its slowest segment does: of those that
// carry the same per packet, the longest, which doubles least often and
// has the largest window to fill. The relay links carry less per packet
// than the destination's segment (their TLS framing, while they ramp:
// Model.LinkFramingBytes), so the slowest is the longest link or the
// destination's segment, whichever delivers later: each is one TCP flow
// with its RTT ramping up to the chain's steady rate, and the transfer
// takes the later one's time. In the sweep-20-30 lab (a 20 ms link, then
// 30 ms to the server) 100 KB takes the server's segment three rounds of
// 1,448 B segments, the link four rounds of 1,426 B ones: 60 ms either
// way, where counting four rounds of the longest segment (90 ms) had the
// model run early in the lab (docs/planning.md#transfer-size-completion-time).

// After the ramp the bytes move at the steady rate, but how they arrive
// depends on what holds the rate. A link's capacity (a limit, a learnt
// rate) or loss keeps them flowing. A window does not: the bottleneck
// segment's sender sends a window's worth, then waits a round trip of
// that segment for its acknowledgements, so the bytes arrive a flight per
// round trip, and a transfer that ends in a flight completes with it, not
// a fraction of a round trip into it, as a capture at the client in the
// plan-capacity lab showed (docs/planning.md#transfer-size-completion-time).
// The model counts such a steady state in whole flights (flow.stepMs); it
// does not count a flight's own time on the wire (its bytes at the link's
// rate, mostly unknown), so it stays a little early, by up to a flight's
// serialization.

// flow is what a completion time depends on.
type flow struct {
	setupMs float64 // until the first byte (and the initial window) arrives, ms
	rttMs   float64 // the RTT slow start doubles in, ms
	rateBps float64 // the steady rate, bits/s; 0 = moves nothing
	iwBytes float64 // the initial window's payload: the first round's bytes
	// stepMs is the round trip of the segment whose window holds the
	// steady rate, ms: after the ramp the bytes arrive a flight (rate ×
	// stepMs) per stepMs. 0 = a capacity or loss holds it: they flow.
	stepMs float64
	// pktBytes is one packet's payload, bytes (for lossy; 0 when none).
	pktBytes float64
	// lossy are the path's segments that lose packets (see lossStallMs).
	lossy []lossySegment
	// The destination's segment, through relays: it carries full
	// packets, not the links' framed ones (rttMs, iwBytes and pktBytes
	// are the longest link's), so it may deliver later although shorter.
	// lastRttMs, lastIwBytes and lastPktBytes are its; lastRttMs 0 =
	// none (direct: rttMs is its one segment).
	lastRttMs, lastIwBytes, lastPktBytes float64
}

// lossySegment is a segment's RTT, ms, and its packet loss, a fraction.
type lossySegment struct{ rttMs, loss float64 }

// lossStallMs is what l's loss adds to a transfer's time, ms, expected: a
// lost packet holds the bytes behind it at the segment's receiver for
// about one round trip of that segment while it is detected and sent
// again, whatever the congestion control (a loss-based sender's lower
// rate is in rateBps already). In slow start that is a round of the ramp
// lost, once per round that loses a packet (rounds[j] packets in round
// j); a loss in the transfer's last flight (last packets) costs a round
// trip more, no later packet revealing it (a tail loss probe). In the
// steady state the sender keeps its rate and the pipeline behind the
// hole catches up: not counted. For BBR relays on a 40 ms link losing 1 %
// this is 4 ms at 10 KB, 38 ms at 100 KB and 0.11 s at 1 MB.
func lossStallMs(l lossySegment, rounds []float64, last float64) float64 {
	if !(l.loss > 0 && l.loss < 1) {
		return 0
	}
	p := func(packets float64) float64 { return 1 - math.Pow(1-l.loss, packets) }
	n := p(last)
	for _, r := range rounds {
		n += p(r)
	}
	return n * l.rttMs
}

// setupMs is the setup time of a path before its first byte, ms: direct
// (no relays) DirectSetupRTTs × its RTT; a chain by kind, with sumMs the
// sum of its segment RTTs and lastMs its last segment's (see SetupKind).
func setupMs(kind SetupKind, relays int, sumMs, lastMs float64) float64 {
	switch {
	case relays == 0:
		return DirectSetupRTTs * sumMs
	case kind == SetupOptimistic:
		return sumMs + lastMs
	case kind == SetupCold:
		return 2*sumMs + 2*(sumMs-lastMs)
	}
	return 2 * sumMs
}

// rounds walks slow start: visit is called for each round j = 0, 1, … of
// the ramp with the bytes delivered by the end of it (cumulative, a
// float); it returns false to stop. Round j carries min(iw·2^j, cap)
// bytes, cap being one RTT at the steady rate. The ramp is every round
// whose window is below cap, and at least the first: the initial window
// arrives with the first byte, whatever the rate. It returns the bytes the
// ramp delivers and its number of rounds.
func (f flow) rounds(visit func(j int, cumBytes float64) bool) (rampBytes float64, n int) {
	capBytes := f.rateBps * f.rttMs / 8000
	w := f.iwBytes
	for j := 0; ; j++ {
		if j > 0 && w >= capBytes || j > 200 {
			return rampBytes, j
		}
		rampBytes += min(w, capBytes)
		if visit != nil && !visit(j, rampBytes) {
			return rampBytes, j + 1
		}
		w *= 2
	}
}

// ramps are the flows whose latest completion is f's: the longest link's
// (or direct's one segment), and the destination's segment's when f has
// one (see flow).
func (f flow) ramps() (out [2]flow, n int) {
	one := f
	one.lastRttMs = 0
	out[0], n = one, 1
	if f.lastRttMs > 0 {
		last := one
		last.rttMs, last.iwBytes, last.pktBytes = f.lastRttMs, f.lastIwBytes, f.lastPktBytes
		out[1], n = last, 2
	}
	return out, n
}

// transfer is the completion of sizeBytes over f: of its ramps, the one
// that completes last. f.rateBps must be > 0.
func (f flow) transfer(sizeBytes int64) Transfer {
	rs, n := f.ramps()
	t := rs[0].transferOne(sizeBytes)
	for _, r := range rs[1:n] {
		if u := r.transferOne(sizeBytes); u.CompletionMs > t.CompletionMs {
			t = u
		}
	}
	return t
}

// transferOne is the completion of sizeBytes over f as one ramp (f's
// last segment left out). A size the ramp delivers takes the rounds it
// needs, the first arriving with the first byte; the bytes after the ramp
// move at the steady rate.
func (f flow) transferOne(sizeBytes int64) Transfer {
	t := Transfer{SizeBytes: sizeBytes, SetupMs: f.setupMs, RampRTTMs: f.rttMs}
	size := float64(sizeBytes)
	done := false
	rampBytes, n := f.rounds(func(j int, cumBytes float64) bool {
		if cumBytes >= size {
			t.Rounds, done = j+1, true
			return false
		}
		return true
	})
	if !done {
		t.Rounds = n
		t.SteadyMs = (size - rampBytes) * 8000 / f.rateBps
		if f.stepMs > 0 {
			// Whole flights; a hair under an integer is that integer
			// (float rounding of a size that ends a flight exactly).
			t.Flights = int(math.Ceil(t.SteadyMs/f.stepMs - 1e-9))
			t.SteadyMs = float64(t.Flights) * f.stepMs
		}
	}
	t.RampMs = float64(t.Rounds-1) * f.rttMs
	if len(f.lossy) > 0 && f.pktBytes > 0 {
		// Packets per round of the ramp, and in the last flight: the last
		// round's, or a round trip of the lossy segment at the steady rate.
		var rounds []float64
		prev, lastBytes := 0.0, 0.0
		f.rounds(func(j int, cumBytes float64) bool {
			if j >= t.Rounds {
				return false
			}
			sent := min(cumBytes, size) - prev
			rounds = append(rounds, math.Ceil(sent/f.pktBytes))
			prev, lastBytes = cumBytes, sent
			return true
		})
		for _, l := range f.lossy {
			last := lastBytes
			if !done { // the steady state's last round trip of l
				last = min(size, f.rateBps*l.rttMs/8000)
			}
			t.LossMs += lossStallMs(l, rounds, math.Ceil(last/f.pktBytes))
		}
	}
	t.CompletionMs = t.SetupMs + t.RampMs + t.SteadyMs + t.LossMs
	if t.CompletionMs > 0 {
		t.EffectiveBps = size * 8000 / t.CompletionMs
	}
	return t
}

// completionMs is f.transfer's CompletionMs; +Inf when f moves nothing.
func (f flow) completionMs(sizeBytes int64) float64 {
	if f.rateBps <= 0 {
		return math.Inf(1)
	}
	return f.transfer(sizeBytes).CompletionMs
}

// maxCrossoverBytes bounds a reported crossover: far beyond any transfer.
const maxCrossoverBytes = 1 << 60

// crossover finds from which size chain finishes sooner than direct: the
// largest size (bytes) at which it does not, when it does for every size
// above; CrossoverAlways when it does at every size, CrossoverNever when
// it does not for large sizes. Both flows must move data.
//
// Each completion time is a step function of the size during its ramp
// (constant between the round boundaries) and linear after it, so their
// difference is linear between the boundaries of either flow. Beyond the
// last boundary its slope says whether the chain wins large transfers;
// below, the pieces are searched from the largest down for the last size
// where the chain is not sooner (bisection within a piece, where the
// difference is monotone).
//
// The crossover is of the times without loss (lossStallMs) and with the
// steady state flowing (flow.stepMs): loss adds a term that is neither
// constant nor linear within a round, whole flights a step at each, and a
// crossover is a size to read, not a prediction.
func crossover(chain, direct flow) (string, int64) {
	chain.lossy, direct.lossy = nil, nil
	chain.stepMs, direct.stepMs = 0, 0 // whole flights: not linear either
	later := func(s int64) bool {      // chain not sooner at size s
		return chain.completionMs(s) >= direct.completionMs(s)
	}
	var bounds []int64
	for _, f := range []flow{chain, direct} {
		rs, n := f.ramps()
		for _, r := range rs[:n] {
			r.rounds(func(_ int, cumBytes float64) bool {
				bounds = append(bounds, int64(min(math.Floor(cumBytes), maxCrossoverBytes)))
				return true
			})
		}
	}
	bounds = append(bounds, 0)
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	last := bounds[len(bounds)-1]
	// The tail: both flows at their steady rates, the difference linear.
	slope := 8000/chain.rateBps - 8000/direct.rateBps // ms per byte
	switch {
	case slope > 0:
		return CrossoverNever, -1
	case later(last + 1):
		if slope == 0 {
			return CrossoverNever, -1
		}
		// The last size not sooner: the difference reaches 0 at about
		// last+1 + diff/|slope|; float rounding is settled by search.
		diff := chain.completionMs(last+1) - direct.completionMs(last+1)
		guess := float64(last+1) + diff/-slope
		if guess >= maxCrossoverBytes {
			return CrossoverAbove, maxCrossoverBytes
		}
		hi := int64(guess) + 2
		for later(hi) {
			if hi >= maxCrossoverBytes/2 {
				return CrossoverAbove, maxCrossoverBytes
			}
			hi *= 2
		}
		return CrossoverAbove, lastLater(later, last+1, hi)
	}
	for i := len(bounds) - 1; i > 0; i-- {
		lo, hi := bounds[i-1]+1, bounds[i] // the piece (bounds[i-1], bounds[i]]
		if later(hi) {
			return CrossoverAbove, hi
		}
		if later(lo) {
			return CrossoverAbove, lastLater(later, lo, hi)
		}
	}
	return CrossoverAlways, 0
}

// lastLater is the largest s in [lo, hi) with later(s), by bisection:
// later(lo) must hold, later(hi) not, and later must hold up to some size
// and not after it in between.
func lastLater(later func(int64) bool, lo, hi int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if later(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// PredictTransfer is the completion of sizeBytes over p at rateBps (p's
// predicted rate in the transfer's direction: PredictedDownBps or
// PredictedUpBps), with m's setup kind, MSS, initial window and link framing (their
// defaults where zero, as a Request's): what Plan.Transfer holds when the
// plan is made for that size, Speedup left 0. For a transfer whose size is
// known only after it ran (relayctl bench --duration). Nil when p has no
// segments, rateBps or sizeBytes is not positive, or m is invalid.
func PredictTransfer(p Plan, m Model, rateBps float64, sizeBytes int64) *Transfer {
	req, err := Request{Model: m}.withDefaults()
	if err != nil || len(p.Segments) == 0 || !(rateBps > 0) || sizeBytes <= 0 {
		return nil
	}
	m = req.Model
	sumMs, lastMs, linkMs := 0.0, 0.0, 0.0
	for i, s := range p.Segments {
		sumMs += s.RTTMs
		lastMs = s.RTTMs
		if i < len(p.Segments)-1 {
			linkMs = max(linkMs, s.RTTMs)
		}
	}
	f := m.pathFlow(len(p.Chain), setupMs(m.Setup, len(p.Chain), sumMs, lastMs), linkMs, lastMs, rateBps)
	f.stepMs = stepMs(p.Segments)
	for _, s := range p.Segments {
		if s.Loss > 0 {
			f.lossy = append(f.lossy, lossySegment{rttMs: s.RTTMs, loss: s.Loss})
		}
	}
	t := f.transfer(sizeBytes)
	return &t
}

// stepMs is flow.stepMs for a plan's segments: the RTT of its bottleneck
// (the first slowest, from the client side) when a window holds it.
func stepMs(segs []Segment) float64 {
	b := 0
	for i, s := range segs {
		if s.RateBps < segs[b].RateBps {
			b = i
		}
	}
	if windowHeld(segs[b].LimitedBy) {
		return segs[b].RTTMs
	}
	return 0
}

// windowHeld reports whether a segment limited by that (Segment.LimitedBy)
// moves a window per round trip.
func windowHeld(limitedBy string) bool {
	return limitedBy == limitedByWindow || limitedBy == limitedBySendWindow
}

// pathFlow is the flow of a path through that many relays, set up in
// setupMs, whose longest relay link is linkMs and whose destination
// segment is lastMs (direct: its one segment), at rateBps.
func (m Model) pathFlow(relays int, setupMs, linkMs, lastMs, rateBps float64) flow {
	if relays == 0 {
		return flow{setupMs: setupMs, rttMs: lastMs, rateBps: rateBps, iwBytes: m.iwBytes(0), pktBytes: m.pktBytes(0)}
	}
	return flow{setupMs: setupMs, rttMs: linkMs, rateBps: rateBps, iwBytes: m.iwBytes(relays), pktBytes: m.pktBytes(relays),
		lastRttMs: lastMs, lastIwBytes: m.iwBytes(0), lastPktBytes: m.pktBytes(0)}
}
