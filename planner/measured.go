package planner

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Measurement is one timed transfer over a plan's path in one direction
// (relayctl bench): the steady rate the path moved, end to end, relays'
// overhead and all. A plan whose path was measured predicts the lower of
// the model's rate and the measurement's, and is not a bound: whatever
// the model did not know (a capacity, a loss), the transfer met.
type Measurement struct {
	// Chain names the path's relays in order from the client; empty is
	// the direct path.
	Chain     []string  `json:"chain"`
	Direction Direction `json:"direction"`  // Down or Up
	SteadyBps float64   `json:"steady_bps"` // bits/s, > 0
	AgeSec    float64   `json:"age_s"`      // seconds since the transfer ended
}

// measuredKey indexes Request.Measured: a path (its relay names joined by
// NUL, which no name holds) and a direction.
type measuredKey struct {
	path string
	dir  Direction
}

func pathKey(names []string) string { return strings.Join(names, "\x00") }

// checkMeasured validates Request.Measured.
func checkMeasured(ms []Measurement) error {
	for i, m := range ms {
		switch {
		case m.Direction != Down && m.Direction != Up:
			return fmt.Errorf("measured[%d]: direction %q: want down or up", i, m.Direction)
		case !(m.SteadyBps > 0) || math.IsInf(m.SteadyBps, 0):
			return fmt.Errorf("measured[%d]: steady_bps %v: want bits/s > 0", i, m.SteadyBps)
		case !(m.AgeSec >= 0) || math.IsInf(m.AgeSec, 0):
			return fmt.Errorf("measured[%d]: age_s %v: want seconds >= 0", i, m.AgeSec)
		}
	}
	return nil
}

// indexMeasured keeps the newest measurement of each path and direction.
// Ranking by completion time (Request.SizeBytes) does not use them: the
// model's steady rate, ramp and setup make that figure, not one rate.
func (s *search) indexMeasured() {
	if s.sized() || len(s.req.Measured) == 0 {
		return
	}
	s.measured = make(map[measuredKey]Measurement, len(s.req.Measured))
	for _, m := range s.req.Measured {
		k := measuredKey{pathKey(m.Chain), m.Direction}
		if old, ok := s.measured[k]; !ok || m.AgeSec < old.AgeSec {
			s.measured[k] = m
		}
	}
}

// measuredOf returns the measurements of the path through chain that the
// requested direction uses: its download's for Down, upload's for Up,
// both for Both (nil where none), and whether they cover it.
func (s *search) measuredOf(chain []int32) (down, up *Measurement, covered bool) {
	if s.measured == nil {
		return nil, nil, false
	}
	key := pathKey(s.names(chain))
	if m, ok := s.measured[measuredKey{key, Down}]; ok && s.req.Direction != Up {
		down = &m
	}
	if m, ok := s.measured[measuredKey{key, Up}]; ok && s.req.Direction != Down {
		up = &m
	}
	switch s.req.Direction {
	case Up:
		return down, up, up != nil
	case Both:
		return down, up, down != nil && up != nil
	}
	return down, up, down != nil
}

// measuredBps is what chain's path was measured to move in the requested
// direction (the lower way for Both), bits/s; +Inf when not measured.
func (s *search) measuredBps(chain []int32) float64 {
	down, up, _ := s.measuredOf(chain)
	bps := math.Inf(1)
	if down != nil {
		bps = down.SteadyBps
	}
	if up != nil {
		bps = min(bps, up.SteadyBps)
	}
	return bps
}

// measuredCap lowers each candidate's prediction to what its path was
// measured to move in the requested direction.
func (s *search) measuredCap(cs []candidate) {
	for i := range cs {
		cs[i].predictedBps = min(cs[i].predictedBps, s.measuredBps(cs[i].chain))
	}
}

