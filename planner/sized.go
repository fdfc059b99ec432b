package planner

import (
	"math"
	"slices"
)

// The search with a size (Request.SizeBytes > 0): chains ranked by
// predicted completion time.
//
// The bottleneck program of the steady-rate search finds the fastest
// chains, but with a size a slower chain with shorter segments may finish
// sooner: setup and slow start grow with RTTs. Completion time is
// monotone in what it is computed from: it does not fall when the setup
// time, the ramp RTT (the longest segment's) or the sum of RTTs rises,
// nor when the steady rate falls. So a chain in the making bounds every
// chain it can grow into from below: its RTTs so far plus the least RTT
// from its last relay to the destination, its longest segment so far,
// and its slowest segment so far capped by the best bottleneck from its
// last relay on. sizedCandidates is a depth-first enumeration of simple
// chains that drops every partial chain whose bound cannot beat the best
// chain already known for any relay count it can reach. It is exact; its
// cost depends on how soon the bounds bite: the steady-rate search's
// chains seed it, so for large sizes (rate decides) and small ones (RTT
// decides) most partial chains are dropped at their first or second
// relay. Without a size none of this runs.

// sized reports whether plans are ranked by completion time.
func (s *search) sized() bool { return s.req.SizeBytes > 0 }

// iwBytes is the payload of a path's initial congestion window through
// the given number of relays, bytes: a chain's segments carry the links'
// framing (Model.LinkFramingBytes).
func (m Model) iwBytes(relays int) float64 {
	return float64(m.InitialWindowSegments) * m.pktBytes(relays)
}

// pktBytes is one packet's payload through a path of that many relays,
// bytes: MSSBytes, less LinkFramingBytes through relays.
func (m Model) pktBytes(relays int) float64 {
	payload := m.MSSBytes
	if relays > 0 {
		payload -= m.LinkFramingBytes
	}
	return float64(payload)
}

func (s *search) names(chain []int32) []string {
	out := make([]string, len(chain))
	for i, r := range chain {
		out[i] = s.name(int(r))
	}
	return out
}

// flowOf is the flow of the path client → chain → destination, whose
// pairs must all be usable: its setup, its longest link's RTT and its
// destination segment's, and its predicted rate (bottleneck × relay
// overhead).
func (s *search) flowOf(chain []int32) flow {
	n := s.n
	prev, sumMs, lastMs, linkMs, bn := s.client, 0.0, 0.0, 0.0, math.Inf(1)
	bu, bv := 0, 0 // the bottleneck segment: the first slowest
	var lossy []lossySegment
	for i := 0; i <= len(chain); i++ {
		next := s.dst
		if i < len(chain) {
			next = int(chain[i])
		}
		lastMs = s.rtt[prev*n+next]
		sumMs += lastMs
		if i < len(chain) {
			linkMs = max(linkMs, lastMs)
		}
		if r := s.rate[prev*n+next]; r < bn {
			bn, bu, bv = r, prev, next
		}
		if loss := s.lossOf(prev, next); loss > 0 {
			lossy = append(lossy, lossySegment{rttMs: lastMs, loss: loss})
		}
		prev = next
	}
	f := s.req.Model.pathFlow(len(chain), setupMs(s.req.Model.Setup, len(chain), sumMs, lastMs), linkMs, lastMs, bn*s.factor[len(chain)])
	f.lossy = lossy
	if s.windowHeld(bu, bv) {
		f.stepMs = s.rtt[bu*n+bv]
	}
	return f
}

// windowHeld reports whether a window holds the usable segment u→v's
// rate (Segment.LimitedBy, without building the Segment for most pairs).
func (s *search) windowHeld(u, v int) bool {
	k := s.pairOf[u*s.n+v]
	if k == 0 {
		k = s.pairOf[v*s.n+u]
	}
	if k < 0 || s.prior.ok() || s.maxStripes(u, v) > 1 { // loss (a prior too), learnt rates, measured windows or striping: the full account
		return windowHeld(s.segment(u, v).LimitedBy)
	}
	p := &s.m.Pairs[k-1]
	wu := windowBps(flightBytes(s.windows[u], s.sends[v]), p.RTTMs)
	wv := windowBps(flightBytes(s.windows[v], s.sends[u]), p.RTTMs)
	return s.dirRate(wu, wv, math.Inf(1)) <= s.capBps(u, v, p)
}

// lossOf is the loss of the usable segment u→v (u on the client side) in
// the requested direction (the higher way's for Both), a fraction: what
// sendLoss gives its sender.
func (s *search) lossOf(u, v int) float64 {
	k := s.pairOf[u*s.n+v]
	if k == 0 {
		k = s.pairOf[v*s.n+u]
	}
	rttMs := s.rtt[u*s.n+v]
	senders := []int{v} // a download's
	switch s.req.Direction {
	case Up:
		senders = []int{u}
	case Both:
		senders = []int{u, v}
	}
	loss := 0.0
	for _, sender := range senders {
		l, _ := s.sendLoss(sender, rttMs, 0, "") // only pairs pairOf marks negative carry loss
		if k < 0 {
			l, _ = s.pairLoss(sender, &s.m.Pairs[-k-1])
		}
		loss = max(loss, l)
	}
	return loss
}

