package shortlist

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// optimisticPairs bounds a pair by the best chain through it, not by its
// own estimate: a pair with a fine estimate whose every chain has a slow
// segment elsewhere is not worth a probe, and the rest come most
// promising first.
func TestOptimisticPairsRankByTheChainThroughThem(t *testing.T) {
	// Client c, destination d, relays a, b, x. c→a, b→d and c→x are
	// measured at 10 ms; x→d at 90 and a→d at 60, so every chain through
	// a→x has a segment slower than the best plan's 50 ms.
	measured := map[[2]string]float64{
		key("c", "a"): 10, key("b", "d"): 10, key("c", "x"): 10, key("x", "d"): 90,
		key("a", "d"): 60, key("c", "b"): 60,
	}
	estimated := map[[2]string]float64{
		key("a", "b"): 40, // at 0.6: 24, on c-a-b-d (rest 10)
		key("a", "x"): 20, // at 0.6: 12, but c-a-x-d needs x→d (90), c-x-a-d a→d (60)
		key("b", "x"): 70, // at 0.6: 42, on c-x-b-d (rest 10)
	}
	rtt := figures(measured, estimated)
	// Two relays a chain at most (three would let x start c-x-a-b-d).
	got := optimisticPairs(gridOf([]string{"a", "b", "x"}, rtt), 2, 50, flatOptimism(5, 0.6), 0)
	want := []bounded{{"a", "b", 24}, {"b", "x", 42}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.a != w.a || g.b != w.b || math.Abs(g.boundMs-w.boundMs) > 1e-9 {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	// A limit keeps the first of that order.
	if got := optimisticPairs(gridOf([]string{"a", "b", "x"}, rtt), 2, 50, flatOptimism(5, 0.6), 1); len(got) != 1 || got[0].a != "a" || got[0].b != "b" {
		t.Fatalf("limit 1: got %+v, want a–b alone", got)
	}
	// With one relay a chain, no pair of relays is a segment.
	if got := optimisticPairs(gridOf([]string{"a", "b", "x"}, rtt), 1, 50, flatOptimism(5, 0.6), 0); len(got) != 0 {
		t.Fatalf("one relay: got %+v, want none", got)
	}
}

// A young relay's pairs (its coordinate still finding its place) are
// bounded at their lower optimism, and a pair takes the lower of its two
// ends'.
func TestOptimisticPairsOfAYoungRelay(t *testing.T) {
	// c→a and b→d measured at 10 ms; a→b estimated at 100: at 0.6 it is
	// 60, slower than the best plan's 50 ms; at 0.4, 40.
	measured := map[[2]string]float64{key("c", "a"): 10, key("b", "d"): 10, key("c", "b"): 90, key("a", "d"): 90}
	rtt := figures(measured, map[[2]string]float64{key("a", "b"): 100})
	g := gridOf([]string{"a", "b"}, rtt)
	if got := optimisticPairs(g, 2, 50, flatOptimism(g.n(), 0.6), 0); len(got) != 0 {
		t.Fatalf("settled relays: got %+v, want none", got)
	}
	for _, young := range []string{"a", "b"} {
		opt := flatOptimism(g.n(), 0.6)
		opt[slices.Index(g.name, young)] = 0.4
		if got := optimisticPairs(g, 2, 50, opt, 0); len(got) != 1 || got[0].a != "a" || got[0].b != "b" || math.Abs(got[0].boundMs-40) > 1e-9 {
			t.Fatalf("%s young: got %+v, want a–b bounded at 40 ms", young, got)
		}
	}
}

// A chain that beats the best plan only when two of its estimated pairs
// are both well below their estimates: at optimism 0 only measured
// segments rule a chain out, so both pairs are probed; trusting the
// estimates (1), neither is.
func TestOptimisticPairsCountEveryEstimateOfTheChain(t *testing.T) {
	// c→a and x→d measured at 10 ms; a→b and b→x estimated at 70 each,
	// truly 20: c-a-b-x-d would beat the best plan's 50 ms.
	measured := map[[2]string]float64{key("c", "a"): 10, key("x", "d"): 10,
		key("c", "b"): 90, key("b", "d"): 90, key("c", "x"): 90, key("a", "d"): 90}
	estimated := map[[2]string]float64{key("a", "b"): 70, key("b", "x"): 70, key("a", "x"): 200}
	rtt := figures(measured, estimated)
	cands := []string{"a", "b", "x"}
	got := optimisticPairs(gridOf(cands, rtt), 3, 50, flatOptimism(len(cands)+2, 0), 0)
	var pairs [][2]string
	for _, g := range got {
		pairs = append(pairs, [2]string{g.a, g.b})
		if g.boundMs != 10 {
			t.Errorf("pair %s-%s bound %.0f ms, want 10 (its chain's measured segments)", g.a, g.b, g.boundMs)
		}
	}
	want := [][2]string{{"a", "b"}, {"a", "x"}, {"b", "x"}}
	if !slices.Equal(pairs, want) {
		t.Fatalf("optimism 0: pairs %v, want %v", pairs, want)
	}
	// A limit among ties keeps the first by name, as the whole order has.
	if got := optimisticPairs(gridOf(cands, rtt), 3, 50, flatOptimism(len(cands)+2, 0), 2); len(got) != 2 || got[0].b != "b" || got[1].b != "x" || got[1].a != "a" {
		t.Fatalf("optimism 0, limit 2: got %+v, want a–b and a–x", got)
	}
	// At 0.5 each pair alone would be 35 ms; with the other at its
	// estimate (70) the chain is no better than 50: the bound must count
	// the other pair at 0.5 too.
	if got := optimisticPairs(gridOf(cands, rtt), 3, 50, flatOptimism(len(cands)+2, 0.5), 0); len(got) != 2 || got[0].boundMs != 35 || got[1].boundMs != 35 {
		t.Fatalf("optimism 0.5: got %+v, want a-b and b-x at 35 ms", got)
	}
	if got := optimisticPairs(gridOf(cands, rtt), 3, 50, flatOptimism(len(cands)+2, 1), 0); len(got) != 0 {
		t.Fatalf("optimism 1: got %+v, want none", got)
	}
}

// figures is a pair's figure by name over measured and estimated pairs.
func figures(measured, estimated map[[2]string]float64) func(a, b string) (float64, bool, bool) {
	return func(a, b string) (float64, bool, bool) {
		if v, ok := measured[key(a, b)]; ok {
			return v, false, true
		}
		if v, ok := estimated[key(a, b)]; ok {
			return v, true, true
		}
		return 0, false, false
	}
}

// gridOf is the grid of the client "c", the destination "d" and cands by
// rtt.
func gridOf(cands []string, rtt func(a, b string) (float64, bool, bool)) *grid {
	names := append([]string{"c", "d"}, cands...)
	g := &grid{}
	g.fill(names, func(i, j int) (float64, bool, bool) { return rtt(names[i], names[j]) })
	return g
}

// The limit keeps the first pairs of the whole order, by bound and then by
// name, whatever the grid's order of the names: here the candidates are
// out of name order, the client's name sorts last and many bounds tie.
func TestOptimisticPairsLimitIsThePrefixOfTheWholeOrder(t *testing.T) {
	cands := []string{"x", "b", "m", "a", "q", "e"}
	names := append([]string{"zz", "d"}, cands...)
	rnd := rand.New(rand.NewPCG(3, 4))
	g := &grid{}
	g.fill(names, func(i, j int) (float64, bool, bool) {
		// Whole milliseconds from a few values: ties are common.
		return float64(10 + 5*rnd.IntN(4)), rnd.IntN(4) > 0, true
	})
	whole := optimisticPairs(g, 3, 60, flatOptimism(g.n(), 0.8), 0)
	if len(whole) < 8 {
		t.Fatalf("%d pairs: too few to test a limit", len(whole))
	}
	if !slices.IsSortedFunc(whole, func(x, y bounded) int {
		return cmp.Or(cmp.Compare(x.boundMs, y.boundMs), cmp.Compare(x.a, y.a), cmp.Compare(x.b, y.b))
	}) {
		t.Fatalf("not in (bound, a, b) order: %+v", whole)
	}
	for k := 1; k <= len(whole)+1; k++ {
		got := optimisticPairs(g, 3, 60, flatOptimism(g.n(), 0.8), k)
		if want := whole[:min(k, len(whole))]; !slices.Equal(got, want) {
			t.Fatalf("limit %d: %+v, want %+v", k, got, want)
		}
	}
}

// The best chain measured throughout is the lowest bottleneck over the
// measured figures alone, of at most hops relays, or the direct path: an
// estimate, however low, is no part of it.
func TestMeasuredBestMs(t *testing.T) {
	measured := map[[2]string]float64{
		key("c", "d"): 100, key("c", "a"): 20, key("a", "b"): 30, key("b", "d"): 25,
		key("a", "d"): 70, key("c", "x"): 5,
	}
	estimated := map[[2]string]float64{key("x", "d"): 5, key("a", "x"): 1}
	g := gridOf([]string{"a", "b", "x"}, figures(measured, estimated))
	for _, c := range []struct {
		hops   int
		wantMs float64
	}{{0, 100}, {1, 70}, {2, 30}, {3, 30}} {
		if got := measuredBestMs(g, c.hops); got != c.wantMs {
			t.Errorf("%d relays at most: %v, want %v", c.hops, got, c.wantMs)
		}
	}
	none := gridOf([]string{"a"}, figures(nil, map[[2]string]float64{key("c", "d"): 10, key("c", "a"): 1, key("a", "d"): 1}))
	if got := measuredBestMs(none, 2); !math.IsInf(got, 1) {
		t.Errorf("nothing measured: %v, want +Inf", got)
	}
}
