package shortlist

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
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
	// off are the relays out of this plan (its first round could not
	// reach them): no relay of a chain, no one's neighbour. nil: none.
	off []bool
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

// ms is the estimated RTT between relays u and v, milliseconds. It is
// symmetric to the last bit (the pairs' sums are formed before they are
// added, and IEEE addition commutes), so reach can compute each pair once
// for both directions.
func (s *space) ms(u, v int) float64 {
	d := s.vecMs(u, v) + (s.hgt[u] + s.hgt[v])
	if adjusted := d + (s.adj[u] + s.adj[v]); adjusted > 0 {
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
		if v == u || s.off != nil && s.off[v] {
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

// normCost is (ms/costUnitMs)^8: a chain's cost for the candidate ranking
// is the sum of its segments' (the 8-norm, to the 8th power). A chain's
// rate is set by its longest segment, but ranking by that alone ties
// every chain that shares one unavoidable segment (a client's slow access
// link binds them all) and breaks the tie by name; the p-norm tends to
// the longest segment as p grows and ranks those chains by the slack of
// their other segments: the ones that an estimate's error is least likely
// to spoil. Of the exponents tried, 8 left the candidates holding a good
// chain most often (docs/defaults.md#the-rankings-exponent).
//
// The unit is fixed, not the plan's direct path: multiplying every cost
// by one factor keeps their order, so a pair of relays costs the same in
// every plan and pairCosts can cost them all before a plan knows its
// endpoints.
func normCost(ms float64) float64 {
	x := ms / costUnitMs
	x *= x
	x *= x
	return x * x
}

// costUnitMs is normCost's unit: costs of segments from 0.01 ms to 10 s
// are normal float32s (1e-32 to 1e24).
const costUnitMs = 100

// segCost is the cost of the pair (u, v) as reach counts it: its estimate
// rounded to float32 (a few nanoseconds in a hundred milliseconds), its
// cost rounded again, so a pair costs the same kept in pairCosts or not.
func (s *space) segCost(u, v int) float32 {
	return float32(normCost(float64(float32(s.ms(u, v)))))
}

// pairCosts is segCost of every pair, in segAt's layout; nil for more than
// segCacheRelays relays. It is O(n²) estimates (an 8-dimensional distance
// and its square root each), most of a ranking's computation with the
// hops' lowering; rows are shared among GOMAXPROCS goroutines from
// parallelFrom relays on. It hangs on the coordinates alone, so a plan
// computes it while its first round's probes are out.
func (s *space) pairCosts() []float32 {
	n := s.n()
	if n < 2 || n > segCacheRelays {
		return nil
	}
	tri := make([]float32, n*(n-1)/2)
	workers := 1
	if n >= parallelFrom {
		workers = runtime.GOMAXPROCS(0)
	}
	var next atomic.Int64 // the next block of rows to take
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				lo := int(next.Add(reachBlock)) - reachBlock
				if lo >= n {
					return
				}
				for u := lo; u < min(lo+reachBlock, n-1); u++ {
					row := tri[segAt(n, u, u+1) : segAt(n, u, u+1)+n-u-1]
					s.msRow(u, row)
					for i, ms := range row {
						row[i] = float32(normCost(float64(ms)))
					}
				}
			}
		})
	}
	wg.Wait()
	return tri
}

