package planner

import (
	"fmt"
	"slices"
	"strings"
)

// The human-readable reasons of a Result. Each says what decided, with the
// numbers that decided it.

func (s *search) chainNames(chain []int32) string {
	names := make([]string, len(chain))
	for i, r := range chain {
		names[i] = s.name(int(r))
	}
	return strings.Join(names, ", ")
}

// winReason says why chain top is the best plan.
func (s *search) winReason(top, direct candidate, directKnown bool) string {
	via := s.chainNames(top.chain)
	switch {
	case !directKnown:
		return fmt.Sprintf("chain via %s chosen without a comparison: the direct path %s→%s is not measured",
			via, s.name(s.client), s.name(s.dst))
	case direct.predictedBps == 0:
		return fmt.Sprintf("chain via %s wins: the direct path predicts 0 bit/s (total loss)", via)
	case s.sized():
		return fmt.Sprintf("chain via %s wins: %s in %s, %.2f× sooner than direct (%s), a gain of %s ≥ the %s minimum",
			via, fmtSize(s.req.SizeBytes), fmtDur(top.completionMs), direct.completionMs/top.completionMs, fmtDur(direct.completionMs),
			fmtPct(direct.completionMs/top.completionMs-1), fmtPct(s.req.Constraints.MinGain))
	}
	return fmt.Sprintf("chain via %s wins: %.2f× direct (%s vs %s), a gain of %s ≥ the %s minimum",
		via, top.predictedBps/direct.predictedBps, fmtBps(top.predictedBps), fmtBps(direct.predictedBps),
		fmtPct(top.predictedBps/direct.predictedBps-1), fmtPct(s.req.Constraints.MinGain))
}

// directWinReason says why direct is the best plan; chains are the ranked
// chains found, awaiting what Result.Awaiting says.
func (s *search) directWinReason(chains []candidate, direct candidate, directKnown bool, awaiting []string) string {
	if len(chains) == 0 {
		why := fmt.Sprintf("no chain of up to %d relay%s connects %s and %s through usable pairs",
			s.maxHops(), plural(s.maxHops()), s.name(s.client), s.name(s.dst))
		switch {
		case len(awaiting) > 0:
			why += ": waiting for measurements: " + strings.Join(awaiting, "; ")
		case s.relays == 0:
			why = "no relay is usable (none in the matrix, or all left out by include/exclude)"
		case s.maxHops() == 0:
			why = "constraints.max_hops is negative: direct only"
		}
		if !directKnown {
			return "no prediction: the direct path is not measured and " + why
		}
		return "direct wins: " + why
	}
	return fmt.Sprintf("direct wins: best chain via %s %s", s.chainNames(chains[0].chain), s.versusDirect(chains[0], direct))
}

// directLoses says why direct is not the best plan when chain top is,
// or "" when there is nothing to compare.
func (s *search) directLoses(top, direct candidate, directKnown bool) string {
	switch {
	case !directKnown || direct.predictedBps == 0:
		return ""
	case s.sized():
		return fmt.Sprintf("direct loses: chain via %s finishes %s %.2f× sooner (%s vs %s)",
			s.chainNames(top.chain), fmtSize(s.req.SizeBytes), direct.completionMs/top.completionMs, fmtDur(top.completionMs), fmtDur(direct.completionMs))
	}
	return fmt.Sprintf("direct loses: chain via %s predicts %.2f× direct", s.chainNames(top.chain), top.predictedBps/direct.predictedBps)
}

// versusDirect says why chain c lost to a direct path that is known and
// predicts more than zero.
func (s *search) versusDirect(c, direct candidate) string {
	if s.sized() {
		return s.versusDirectSized(c, direct)
	}
	ratio := c.predictedBps / direct.predictedBps
	switch { // the comparisons Search decides by, not ratio: same rounding
	case c.predictedBps < direct.predictedBps:
		return fmt.Sprintf("predicts %s, %.2f× direct (%s)", fmtBps(c.predictedBps), ratio, fmtBps(direct.predictedBps))
	case c.predictedBps < direct.predictedBps*(1+s.req.Constraints.MinGain):
		return fmt.Sprintf("gains only %s over direct (%s vs %s) < the %s minimum",
			fmtPct(ratio-1), fmtBps(c.predictedBps), fmtBps(direct.predictedBps), fmtPct(s.req.Constraints.MinGain))
	}
	return fmt.Sprintf("ties with direct at %s and loses the tie-break: %s", fmtBps(c.predictedBps), tieBreak(c, direct))
}

