package shortlist

import (
	"math"
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
	rtt := func(a, b string) (float64, bool, bool) {
		if v, ok := measured[key(a, b)]; ok {
			return v, false, true
		}
		if v, ok := estimated[key(a, b)]; ok {
			return v, true, true
		}
		return 0, false, false
	}
	// Two relays a chain at most (three would let x start c-x-a-b-d).
	got := optimisticPairs("c", "d", []string{"a", "b", "x"}, 2, 50, 0.6, rtt)
	want := []bounded{{"a", "b", 24}, {"b", "x", 42}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.a != w.a || g.b != w.b || math.Abs(g.boundMs-w.boundMs) > 1e-9 {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	// With one relay a chain, no pair of relays is a segment.
	if got := optimisticPairs("c", "d", []string{"a", "b", "x"}, 1, 50, 0.6, rtt); len(got) != 0 {
		t.Fatalf("one relay: got %+v, want none", got)
	}
}
