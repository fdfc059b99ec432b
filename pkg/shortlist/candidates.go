package shortlist

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"
)

// space is the relays' coordinates laid out flat for the candidate
// search, which computes O(hops·n²) estimates: serf's distance (Euclidean
// vector distance plus both heights, plus both adjustments when that stays
// positive), in milliseconds.
type space struct {
	dim  int
	vec  []float64 // n×dim, ms
	hgt  []float64 // height, ms
	adj  []float64 // adjustment, ms
	name []string
	// scale is the factor subset multiplied the coordinates by (the
	// caution); 0 means 1.
	scale float64
	// exact are the published relay pairs, both ways: exact[u] lists v
	// and their RTT. A pair the coordinates cannot estimate (a direct
	// route between hubs, far faster than the embedding allows) reaches
	// the ranking through them.
	exact [][]edge
}

type edge struct {
	v  int
	ms float64
}

// addExact adds a published pair by the relays' indices.
func (s *space) addExact(u, v int, ms float64) {
	if s.exact == nil {
		s.exact = make([][]edge, s.n())
	}
	s.exact[u] = append(s.exact[u], edge{v, ms})
	s.exact[v] = append(s.exact[v], edge{u, ms})
}

func (s *space) n() int { return len(s.name) }

// vecMs is the Euclidean distance of relays u's and v's vectors, ms as
// stored.
func (s *space) vecMs(u, v int) float64 {
	a, b := s.vec[u*s.dim:(u+1)*s.dim], s.vec[v*s.dim:(v+1)*s.dim]
	sum := 0.0
	for i := range a {
		d := a[i] - b[i]
		sum += d * d
	}
	return math.Sqrt(sum)
}

// ms is the estimated RTT between relays u and v, milliseconds.
func (s *space) ms(u, v int) float64 {
	d := s.vecMs(u, v) + s.hgt[u] + s.hgt[v]
	if adjusted := d + s.adj[u] + s.adj[v]; adjusted > 0 {
		d = adjusted
	}
	return d
}

// subset is the space of the relays at idx (in that order), with the
// published pairs between them, its estimates scaled times longer (the
// coordinates scaled, so ms costs no more; the published pairs as they
// are). A scale ≤ 0 is 1.
func (s *space) subset(idx []int, scale float64) *space {
	if scale <= 0 {
		scale = 1
	}
	out := &space{dim: s.dim, scale: scale * cmp.Or(s.scale, 1)}
	at := make(map[int]int, len(idx))
	for i, u := range idx {
		at[u] = i
		for _, x := range s.vec[u*s.dim : (u+1)*s.dim] {
			out.vec = append(out.vec, x*scale)
		}
		out.hgt, out.adj = append(out.hgt, s.hgt[u]*scale), append(out.adj, s.adj[u]*scale)
		out.name = append(out.name, s.name[u])
	}
	if s.exact != nil {
		for i, u := range idx {
			for _, e := range s.exact[u] {
				if j, ok := at[e.v]; ok && i < j {
					out.addExact(i, j, e.ms)
				}
			}
		}
	}
	return out
}

// apartMs is how far apart relays u and v sit in the coordinate space,
// milliseconds as placed (the subset's scale undone): the vector distance
// alone, without the heights and adjustments that stand for each relay's
// own access link. Relays of one data centre or city are close by it
// however slow their access.
func (s *space) apartMs(u, v int) float64 {
	return s.vecMs(u, v) / cmp.Or(s.scale, 1)
}

// nearest is the count relays with the lowest estimated RTT to u (u not
// included), nearest first.
func (s *space) nearest(u, count int) []string {
	type near struct {
		v  int
		ms float64
	}
	var top []near
	for v := 0; v < s.n(); v++ {
		if v == u {
			continue
		}
		ms := s.ms(u, v)
		if len(top) == count && ms >= top[count-1].ms {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, ms, func(a near, ms float64) int { return cmp.Compare(a.ms, ms) })
		top = slices.Insert(top, i, near{v, ms})
		if len(top) > count {
			top = top[:count]
		}
	}
	out := make([]string, len(top))
	for i, t := range top {
		out[i] = s.name[t.v]
	}
	return out
}

// normCost is (ms/scaleMs)^8: a chain's cost for the candidate ranking is
// the sum of its segments' (the 8-norm, to the 8th power). A chain's rate
// is set by its longest segment, but ranking by that alone ties every
// chain that shares one unavoidable segment (a client's slow access link
// binds them all) and breaks the tie by name; the p-norm tends to the
// longest segment as p grows and ranks those chains by the slack of their
// other segments: the ones that an estimate's error is least likely to
// spoil. In the fleet simulator (300 relays, 50 pairs) the candidates held
// a chain within 10 % of the optimum for 84 % of pairs with p = 8, 56 %
// ranked by the longest segment; p = 4 and 16 gave 74 % and 72 %.
func normCost(ms, scaleMs float64) float64 {
	x := ms / scaleMs
	x *= x
	x *= x
	return x * x
}