// versusDirectSized is versusDirect by completion time.
func (s *search) versusDirectSized(c, direct candidate) string {
	gain := direct.completionMs/c.completionMs - 1
	switch { // the comparisons Search decides by
	case c.completionMs > direct.completionMs:
		return fmt.Sprintf("finishes %s in %s, %.2f× direct's time (%s)",
			fmtSize(s.req.SizeBytes), fmtDur(c.completionMs), c.completionMs/direct.completionMs, fmtDur(direct.completionMs))
	case c.completionMs*(1+s.req.Constraints.MinGain) > direct.completionMs:
		return fmt.Sprintf("finishes %s only %s sooner than direct (%s vs %s) < the %s minimum",
			fmtSize(s.req.SizeBytes), fmtPct(gain), fmtDur(c.completionMs), fmtDur(direct.completionMs), fmtPct(s.req.Constraints.MinGain))
	}
	return fmt.Sprintf("ties with direct at %s and loses the tie-break: %s", fmtDur(c.completionMs), tieBreak(c, direct))
}

// lossReason says why chain c is not the best plan.
func (s *search) lossReason(c candidate, chainWins bool, best, direct candidate) string {
	switch {
	case s.keptOver != nil && slices.Equal(c.chain, s.keptOver) && chainWins:
		return s.keptLost(c, best)
	case s.keptOver != nil && slices.Equal(c.chain, s.keptOver):
		return s.keptLost(c, direct)
	case !chainWins:
		return "lost to direct: " + s.versusDirect(c, direct)
	}
	if s.sized() {
		return s.lossReasonSized(c, best)
	}
	if c.predictedBps > best.predictedBps {
		return fmt.Sprintf("lost: predicts %s more than the best plan (via %s, %s), within the %s tie margin, with more relays (%d > %d)",
			fmtPct(c.predictedBps/best.predictedBps-1), s.chainNames(best.chain), fmtBps(best.predictedBps),
			fmtPct(s.req.Model.ErrorMargin), len(c.chain), len(best.chain))
	}
	if c.predictedBps < best.predictedBps {
		return fmt.Sprintf("lost: %s slower than the best plan (via %s, %s)",
			fmtPct(1-c.predictedBps/best.predictedBps), s.chainNames(best.chain), fmtBps(best.predictedBps))
	}
	return "lost on tie-break with the best plan: " + tieBreak(c, best)
}

// lossReasonSized is lossReason against a winning chain, by completion
// time.
func (s *search) lossReasonSized(c, best candidate) string {
	switch {
	case c.completionMs < best.completionMs:
		return fmt.Sprintf("lost: finishes %s sooner than the best plan (via %s, %s), within the %s tie margin, with more relays (%d > %d)",
			fmtPct(best.completionMs/c.completionMs-1), s.chainNames(best.chain), fmtDur(best.completionMs),
			fmtPct(s.req.Model.ErrorMargin), len(c.chain), len(best.chain))
	case c.completionMs > best.completionMs:
		return fmt.Sprintf("lost: takes %s longer than the best plan (via %s, %s vs %s)",
			fmtPct(c.completionMs/best.completionMs-1), s.chainNames(best.chain), fmtDur(c.completionMs), fmtDur(best.completionMs))
	}
	return "lost on tie-break with the best plan: " + tieBreak(c, best)
}

// tieBreak says why loser ranks below winner at the same prediction.
func tieBreak(loser, winner candidate) string {
	switch {
	case loser.rttMs != winner.rttMs:
		return fmt.Sprintf("same prediction, higher total RTT (%s > %s)", fmtMs(loser.rttMs), fmtMs(winner.rttMs))
	case len(loser.chain) != len(winner.chain):
		return fmt.Sprintf("same prediction and total RTT, more relays (%d > %d)", len(loser.chain), len(winner.chain))
	}
	return "same prediction, total RTT and relay count; ordered by name"
}

