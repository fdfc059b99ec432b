package planner

import (
	"fmt"
	"math"
)

// Striped segments. A segment is one TCP connection, held to a window (or
// send window) per round trip, and a loss-based sender to its Mathis
// bound: on a long crossing that is well below the link. A segment
// between two relays that both take striped segments (Node.MaxStripes)
// may carry the tunnel over n connections instead, its byte stream cut
// into chunks and put back in order at the next relay. Each connection
// has its own window and its own Mathis share, so those bounds are n
// times one connection's; the link's capacity is not, nor a rate learnt
// from traffic (measured per tunnel, whatever carried it).
//
// chooseStripes decides n, and only where the capacity is known (a
// declared limit_bps): with it unknown, nothing says how much of the link
// more connections would find, and the gain would be a guess. The client's
// segment and the destination's are never striped: only relays put a
// striped stream back together.

const (
	// stripeTarget is the share of what no number of connections passes
	// (the capacity, or a learnt rate below it) that n connections are
	// chosen to reach: the least n that gets there, not the most allowed,
	// as each connection more costs the relays a socket and a reorder
	// buffer.
	stripeTarget = 0.9
	// stripeMinGain is the gain over one connection, a fraction, below
	// which a segment is not striped: a few per cent is within the
	// model's error, and a striped stream costs framing and reordering.
	stripeMinGain = 0.10
)

// way is one direction of a segment: what data flowing that way is bound
// by, bits/s.
type way struct {
	// connBps is one connection's bound: the window (or send window) per
	// round trip and the sender's loss bound. Striping multiplies it.
	connBps float64
	// learntBps is the rate the sender's traffic was learnt to reach;
	// +Inf = unknown. Striping does not multiply it.
	learntBps float64
}

// boundBps is what n connections carry this way before the capacity.
func (w way) boundBps(n int) float64 { return min(float64(n)*w.connBps, w.learntBps) }

// rateBps is what n connections carry this way under the capacity capBps.
func (w way) rateBps(n int, capBps float64) float64 { return min(w.boundBps(n), capBps) }

// chooseStripes is how many connections, 1 to maxN, a segment whose way
// the plan counts is w and whose capacity is capBps (+Inf = unknown)
// runs: the least n whose n × one connection's bound reaches stripeTarget
// of what no n passes (else maxN), kept at 1 unless it gains stripeMinGain
// over one connection, or when the capacity is unknown.
func chooseStripes(w way, capBps float64, maxN int) int {
	if maxN < 2 || !(capBps > 0) || math.IsInf(capBps, 1) {
		return 1
	}
	targetBps := stripeTarget * min(capBps, w.learntBps)
	n := 1
	for n < maxN && float64(n)*w.connBps < targetBps {
		n++
	}
	if w.rateBps(n, capBps) < (1+stripeMinGain)*w.rateBps(1, capBps) {
		return 1
	}
	return n
}

// maxStripes is the most connections the segment between dense nodes u
// and v may have: 1 unless both are relays that stripe (the client's and
// the destination's are 1 in s.stripes).
func (s *search) maxStripes(u, v int) int {
	if s.stripesOffBy != "" {
		return 1
	}
	return min(s.stripes[u], s.stripes[v])
}

// segmentStripes is the one place that decides how many connections the
// usable segment u→v (u on the client side) runs, with from the way its
// client-side end receives (a download's) and to the other, under the cap
// capBps (+Inf = unknown).
func (s *search) segmentStripes(u, v int, from, to way, capBps float64) int {
	maxN := s.maxStripes(u, v)
	if maxN < 2 {
		return 1
	}
	return chooseStripes(s.dirWay(from, to), capBps, maxN)
}

// dirWay is the way the requested direction counts: for Both, each bound
// the lower of the two ways', as a rate over both is.
func (s *search) dirWay(from, to way) way {
	switch s.req.Direction {
	case Up:
		return to
	case Both:
		return way{connBps: min(from.connBps, to.connBps), learntBps: min(from.learntBps, to.learntBps)}
	}
	return from
}

// stripeReasons say, for each segment of a plan between two relays that
// both stripe, how many connections it runs and why; path is the plan's
// dense nodes from the client. None when no such segment is in the plan.
func (s *search) stripeReasons(segs []Segment, path []int) []string {
	var out []string
	for i, seg := range segs {
		if s.stripesOffBy != "" && min(s.stripes[path[i]], s.stripes[path[i+1]]) >= 2 {
			out = append(out, fmt.Sprintf("%s→%s not striped: relay %s takes no striped segments (a relay from before them), and a striped header may pass through it",
				seg.From, seg.To, s.stripesOffBy))
			continue
		}
		if maxN := s.maxStripes(path[i], path[i+1]); maxN >= 2 {
			out = append(out, fmt.Sprintf("%s→%s %s", seg.From, seg.To, stripeWhy(seg, maxN)))
		}
	}
	return out
}

// stripeWhy says why seg, which may have up to maxN connections, runs
// as many as it does.
func stripeWhy(seg Segment, maxN int) string {
	if seg.Stripes > 1 {
		reach := fmt.Sprintf("%d carry %s", seg.Stripes, fmtBps(seg.RateBps))
		if seg.Stripes == maxN && seg.LimitedBy != limitedByLimit {
			reach += fmt.Sprintf(", the most both ends and the request allow (%d)", maxN)
		}
		return fmt.Sprintf("striped ×%d: one connection's %s holds it to %s of a %s link; %s",
			seg.Stripes, connTerm(seg.OneLinkLimitedBy), fmtBps(seg.OneLinkBps), fmtBps(seg.LimitBps), reach)
	}
	switch {
	case seg.LimitBps <= 0:
		return "not striped: its capacity is unknown (no limit_bps at either end), so what more connections would find of the link is a guess"
	case seg.LimitedBy == limitedByLearnt:
		return fmt.Sprintf("not striped: the rate its traffic was learnt to reach holds it (%s), measured per tunnel, which more connections do not raise", fmtBps(seg.LearntBps))
	case seg.LimitedBy == limitedByLimit:
		return fmt.Sprintf("not striped: one connection reaches the %s link", fmtBps(seg.LimitBps))
	}
	return fmt.Sprintf("not striped: more connections would gain less than %s over one's %s", fmtPct(stripeMinGain), fmtBps(seg.RateBps))
}

// connTerm names a per-connection bound (Segment.OneLinkLimitedBy).
func connTerm(limitedBy string) string {
	switch limitedBy {
	case limitedBySendWindow:
		return "send window"
	case limitedByLoss:
		return "loss bound"
	}
	return "window"
}