// applyMeasured lowers plan p's predictions to what its path was measured
// to move and records the measurements; a covered plan is not a bound.
func (s *search) applyMeasured(p *Plan, chain []int32) {
	down, up, covered := s.measuredOf(chain)
	if down != nil {
		p.PredictedDownBps = min(p.PredictedDownBps, down.SteadyBps)
		p.Measured = append(p.Measured, *down)
	}
	if up != nil {
		p.PredictedUpBps = min(p.PredictedUpBps, up.SteadyBps)
		p.Measured = append(p.Measured, *up)
	}
	switch s.req.Direction {
	case Up:
		p.PredictedBps = p.PredictedUpBps
	case Both:
		p.PredictedBps = min(p.PredictedDownBps, p.PredictedUpBps)
	default:
		p.PredictedBps = p.PredictedDownBps
	}
	p.Bound = p.Bound && !covered
}

// segments are the segments of the path through chain, from the client.
func (s *search) segments(chain []int32) []Segment {
	path := append(append([]int{s.client}, s.ints(chain)...), s.dst)
	out := make([]Segment, 0, len(path)-1)
	for i := 0; i+1 < len(path); i++ {
		out = append(out, s.segment(path[i], path[i+1]))
	}
	return out
}

// bound says whether chain's prediction rests on an unknown
// (Segment.Unknown) and no measurement of its path covers it: an upper
// bound.
func (s *search) bound(chain []int32) bool {
	if _, _, covered := s.measuredOf(chain); covered {
		return false
	}
	return slices.ContainsFunc(s.segments(chain), func(seg Segment) bool { return len(seg.Unknown) > 0 })
}

// untried says whether chain's prediction rests on what nobody measured,
// an unknown or a loss prior (a guess), and no measurement of its path
// covers it: a plan that outranks a tried one only on such a figure is
// not evidence of being faster.
func (s *search) untried(chain []int32) bool {
	if _, _, covered := s.measuredOf(chain); covered {
		return false
	}
	return slices.ContainsFunc(s.segments(chain), func(seg Segment) bool {
		return len(seg.Unknown) > 0 || seg.LossSource == LossFromPrior
	})
}

// evidence says what traffic measured of c's path, for a reason: relayctl
// bench's measurement of it, or the figure traffic taught that holds its
// bottleneck (a rate the sender's tunnels or bench learnt, a loss learnt
// from tunnels or bench). "" when nothing did: declared figures and the
// probes' loss are not traffic through the path.
func (s *search) evidence(c candidate) string {
	if _, _, covered := s.measuredOf(c.chain); covered {
		return "measured at " + fmtBps(s.measuredBps(c.chain))
	}
	segs := s.segments(c.chain)
	b := 0
	for i, seg := range segs {
		if seg.RateBps < segs[b].RateBps {
			b = i
		}
	}
	seg := segs[b]
	switch {
	case seg.LimitedBy == limitedByLearnt:
		return fmt.Sprintf("held at %s on %s→%s by the rate its traffic was learnt to reach", fmtBps(seg.RateBps), seg.From, seg.To)
	case seg.LimitedBy == limitedByLoss && (seg.LossSource == LearntFromTunnels || seg.LossSource == LearntFromBench):
		return fmt.Sprintf("held at %s on %s→%s by the %s loss its traffic met", fmtBps(seg.RateBps), seg.From, seg.To, fmtPct(seg.Loss))
	}
	return ""
}

func (s *search) ints(chain []int32) []int {
	out := make([]int, len(chain))
	for i, r := range chain {
		out[i] = int(r)
	}
	return out
}