// describe gives plan p's own reasons: what limits it and what it
// assumes; path is its dense nodes from the client.
func (s *search) describe(p Plan, path []int) []string {
	var out []string
	b := p.Segments[p.Bottleneck]
	if len(p.Chain) == 0 {
		out = append(out, fmt.Sprintf("direct %s→%s (%s): %s, set by %s",
			b.From, b.To, fmtMs(b.RTTMs), fmtBps(b.RateBps), s.limiter(b)))
	} else {
		out = append(out, fmt.Sprintf("segment %s→%s (%s) is the bottleneck at %s, set by %s",
			b.From, b.To, fmtMs(b.RTTMs), fmtBps(b.RateBps), s.limiter(b)))
		if f := s.req.Model.RelayOverhead; f > 0 {
			k := len(p.Chain)
			each := ""
			if k > 1 {
				each = " each"
			}
			out = append(out, fmt.Sprintf("%d relay%s at %s overhead%s: %s × %.3f = %s predicted",
				k, plural(k), fmtPct(f), each, fmtBps(b.RateBps), s.factor[k], fmtBps(b.RateBps*s.factor[k])))
		}
		if b.LimitedBy != limitedBySendWindow {
			// Where a send window is the bottleneck, the receive
			// windows do not explain the split.
			out = append(out, windowReason(p))
		}
		out = append(out, s.stripeReasons(p.Segments, path)...)
	}
	if p.Transfer != nil {
		out = append(out, s.transferReason(p))
	}
	if s.req.Direction == Both {
		out = append(out, fmt.Sprintf("download %s, upload %s: planned for the lower",
			fmtBps(p.PredictedDownBps), fmtBps(p.PredictedUpBps)))
	}
	var assumed []string
	for _, seg := range p.Segments {
		if seg.WindowAssumed && !slices.Contains(assumed, seg.Receiver) {
			assumed = append(assumed, seg.Receiver)
		}
	}
	if len(assumed) > 0 {
		out = append(out, fmt.Sprintf("window unknown, assumed %s: %s",
			fmtBytes(s.req.Model.DefaultWindowBytes), strings.Join(assumed, ", ")))
	}
	if why := boundReason(p); why != "" && p.Bound {
		out = append(out, why)
	}
	if why := s.priorReason(p); why != "" {
		out = append(out, why)
	}
	for _, seg := range p.Segments {
		if seg.Estimated {
			out = append(out, fmt.Sprintf("segment %s→%s: RTT %s is estimated, not measured", seg.From, seg.To, fmtMs(seg.RTTMs)))
		}
		if seg.Stale {
			out = append(out, fmt.Sprintf("segment %s→%s: RTT measured %.0f s ago, older than the %.0f s limit (used because use_stale is set)",
				seg.From, seg.To, seg.AgeSec, s.req.Constraints.MaxAgeSec))
		}
	}
	return out
}

