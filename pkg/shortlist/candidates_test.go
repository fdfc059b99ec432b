package shortlist

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkRankCandidates5000 is the candidate search over 5,000 relays
// spread along a world-wide band (8-dimensional coordinates, most of their
// spread in two), the bulk of a plan's computation at that size.
func BenchmarkRankCandidates5000(b *testing.B) {
	rnd := rand.New(rand.NewPCG(1, 2))
	n := 5000
	sp := &space{dim: 8}
	from, to := make([]float64, n), make([]float64, n)
	for i := range n {
		x, y := rnd.Float64()*300, rnd.Float64()*120
		sp.vec = append(sp.vec, x, y, rnd.NormFloat64()*5, rnd.NormFloat64()*5, rnd.NormFloat64()*3, rnd.NormFloat64()*3, rnd.NormFloat64()*2, rnd.NormFloat64()*2)
		sp.hgt, sp.adj = append(sp.hgt, 1+rnd.Float64()*5), append(sp.adj, rnd.Float64()*4-2)
		sp.name = append(sp.name, fmt.Sprintf("r%d", i))
		from[i], to[i] = 5+x/2+rnd.Float64()*20, 5+(300-x)/2+rnd.Float64()*20
	}
	b.ResetTimer()
	for range b.N {
		sp.rankCandidates(from, to, 150, 4, 768, siteLimit{3, 0.15})
	}
}

func TestFirstCutGrowsWithTheFleet(t *testing.T) {
	for _, c := range []struct{ set, placed, want int }{
		{0, 100, DefaultFirstCut},
		{0, 1000, DefaultFirstCut},
		{0, 5000, 750},
		{0, 5001, 751}, // rounded up
		{768, 5000, 768},
		{-1, 5000, -1},
	} {
		if got := (Config{FirstCut: c.set}).firstCut(c.placed); got != c.want {
			t.Errorf("first cut %d of %d placed relays: %d, want %d", c.set, c.placed, got, c.want)
		}
	}
}