// reach is, for every relay v and every k in 1..hops, the lowest cost
// (normCost summed over segments) of a path from an endpoint that reaches
// v as its k-th relay or sooner: from[k-1][v] from the endpoint whose RTT
// to v is fromMs[v], to[k-1][v] from the one whose RTT is toMs[v]. A hop's
// RTT is the lower of its estimate and its published figure: the ranking
// is optimistic, the rounds measure. Paths with a segment longer than
// boundMs are not extended (nothing through them can be a candidate).
//
// Each hop is O(n²) pairs, the bulk of a plan's computation at thousands
// of relays. Both endpoints' costs are extended in one pass that visits
// each unordered pair once (a pair's estimate is symmetric), so a hop
// costs n²/2 pairs, not 2n². The pairs' costs are tri (pairCosts of s),
// or computed here when tri is nil: kept between hops up to
// segCacheRelays relays (float32: 50 MB at 5,000), else estimated anew
// each hop. Costing the pairs before the ranking (while the first round
// is out) and taking every pair's minimum without branching on its
// worth, which mispredicts at thousands of relays, is what keeps the
// ranking short (BenchmarkRankCandidates5000, BenchmarkPairCosts5000;
// docs/defaults.md#the-first-cuts-search-timed). The pass's rows are
// shared among GOMAXPROCS goroutines, each lowering its own copy of the
// costs; the copies are merged by their minimum, and a
// minimum of the same sums is the same whatever the order, so the result
// does not depend on the cores.
func (s *space) reach(fromMs, toMs []float64, hops int, boundMs float64, tri []float32) (from, to [][]float64) {
	n := s.n()
	bound := normCost(boundMs)
	from, to = make([][]float64, hops), make([][]float64, hops)
	from[0], to[0] = make([]float64, n), make([]float64, n)
	for v := range n {
		from[0][v], to[0][v] = normCost(fromMs[v]), normCost(toMs[v])
	}
	s.turnOff(from[0], to[0])
	workers := 1
	if n >= parallelFrom {
		workers = runtime.GOMAXPROCS(0)
	}
	if tri == nil && hops > 2 {
		tri = s.pairCosts()
	}
	for k := 1; k < hops; k++ {
		prevA, prevB := from[k-1], to[k-1]
		curA, curB := slices.Clone(prevA), slices.Clone(prevB)
		srcA, srcB := withinBound(prevA, bound), withinBound(prevB, bound)
		var next atomic.Int64 // the next block of rows to take
		// own are the workers' costs: the first lowers cur itself.
		own := [][2][]float64{{curA, curB}}
		for range workers - 1 {
			own = append(own, [2][]float64{slices.Clone(prevA), slices.Clone(prevB)})
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for {
					lo := int(next.Add(reachBlock)) - reachBlock
					if lo >= n {
						return
					}
					s.extend(srcA, srcB, own[w][0], own[w][1], lo, min(lo+reachBlock, n), bound, tri)
				}
			})
		}
		wg.Wait()
		for _, o := range own[1:] {
			for v := range n {
				curA[v], curB[v] = min(curA[v], o[0][v]), min(curB[v], o[1][v])
			}
		}
		if s.exact != nil {
			for v := range n {
				for _, e := range s.exact[v] {
					c := normCost(e.ms)
					if a := prevA[e.v]; a <= bound && a+c < curA[v] {
						curA[v] = a + c
					}
					if b := prevB[e.v]; b <= bound && b+c < curB[v] {
						curB[v] = b + c
					}
				}
			}
		}
		s.turnOff(curA, curB)
		from[k], to[k] = curA, curB
	}
	return from, to
}

// turnOff sets the costs of the relays out of the plan to +Inf.
func (s *space) turnOff(costs ...[]float64) {
	for v, off := range s.off {
		if off {
			for _, c := range costs {
				c[v] = math.Inf(1)
			}
		}
	}
}

// withinBound is costs with those above bound +Inf: no hop extends them.
func withinBound(costs []float64, bound float64) []float64 {
	out := make([]float64, len(costs))
	for v, c := range costs {
		if c > bound {
			c = math.Inf(1)
		}
		out[v] = c
	}
	return out
}

// parallelFrom is the fleet size from which reach and pairCosts split
// their work; reachBlock is how many rows a goroutine takes at a time
// (rows differ in length: row u pairs u with the relays after it).
const (
	parallelFrom = 500
	reachBlock   = 32
)

// segCacheRelays is the largest fleet whose pairs' costs pairCosts keeps:
// n²/2 float32s, 128 MiB at this size. A variable for the tests, which
// compare the costs with and without.
var segCacheRelays = 8192