// transferReason spells out a plan's completion time: its three parts
// and what each is made of.
func (s *search) transferReason(p Plan) string {
	t := p.Transfer
	setup := fmt.Sprintf("%d × %s RTT", DirectSetupRTTs, fmtMs(p.TotalRTTMs))
	if len(p.Chain) > 0 {
		last := p.Segments[len(p.Segments)-1].RTTMs
		switch s.req.Model.Setup {
		case SetupOptimistic:
			setup = fmt.Sprintf("optimistic: %s total RTT + %s last segment", fmtMs(p.TotalRTTMs), fmtMs(last))
		case SetupCold:
			setup = fmt.Sprintf("cold: 2 × %s total RTT + TCP and TLS handshakes, 2 × %s", fmtMs(p.TotalRTTMs), fmtMs(p.TotalRTTMs-last))
		default:
			setup = fmt.Sprintf("warm: 2 × %s total RTT", fmtMs(p.TotalRTTMs))
		}
	}
	steady := ""
	if t.SteadyMs > 0 {
		steady = fmt.Sprintf(" + steady %s at %s", fmtDur(t.SteadyMs), fmtBps(p.PredictedBps))
		if t.Flights > 0 {
			steady += fmt.Sprintf(" (%d window flight%s, a round trip each)", t.Flights, plural(t.Flights))
		}
	}
	if t.LossMs > 0 {
		steady += fmt.Sprintf(" + loss %s (recovering lost packets: a round trip of a lossy segment per round that loses one)", fmtDur(t.LossMs))
	}
	return fmt.Sprintf("%s in %s: setup %s (%s) + ramp %s (%d round%s of slow start at %s from %s)%s",
		fmtSize(t.SizeBytes), fmtDur(t.CompletionMs), fmtDur(t.SetupMs), setup, fmtDur(t.RampMs),
		t.Rounds, plural(t.Rounds), fmtMs(t.RampRTTMs), fmtBytes(int64(s.req.Model.iwBytes(len(p.Chain)))), steady)
}

// limiter names the term that sets segment seg's rate: on a striped
// segment a per-connection term holds each of its connections.
func (s *search) limiter(seg Segment) string {
	what := s.term(seg)
	if seg.Stripes > 1 && seg.LimitedBy != limitedByLimit && seg.LimitedBy != limitedByLearnt {
		what += fmt.Sprintf(", on each of its %d connections", seg.Stripes)
	}
	return what
}

// term names the term seg.LimitedBy says sets seg's rate, as for one
// connection.
func (s *search) term(seg Segment) string {
	switch seg.LimitedBy {
	case limitedByLimit:
		return fmt.Sprintf("the bandwidth limit %s of %s", fmtBps(seg.LimitBps), s.limitHolder(seg))
	case limitedByLoss:
		if seg.LossSource == LossFromPrior {
			return fmt.Sprintf("%s loss, a prior nobody measured (Mathis bound, MSS %d B)", fmtPct(seg.Loss), s.req.Model.MSSBytes)
		}
		return fmt.Sprintf("%s loss (Mathis bound, MSS %d B)", fmtPct(seg.Loss), s.req.Model.MSSBytes)
	case limitedByLearnt:
		if seg.LearntSource == LearntFromProbe {
			return fmt.Sprintf("the capacity %s's probe measured towards %s, %s (trains of datagrams, %s ago)",
				seg.Sender, seg.Receiver, fmtBps(seg.LearntBps), fmtAge(seg.LearntAgeSec))
		}
		how := "learnt from its tunnels"
		switch seg.LearntSource {
		case LearntFromBench:
			how = "timed by relayctl bench"
		case LearntByReceiver:
			how = "learnt by " + seg.Receiver + " from what its tunnels received"
		}
		return fmt.Sprintf("the rate %s's traffic to %s reached, %s (%s, %s ago)",
			seg.Sender, seg.Receiver, fmtBps(seg.LearntBps), how, fmtAge(seg.LearntAgeSec))
	case limitedBySendWindow:
		return fmt.Sprintf("the send window %s of %s over %s (below %s's window %s: raise its tcp_wmem)",
			fmtBytes(seg.SendWindowBytes), seg.Sender, fmtMs(seg.RTTMs), seg.Receiver, fmtBytes(seg.WindowBytes))
	}
	return fmt.Sprintf("the window %s of %s over %s", fmtBytes(seg.WindowBytes), seg.Receiver, fmtMs(seg.RTTMs))
}

// limitHolder names the end of seg whose limit_bps is seg.LimitBps.
func (s *search) limitHolder(seg Segment) string {
	for _, d := range s.node {
		if n := s.m.Nodes[d]; n.Name == seg.From {
			if n.LimitBps == seg.LimitBps {
				return seg.From
			}
			break
		}
	}
	return seg.To
}

