package shortlist

import (
	"cmp"
	"math"
	"slices"
)

// bounded is an estimated pair and the bottleneck of the best chain
// through it with its RTT at the optimistic figure, ms.
type bounded struct {
	a, b    string
	boundMs float64
}

// optimisticPairs returns the estimated pairs of g (the client, the
// destination and the candidates) that would put a chain ahead of the bar
// (a bottleneck of bestMs: Config.ExploreBar) were the estimates too high by their
// optimism, best chance first: optimism[i] is grid position i's, and a
// pair's is the lower of its two ends'. A pair's bound is the best chain
// of at most hops relays through it with every estimated relay pair, its
// own included, at estimate × its optimism and every other segment at its
// figure (a minimax
// program over the candidates, from both ends). At optimism 0 only what
// was measured prunes: a pair is worth a probe when a chain through it has
// no measured segment as slow as the best plan, whatever the estimates
// say. A detour's good long hop is what coordinates see worst, and the
// fast chains the coordinates miss often need two such hops at once. At
// 1,000 relays that is a few thousand probes a plan, which cost a round no
// more requests: each relay asked is asked once a round, for all of its
// probes. Only the first limit are returned (limit ≤ 0: all): a round
// takes at most its probe budget of them, and sorting every pair of a
// few hundred candidates by name and bound, for a few thousand, was a
// tenth of a plan's computation at 5,000 relays.
func optimisticPairs(g *grid, hops int, bestMs float64, optimism []float64, limit int) []bounded {
	if hops < 1 {
		return nil
	}
	const ends = 2 // the grid's client and destination come first
	n := g.n() - ends
	fig := make([]float64, n*n)
	est := make([]bool, n*n)
	fromClient, toDst := make([]float64, n), make([]float64, n)
	estClient, estDst := make([]bool, n), make([]bool, n)
	for i := range n {
		fromClient[i], estClient[i], _ = g.fig(gridClient, ends+i)
		toDst[i], estDst[i], _ = g.fig(ends+i, gridDst)
		for j := i + 1; j < n; j++ {
			ms, e, _ := g.fig(ends+i, ends+j)
			if e {
				ms *= min(optimism[ends+i], optimism[ends+j])
			}
			fig[i*n+j], fig[j*n+i] = ms, ms
			est[i*n+j], est[j*n+i] = e, e
		}
	}
	pre, suf := reachOver(fig, fromClient, hops, bestMs), reachOver(fig, toDst, hops, bestMs)
	// rank is each grid position's place in name order; byRank the
	// names in that order.
	rank, byRank := make([]int32, g.n()), make([]string, g.n())
	{
		order := make([]int32, g.n())
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(g.name[x], g.name[y]) })
		for r, i := range order {
			rank[i] = int32(r)
			byRank[r] = g.name[i]
		}
	}
	// pair is a bounded pair by its grid positions' places in name
	// order (comparing them compares the names), kept small: a round at
	// 5,000 relays bounds a few hundred thousand pairs.
	type pair struct {
		ra, rb  int32
		boundMs float64
	}
	var all []pair
	// add: a and b are grid positions, lowMs the pair's optimistic figure.
	add := func(a, b int, lowMs, restMs float64) {
		if bound := max(lowMs, restMs); bound < bestMs {
			all = append(all, pair{rank[a], rank[b], bound})
		}
	}
	for v := 0; v < n; v++ {
		if estClient[v] {
			add(gridClient, ends+v, fromClient[v]*min(optimism[gridClient], optimism[ends+v]), suf[hops-1][v])
		}
		if estDst[v] {
			add(ends+v, gridDst, toDst[v]*min(optimism[ends+v], optimism[gridDst]), pre[hops-1][v])
		}
	}
	for u := 0; u < n; u++ {
		for v := u + 1; v < n; v++ {
			if !est[u*n+v] {
				continue
			}
			// The rest of the best chain through u then v, or v then u.
			rest := math.Inf(1)
			for i := 1; i < hops; i++ {
				j := hops - i
				rest = min(rest, max(pre[i-1][u], suf[j-1][v]))
				rest = min(rest, max(pre[i-1][v], suf[j-1][u]))
			}
			add(ends+u, ends+v, fig[u*n+v], rest)
		}
	}
	// Keep the pairs whose bound is at most the limit-th lowest (ties
	// included, so the order below decides among them as it would over
	// all), then sort those.
	if limit > 0 && len(all) > limit {
		bounds := make([]float64, len(all))
		for i, b := range all {
			bounds[i] = b.boundMs
		}
		slices.Sort(bounds)
		cut := bounds[limit-1]
		all = slices.DeleteFunc(all, func(b pair) bool { return b.boundMs > cut })
	}
	// The names break ties, by their places in name order.
	slices.SortFunc(all, func(x, y pair) int {
		if c := cmp.Compare(x.boundMs, y.boundMs); c != 0 {
			return c
		}
		if x.ra != y.ra {
			return cmp.Compare(x.ra, y.ra)
		}
		return cmp.Compare(x.rb, y.rb)
	})
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]bounded, len(all))
	for i, p := range all {
		out[i] = bounded{a: byRank[p.ra], b: byRank[p.rb], boundMs: p.boundMs}
	}
	return out
}

// flatOptimism is optimism for each of n grid positions.
func flatOptimism(n int, optimism float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = optimism
	}
	return out
}

// reachOver is, for each k < hops, the lowest bottleneck of a path from
// an end (endMs: its figure to each relay) that reaches relay v as its
// (k+1)-th relay or sooner ([k][v]), over fig (n×n, ms). A relay already
// at pruneMs or more is not gone on from: no path through it can matter.
func reachOver(fig, endMs []float64, hops int, pruneMs float64) [][]float64 {
	n := len(endMs)
	out := [][]float64{slices.Clone(endMs)}
	for k := 1; k < hops; k++ {
		prev, cur := out[k-1], slices.Clone(out[k-1])
		for u := 0; u < n; u++ {
			if prev[u] >= pruneMs {
				continue
			}
			for v := 0; v < n; v++ {
				cur[v] = min(cur[v], max(prev[u], fig[u*n+v]))
			}
		}
		out = append(out, cur)
	}
	return out
}

// measuredBestMs is the lowest bottleneck of a chain of at most hops
// relays of g, or the direct path, over measured figures alone (+Inf:
// none): the chain a plan has for sure.
func measuredBestMs(g *grid, hops int) float64 {
	const ends = 2
	n := g.n() - ends
	measured := func(i, j int) float64 {
		ms, est, ok := g.fig(i, j)
		if !ok || est {
			return math.Inf(1)
		}
		return ms
	}
	best := measured(gridClient, gridDst)
	if hops < 1 {
		return best
	}
	fig := make([]float64, n*n)
	fromClient := make([]float64, n)
	for u := range n {
		fromClient[u] = measured(gridClient, ends+u)
		for v := range n {
			fig[u*n+v] = measured(ends+u, ends+v)
		}
	}
	pre := reachOver(fig, fromClient, hops, best)
	for v := range n {
		best = min(best, max(pre[hops-1][v], measured(ends+v, gridDst)))
	}
	return best
}