// sizedCandidates returns the chains avoiding relay ban (−1: none) with
// the soonest completion, sorted by compareSized: with all, the best for
// every relay count; without, only the best. known are chains avoiding ban
// (any order, any relay count, maybe repeated): the search starts from
// them as the best known.
func (s *search) sizedCandidates(ban int, known []candidate, all bool, origin func(k int) string) []candidate {
	hops, n, r := s.maxHops(), s.n, s.relays
	size := s.req.SizeBytes
	s.restBounds()
	best := make([]candidate, hops+1)
	has := make([]bool, hops+1)
	offer := func(c candidate) {
		k := len(c.chain)
		if !has[k] || compareSized(c, best[k]) < 0 {
			best[k], has[k] = c, true
		}
	}
	for _, c := range known {
		c.completionMs = s.flowOf(c.chain).completionMs(size)
		c.origin = origin(len(c.chain))
		offer(c)
	}
	// worth reports whether a chain ending at relay v, with j relays so
	// far, RTT sum sumMs, longest segment maxMs and slowest segment minBps,
	// can grow into one at least as good as the best known of some count.
	worth := func(v, j int, sumMs, maxMs, minBps float64) bool {
		for k := j; k <= hops; k++ {
			h := k - j
			restMs, restBps := s.restMs[h][v], min(minBps, s.restBps[h][v])
			if math.IsInf(restMs, 1) || restBps == 0 {
				continue
			}
			sMs := sumMs + restMs
			var setup float64
			switch s.req.Model.Setup {
			case SetupOptimistic:
				lastMs := s.minLastMs
				if h == 0 {
					lastMs = s.rtt[v*n+s.dst]
				}
				setup = sMs + lastMs
			case SetupCold:
				setup = 2*sMs + 2*sumMs // the segments so far are not the last
			default:
				setup = 2 * sMs
			}
			lb := flow{setupMs: setup, rttMs: maxMs, rateBps: restBps * s.factor[k], iwBytes: s.req.Model.iwBytes(k)}.completionMs(size)
			if !has[k] || lb <= best[k].completionMs {
				return true
			}
		}
		return false
	}
	chain := make([]int32, 0, hops)
	var walk func(u int, sumMs, maxMs, minBps float64)
	walk = func(u int, sumMs, maxMs, minBps float64) {
		j := len(chain)
		if j > 0 {
			if rd := s.rate[u*n+s.dst]; rd > 0 {
				f := s.flowOf(chain)
				c := candidate{chain: chain, predictedBps: f.rateBps, rttMs: sumMs + s.rtt[u*n+s.dst]}
				c.completionMs = f.completionMs(size)
				if !has[j] || compareSized(c, best[j]) < 0 {
					c.chain, c.origin = slices.Clone(chain), origin(j)
					best[j], has[j] = c, true
				}
			}
			if j == hops {
				return
			}
		}
		row, rtts := s.rate[u*n:u*n+r], s.rtt[u*n:u*n+r]
		for v, rv := range row {
			if rv == 0 || v == ban || slices.Contains(chain, int32(v)) {
				continue
			}
			sum2, max2, min2 := sumMs+rtts[v], max(maxMs, rtts[v]), min(minBps, rv)
			if !worth(v, j+1, sum2, max2, min2) {
				continue
			}
			chain = append(chain, int32(v))
			walk(v, sum2, max2, min2)
			chain = chain[:j]
		}
	}
	walk(s.client, 0, 0, math.Inf(1))
	var out []candidate
	for k := 1; k <= hops; k++ {
		if has[k] && !math.IsInf(best[k].completionMs, 1) {
			out = append(out, best[k])
		}
	}
	slices.SortFunc(out, compareSized)
	if !all && len(out) > 1 {
		out = out[:1]
	}
	return out
}

// restBounds fills, once per search, the bounds sizedCandidates prunes
// by, for h = 0..maxHops−1 more relays after relay v: restMs[h][v], the
// least RTT of a walk v → h relays → destination (+Inf: none), and
// restBps[h][v], the highest bottleneck of one (0: none); and minLastMs,
// the least RTT from any relay to the destination. Walks may repeat
// relays and use banned ones: bounds, not chains.
func (s *search) restBounds() {
	if s.restMs != nil {
		return
	}
	hops, n, r := s.maxHops(), s.n, s.relays
	s.restMs, s.restBps = make([][]float64, hops), make([][]float64, hops)
	s.minLastMs = math.Inf(1)
	for h := range hops {
		ms, bps := make([]float64, r), make([]float64, r)
		for v := range r {
			ms[v] = math.Inf(1)
			if h == 0 {
				if s.rate[v*n+s.dst] > 0 {
					ms[v], bps[v] = s.rtt[v*n+s.dst], s.rate[v*n+s.dst]
					s.minLastMs = min(s.minLastMs, ms[v])
				}
				continue
			}
			for u, ru := range s.rate[v*n : v*n+r] {
				if ru > 0 && s.restBps[h-1][u] > 0 {
					ms[v] = min(ms[v], s.rtt[v*n+u]+s.restMs[h-1][u])
					bps[v] = max(bps[v], min(ru, s.restBps[h-1][u]))
				}
			}
		}
		s.restMs[h], s.restBps[h] = ms, bps
	}
}