// windowReason explains a chain's split by its windows: with equal windows
// equal RTTs are best; with unequal ones the smallest window's segment is
// kept short.
func windowReason(p Plan) string {
	small, longest := 0, 0
	equal := true
	for i, seg := range p.Segments {
		if seg.WindowBytes != p.Segments[0].WindowBytes {
			equal = false
		}
		if seg.WindowBytes < p.Segments[small].WindowBytes {
			small = i
		}
		if seg.RTTMs > p.Segments[longest].RTTMs {
			longest = i
		}
	}
	if equal {
		return fmt.Sprintf("equal windows (%s): equal segment RTTs are best; the longest segment, %s→%s, is %s",
			fmtBytes(p.Segments[0].WindowBytes), p.Segments[longest].From, p.Segments[longest].To, fmtMs(p.Segments[longest].RTTMs))
	}
	seg := p.Segments[small]
	where := ""
	switch small {
	case 0:
		where = "; first relay placed near the client rather than at an equal-RTT split"
	case len(p.Segments) - 1:
		where = "; last relay placed near the destination rather than at an equal-RTT split"
	}
	return fmt.Sprintf("window-aware: %s's window %s is the smallest, so its segment %s→%s is kept short (%s)%s",
		seg.Receiver, fmtBytes(seg.WindowBytes), seg.From, seg.To, fmtMs(seg.RTTMs), where)
}

// notes are the Result's notes about the whole search.
func (s *search) notes(directKnown bool) []string {
	out := []string{fmt.Sprintf("searched %d usable relay%s, chains of up to %d", s.relays, plural(s.relays), s.maxHops())}
	if s.staleIgnored > 0 {
		out = append(out, fmt.Sprintf("ignored %d stale pair%s (older than %.0f s); set use_stale to use them, marked stale",
			s.staleIgnored, plural(s.staleIgnored), s.req.Constraints.MaxAgeSec))
	}
	if !directKnown {
		out = append(out, fmt.Sprintf("the direct path %s→%s is not measured (or its pair is stale): chains cannot be compared with it",
			s.name(s.client), s.name(s.dst)))
	}
	out = append(out, s.prior.note())
	known := false
	for _, i := range s.node {
		known = known || s.m.Nodes[i].WindowBytes > 0
	}
	if !known {
		out = append(out, fmt.Sprintf("no window known: every window assumed %s (equal windows: equal-RTT splits are best)",
			fmtBytes(s.req.Model.DefaultWindowBytes)))
	}
	return out
}

// boundReason says why plan p's prediction is an upper bound: the
// segments whose capacity or loss nobody measured, learnt or declared (an
// assumed window has its own reason); "" when there are none.
func boundReason(p Plan) string {
	capacity, loss := unknownSegments(p.Segments, UnknownCapacity), unknownSegments(p.Segments, UnknownLoss)
	var parts []string
	if len(capacity) > 0 {
		parts = append(parts, "the capacity of "+strings.Join(capacity, ", ")+" (nothing declared or learnt: only windows and loss bound it)")
	}
	if len(loss) > 0 {
		parts = append(parts, "the loss of "+strings.Join(loss, ", ")+" (the probes alone, which miss random loss below a few per cent)")
	}
	if len(parts) == 0 {
		return ""
	}
	return "an upper bound, not a measurement: nobody has measured " + strings.Join(parts, " or ") +
		"; relayctl bench measures the path, and the relays learn both from the traffic they carry"
}