// keepMeasured keeps a tried plan ahead of an untried chain: chains is
// ranked, best first. When chains[0] is untried (its prediction rests on
// an unknown or a prior), that is not evidence that it is faster, and
// traffic through a path is (evidence: a bench measurement, or a
// bottleneck figure the traffic taught): a later tried chain that beats
// direct by MinGain moves to the front; failing that, a tried direct path
// is kept, and keepMeasured returns true. The displaced chain is recorded
// for its reason (s.keptOver). Ranking by completion time keeps nothing:
// the measurements are of steady rates.
func (s *search) keepMeasured(chains []candidate, direct candidate, directKnown bool) (keepDirect bool) {
	if s.sized() || len(chains) == 0 || !s.untried(chains[0].chain) {
		return false
	}
	for i := 1; i < len(chains); i++ {
		if s.evidence(chains[i]) == "" || !s.beatsDirect(chains[i], direct, directKnown) {
			continue
		}
		s.keptOver = slices.Clone(chains[0].chain)
		kept := chains[i]
		copy(chains[1:i+1], chains[:i])
		chains[0] = kept
		return false
	}
	if directKnown && s.evidence(direct) != "" && s.beatsDirect(chains[0], direct, directKnown) {
		s.keptOver = slices.Clone(chains[0].chain)
		return true
	}
	return false
}

// exploring is the reason an untried chain top is the plan although
// ranked ahead of a tried one that could not be kept (it does not beat
// direct by MinGain): the plan moves onto a guess, and says so; "" when
// top is tried, or no tried chain was passed over.
func (s *search) exploring(top candidate, chains []candidate) string {
	if s.sized() || s.keptOver != nil || !s.untried(top.chain) {
		return ""
	}
	for _, c := range chains {
		if what := s.evidence(c); what != "" {
			return fmt.Sprintf("exploring: the chain via %s is untried (its prediction rests on what nobody has measured), and is picked ahead of %s, %s, which does not beat direct by the %s minimum; its traffic teaches what it moves, and relayctl bench --chain %s measures it",
				s.chainNames(top.chain), s.pathNamed(c, "the tried "), what, fmtPct(s.req.Constraints.MinGain), strings.Join(s.names(top.chain), ","))
		}
	}
	return ""
}

// measuredReason says what measured plan p's path moved, against the
// model; "" when nothing measured it.
func measuredReason(p Plan, modelBps float64) string {
	if len(p.Measured) == 0 {
		return ""
	}
	var parts []string
	for _, m := range p.Measured {
		parts = append(parts, fmt.Sprintf("%s %s steady %s ago", m.Direction, fmtBps(m.SteadyBps), fmtAge(m.AgeSec)))
	}
	return fmt.Sprintf("measured by relayctl bench: %s (the model alone: %s); the prediction is the lower",
		strings.Join(parts, ", "), fmtBps(modelBps))
}

// keptReason says why the tried plan kept (a chain, or direct when
// kept.chain is empty) is the plan rather than the untried chain over it.
func (s *search) keptReason(kept candidate) string {
	return fmt.Sprintf("kept %s (%s, predicted %s) ahead of the untried chain via %s: that one's prediction rests on what nobody has measured; relayctl bench --chain %s measures it",
		s.triedName(kept), s.evidence(kept), fmtBps(kept.predictedBps), s.chainNames(s.keptOver), strings.Join(s.names(s.keptOver), ","))
}

// keptLost is the untried chain c's side of keptReason.
func (s *search) keptLost(c, kept candidate) string {
	predicted := fmtBps(c.predictedBps) + " on a loss prior" // a guess, not a bound
	if s.bound(c.chain) {
		predicted = "≤ " + fmtBps(c.predictedBps)
	}
	return fmt.Sprintf("untried: predicts %s, but nobody has measured it, and %s was %s: relayctl bench --chain %s measures this one",
		predicted, s.pathName(kept), s.evidence(kept), strings.Join(s.names(c.chain), ","))
}

// triedName names a tried plan in a reason: measured by bench, or tried by
// traffic.
func (s *search) triedName(c candidate) string {
	if _, _, covered := s.measuredOf(c.chain); covered {
		return s.pathNamed(c, "the measured ")
	}
	return s.pathNamed(c, "the tried ")
}

// pathName names a plan's path in a reason.
func (s *search) pathName(c candidate) string { return s.pathNamed(c, "the ") }

func (s *search) pathNamed(c candidate, article string) string {
	if len(c.chain) == 0 {
		return article + "direct path"
	}
	return article + "chain via " + s.chainNames(c.chain)
}