// reach is, for every relay v and every k in 1..hops, the lowest cost
// (normCost summed over segments) of a path from an endpoint that reaches
// v as its k-th relay or sooner: reach[k-1][v]. endMs[v] is the
// endpoint's RTT to v. A hop's RTT is the lower of its estimate and its
// published figure: the ranking is optimistic, the rounds measure. Paths
// with a segment longer than boundMs are not extended (nothing through
// them can be a candidate).
//
// Each step is O(n²) estimates, the bulk of a plan's computation at
// thousands of relays, so the relays v are split among GOMAXPROCS
// goroutines: each writes only its own v, and a minimum of the same sums
// is the same whatever the order.
func (s *space) reach(endMs []float64, hops int, scaleMs, boundMs float64) [][]float64 {
	n := s.n()
	bound := normCost(boundMs, scaleMs)
	out := make([][]float64, hops)
	out[0] = make([]float64, n)
	for v, ms := range endMs {
		out[0][v] = normCost(ms, scaleMs)
	}
	workers := 1
	if n >= parallelFrom {
		workers = runtime.GOMAXPROCS(0)
	}
	for k := 1; k < hops; k++ {
		prev, cur := out[k-1], slices.Clone(out[k-1])
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := w*n/workers, (w+1)*n/workers
			wg.Go(func() { s.extend(prev, cur[lo:hi], lo, scaleMs, boundMs, bound) })
		}
		wg.Wait()
		out[k] = cur
	}
	return out
}

// parallelFrom is the fleet size from which reach splits its work.
const parallelFrom = 500

// extend lowers cur (the costs of relays lo, lo+1, …) by one more hop
// from any relay u with a cost in prev at most bound.
func (s *space) extend(prev, cur []float64, lo int, scaleMs, boundMs, bound float64) {
	for u, cu := range prev {
		if cu > bound {
			continue
		}
		for i := range cur {
			if cur[i] <= cu {
				continue // adding a segment cannot make it cheaper
			}
			if ms := s.ms(u, lo+i); ms <= boundMs {
				cur[i] = math.Min(cur[i], cu+normCost(ms, scaleMs))
			}
		}
	}
	if s.exact == nil {
		return
	}
	for i := range cur {
		for _, e := range s.exact[lo+i] {
			if cu := prev[e.v]; cu <= bound {
				cur[i] = math.Min(cur[i], cu+normCost(e.ms, scaleMs))
			}
		}
	}
}

// siteLimit bounds how many relays of one site rankCandidates takes: at
// most perSite relays within radius × the direct path's RTT of each other
// (apartMs); 0 perSite = no bound.
type siteLimit struct {
	perSite int
	radius  float64
}

// rankCandidates ranks relays by the estimated cost (see normCost) of the
// best chain of at most hops relays through them, from the client to the
// destination, and returns the best count (indices into s). A relay on the
// chain that wins, or on one close to it, ranks high, however far off the
// direct path it lies: with only the longest segment setting the rate, the
// best chains often go the long way round.
//
// Relays of one city rank alike (their estimates differ by little more
// than their access links), so in a large fleet the best count can be a
// few cities' relays many times over; with a site limit, a relay with
// site.perSite better-ranked relays around it already taken waits, and
// the waiting fill what is left of count in rank order. Which relay of a
// city pairs best with which of the next is for the rounds to measure
// (the neighbourhood search); which cities are on the chain is what
// coordinates can tell.
func (s *space) rankCandidates(fromClientMs, toDstMs []float64, directMs float64, hops, count int, site siteLimit) []int {
	if hops < 1 || s.n() == 0 {
		return nil
	}
	// A chain is only a candidate if it could beat direct; with an
	// estimate's error, allow segments up to twice direct.
	scale, bound := directMs, 2*directMs
	if math.IsInf(directMs, 1) {
		scale = 100 // no direct path: any scale keeps the order
	}
	f := s.reach(fromClientMs, hops, scale, bound)
	g := s.reach(toDstMs, hops, scale, bound)
	type scored struct {
		v    int
		cost float64
	}
	ranked := make([]scored, 0, s.n())
	for v := 0; v < s.n(); v++ {
		best := math.Inf(1)
		// v as the i-th relay from the client and the j-th from the
		// destination, i + j − 1 ≤ hops; v's own segments are on one
		// side each.
		for i := 1; i <= hops; i++ {
			j := hops + 1 - i
			best = math.Min(best, f[i-1][v]+g[j-1][v])
		}
		ranked = append(ranked, scored{v, best})
	}
	slices.SortFunc(ranked, func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.cost, b.cost), cmp.Compare(s.name[a.v], s.name[b.v]))
	})
	out := make([]int, 0, count)
	var waiting []int
	radiusMs := site.radius * scale
	for _, r := range ranked {
		if len(out) == count || math.IsInf(r.cost, 1) {
			break
		}
		if site.perSite > 0 {
			near := 0
			for _, u := range out {
				if s.apartMs(u, r.v) < radiusMs {
					near++
				}
			}
			if near >= site.perSite {
				waiting = append(waiting, r.v)
				continue
			}
		}
		out = append(out, r.v)
	}
	return append(out, waiting[:min(len(waiting), count-len(out))]...)
}