// priorReason says which of plan p's segments have a loss prior (their
// loss nobody measured) and what it is; "" when none has.
func (s *search) priorReason(p Plan) string {
	var parts []string
	for _, seg := range p.Segments {
		if seg.LossSource == LossFromPrior {
			parts = append(parts, fmt.Sprintf("%s→%s %s", seg.From, seg.To, fmtPct(seg.Loss)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("loss is a prior, not a measurement, on %s: %s per ms of RTT (at most %s), from the %d segments whose loss the fleet measured; relayctl bench measures the path, and the relays learn their links' loss from the traffic they carry",
		strings.Join(parts, ", "), fmtLossPerMs(s.prior.PerRTTMs), fmtPct(s.prior.MaxLoss), s.prior.Segments)
}

// directBound says the direct plan's prediction is a bound.
func (s *search) directBound() bool {
	cd := s.client*s.n + s.dst
	return s.rtt[cd] > 0 && s.bound(nil)
}

// unknownSegments names the segments (from→to) whose Unknown holds any of
// what.
func unknownSegments(segs []Segment, what ...string) []string {
	var out []string
	for _, seg := range segs {
		if slices.ContainsFunc(what, func(w string) bool { return slices.Contains(seg.Unknown, w) }) {
			out = append(out, seg.From+"→"+seg.To)
		}
	}
	return out
}

// restsOn says what chain p's win over direct rests on when p's
// prediction is a bound or leans on a loss prior: the rate each of its
// segments of unknown capacity or loss, or a loss prior, must carry for
// the chain to still beat direct by MinGain; "" when it has none or
// direct predicts nothing to beat.
func (s *search) restsOn(p Plan, direct candidate, directKnown bool) string {
	if !directKnown || !(direct.predictedBps > 0) || len(p.Chain) == 0 {
		return ""
	}
	var segs []string
	for _, seg := range p.Segments {
		if slices.Contains(seg.Unknown, UnknownCapacity) || slices.Contains(seg.Unknown, UnknownLoss) || seg.LossSource == LossFromPrior {
			segs = append(segs, seg.From+"→"+seg.To) // a prior is a guess too
		}
	}
	if len(segs) == 0 {
		return ""
	}
	each := "carries"
	if len(segs) > 1 {
		each = "each carry"
	}
	why := fmt.Sprintf("the pick rests on what is not known: it beats direct's prediction only if %s %s at least %s (direct's %s + %s, before the relays' overhead)",
		strings.Join(segs, ", "), each, fmtBps(direct.predictedBps*(1+s.req.Constraints.MinGain)/s.factor[len(p.Chain)]),
		fmtBps(direct.predictedBps), fmtPct(s.req.Constraints.MinGain))
	if s.directBound() {
		why += "; direct's prediction is itself a bound"
	}
	if s.sized() {
		why = "the pick rests on what is not known: the capacity or loss of " + strings.Join(segs, ", ")
	}
	return why
}

// awaiting names the measurements whose absence leaves every chain out
// (Result.Awaiting): none when a chain was found, no relay is usable, the
// constraints allow none, or what is missing was measured and found
// unusable (an unreachable pair is an answer, not a wait).
func (s *search) awaiting(chains []candidate) []string {
	if len(chains) > 0 || s.relays == 0 || s.maxHops() == 0 {
		return nil
	}
	n := s.n
	var fromClient, toDst []int32 // relays with a usable pair to the client, to the destination
	measuredFrom, measuredTo := false, false
	for r := range s.relays {
		measuredFrom = measuredFrom || s.rtt[s.client*n+r] > 0
		measuredTo = measuredTo || s.rtt[r*n+s.dst] > 0
		if s.rate[s.client*n+r] > 0 {
			fromClient = append(fromClient, int32(r))
		}
		if s.rate[r*n+s.dst] > 0 {
			toDst = append(toDst, int32(r))
		}
	}
	var out []string
	if !measuredFrom {
		out = append(out, fmt.Sprintf("no RTT from %s to any of the %d relay%s", s.name(s.client), s.relays, plural(s.relays)))
	}
	if !measuredTo {
		out = append(out, fmt.Sprintf("no relay's RTT to %s", s.name(s.dst)))
	}
	if len(out) > 0 || len(fromClient) == 0 || len(toDst) == 0 {
		return out
	}
	// Both sides reach relays, but not the same ones.
	if s.maxHops() == 1 {
		return []string{fmt.Sprintf("no relay with both an RTT from %s and one to %s", s.name(s.client), s.name(s.dst))}
	}
	for _, a := range fromClient {
		for _, b := range toDst {
			if s.rtt[int(a)*n+int(b)] > 0 {
				return nil // measured: the chains are longer than allowed, or unusable
			}
		}
	}
	return []string{fmt.Sprintf("no RTT between the relays %s reaches (%s) and those that reach %s (%s)",
		s.name(s.client), s.chainNames(fromClient), s.name(s.dst), s.chainNames(toDst))}
}