// segAt is the index of pair (u, v), u < v, among n relays' pairs in a
// triangular array of rows u = 0, 1, ..., each holding v = u+1 ... n−1.
func segAt(n, u, v int) int {
	return u*(2*n-u-1)/2 + v - u - 1
}

// extend lowers curA and curB by one more hop, over the pairs (u, v) with
// lo ≤ u < hi and u < v, in either direction, from a relay whose cost in
// prevA or prevB is at most bound (srcA and srcB: those costs, the others
// +Inf) and over a segment costing at most bound. The pairs' costs are
// read from tri (pairCosts' layout) or, nil, computed (segCost). The loop
// has no branch on the costs: at thousands of relays most pairs lower
// nothing, and which is as good as random; a min always taken is cheaper
// than a branch mispredicted.
func (s *space) extend(srcA, srcB, curA, curB []float64, lo, hi int, bound float64, tri []float32) {
	n := s.n()
	// The bound as a float32, as pairCosts keeps a segment's cost,
	// compared as a float64 (exact, and cheaper in this loop).
	inf, boundC := math.Inf(1), float64(float32(bound))
	var own []float32 // row u's costs, when computed here
	for u := lo; u < hi && u < n-1; u++ {
		var row []float32
		if tri != nil {
			row = tri[segAt(n, u, u+1) : segAt(n, u, u+1)+n-u-1]
		} else {
			own = own[:0]
			for v := u + 1; v < n; v++ {
				own = append(own, s.segCost(u, v))
			}
			row = own
		}
		au, bu := srcA[u], srcB[u]
		toUA, toUB := curA[u], curB[u]
		sA, sB := srcA[u+1:n], srcB[u+1:n]
		cA, cB := curA[u+1:n], curB[u+1:n]
		sA, sB, cA, cB = sA[:len(row)], sB[:len(row)], cA[:len(row)], cB[:len(row)]
		for i, c32 := range row {
			c := float64(c32)
			if c > boundC {
				c = inf
			}
			cA[i] = min(cA[i], au+c)
			cB[i] = min(cB[i], bu+c)
			toUA = min(toUA, sA[i]+c)
			toUB = min(toUB, sB[i]+c)
		}
		curA[u], curB[u] = toUA, toUB
	}
}

// msRow sets row[v−u−1] to float32(ms(u, v)) for every v after u: ms
// inlined, u's part read once (the same operations in the same order, so
// the same figures to the bit).
func (s *space) msRow(u int, row []float32) {
	dim := s.dim
	vecU, hgtU, adjU := s.vec[u*dim:(u+1)*dim], s.hgt[u], s.adj[u]
	hgt, adj := s.hgt[u+1:], s.adj[u+1:]
	hgt, adj = hgt[:len(row)], adj[:len(row)]
	vec := s.vec[(u+1)*dim:]
	for i := range row {
		vecV := vec[i*dim : (i+1)*dim]
		vecV = vecV[:len(vecU)]
		sum := 0.0
		for j, x := range vecU {
			d := x - vecV[j]
			sum += d * d
		}
		ms := math.Sqrt(sum) + (hgtU + hgt[i])
		if adjusted := ms + (adjU + adj[i]); adjusted > 0 {
			ms = adjusted
		}
		row[i] = float32(ms)
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
//
// tri is s's pairCosts when the caller has them (nil: computed here).
func (s *space) rankCandidates(fromClientMs, toDstMs []float64, directMs float64, hops, count int, site siteLimit, tri []float32) []int {
	if hops < 1 || s.n() == 0 {
		return nil
	}
	// A chain is only a candidate if it could beat direct; with an
	// estimate's error, allow segments up to twice direct.
	scale, bound := directMs, 2*directMs
	if math.IsInf(directMs, 1) {
		scale = 100 // no direct path: the sites' radius needs one
	}
	f, g := s.reach(fromClientMs, toDstMs, hops, bound, tri)
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
