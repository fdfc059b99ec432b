package shortlist

import (
	"cmp"
	"math"
	"slices"
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
}

func (s *space) n() int { return len(s.name) }

// ms is the estimated RTT between relays u and v, milliseconds.
func (s *space) ms(u, v int) float64 {
	a, b := s.vec[u*s.dim:(u+1)*s.dim], s.vec[v*s.dim:(v+1)*s.dim]
	sum := 0.0
	for i := range a {
		d := a[i] - b[i]
		sum += d * d
	}
	d := math.Sqrt(sum) + s.hgt[u] + s.hgt[v]
	if adjusted := d + s.adj[u] + s.adj[v]; adjusted > 0 {
		d = adjusted
	}
	return d
}

// reach is, for every relay v and every k in 1..hops, the lowest
// estimated bottleneck of a path from an endpoint that reaches v as its
// k-th relay or sooner: reach[k-1][v]. endMs[v] is the endpoint's RTT to
// v. bound prunes: paths whose bottleneck is already above it are not
// extended (nothing through them can be a candidate).
func (s *space) reach(endMs []float64, hops int, bound float64) [][]float64 {
	n := s.n()
	out := make([][]float64, hops)
	out[0] = slices.Clone(endMs)
	for k := 1; k < hops; k++ {
		prev, cur := out[k-1], slices.Clone(out[k-1])
		for u := 0; u < n; u++ {
			bu := prev[u]
			if bu > bound {
				continue
			}
			for v := 0; v < n; v++ {
				if cur[v] <= bu {
					continue // max(bu, ·) cannot improve it
				}
				if b := math.Max(bu, s.ms(u, v)); b < cur[v] {
					cur[v] = b
				}
			}
		}
		out[k] = cur
	}
	return out
}

// minimaxCandidates ranks relays by the estimated bottleneck of the best
// chain of at most hops relays through them, from the client to the
// destination, and returns the best count (indices into s). A relay on the
// chain that wins, or on one close to it, ranks high, however far off the
// direct path it lies: with only the longest segment setting the rate, the
// best chains often go the long way round.
func (s *space) minimaxCandidates(fromClientMs, toDstMs []float64, directMs float64, hops, count int) []int {
	if hops < 1 || s.n() == 0 {
		return nil
	}
	// A chain through a relay is only a candidate if it could beat
	// direct; with an estimate's error, allow twice direct.
	bound := 2 * directMs
	f := s.reach(fromClientMs, hops, bound)
	g := s.reach(toDstMs, hops, bound)
	type scored struct {
		v  int
		ms float64
	}
	ranked := make([]scored, 0, s.n())
	for v := 0; v < s.n(); v++ {
		best := math.Inf(1)
		// v as the i-th relay from the client and the j-th from the
		// destination, i + j − 1 ≤ hops.
		for i := 1; i <= hops; i++ {
			j := hops + 1 - i
			best = math.Min(best, math.Max(f[i-1][v], g[j-1][v]))
		}
		ranked = append(ranked, scored{v, best})
	}
	slices.SortFunc(ranked, func(a, b scored) int {
		return cmp.Or(cmp.Compare(a.ms, b.ms), cmp.Compare(s.name[a.v], s.name[b.v]))
	})
	out := make([]int, 0, count)
	for _, r := range ranked[:min(count, len(ranked))] {
		if !math.IsInf(r.ms, 1) {
			out = append(out, r.v)
		}
	}
	return out
}
