package shortlist

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchSpace is 5,000 relays spread along a world-wide band
// (8-dimensional coordinates, most of their spread in two) and their ends'
// RTTs to endpoints at either end of it.
func benchSpace() (sp *space, from, to []float64) {
	rnd := rand.New(rand.NewPCG(1, 2))
	n := 5000
	sp = &space{dim: 8}
	from, to = make([]float64, n), make([]float64, n)
	for i := range n {
		x, y := rnd.Float64()*300, rnd.Float64()*120
		sp.vec = append(sp.vec, x, y, rnd.NormFloat64()*5, rnd.NormFloat64()*5, rnd.NormFloat64()*3, rnd.NormFloat64()*3, rnd.NormFloat64()*2, rnd.NormFloat64()*2)
		sp.hgt, sp.adj = append(sp.hgt, 1+rnd.Float64()*5), append(sp.adj, rnd.Float64()*4-2)
		sp.name = append(sp.name, fmt.Sprintf("r%d", i))
		from[i], to[i] = 5+x/2+rnd.Float64()*20, 5+(300-x)/2+rnd.Float64()*20
	}
	return sp, from, to
}

// BenchmarkRankCandidates5000 is the candidate search over benchSpace's
// relays, their pairs' costs at hand as a plan has them (computed during
// its first round): the bulk of a plan's computation at that size.
func BenchmarkRankCandidates5000(b *testing.B) {
	sp, from, to := benchSpace()
	tri := sp.pairCosts()
	b.ResetTimer()
	for range b.N {
		sp.rankCandidates(from, to, 150, 4, 768, siteLimit{3, 0.15}, tri)
	}
}

// BenchmarkPairCosts5000 is what a plan computes during its first round
// for the candidate search over benchSpace's relays.
func BenchmarkPairCosts5000(b *testing.B) {
	sp, _, _ := benchSpace()
	b.ResetTimer()
	for range b.N {
		sp.pairCosts()
	}
}

// msRow, which pairCosts costs, is ms rounded to float32 for every pair,
// in serf's 8 dimensions and in others.
func TestMsRowIsMs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	for _, dim := range []int{8, 3} {
		n := 40
		sp := &space{dim: dim}
		for i := range n {
			for range dim {
				sp.vec = append(sp.vec, rnd.NormFloat64()*80)
			}
			sp.hgt, sp.adj = append(sp.hgt, rnd.Float64()*5), append(sp.adj, rnd.Float64()*4-2)
			sp.name = append(sp.name, fmt.Sprintf("r%d", i))
		}
		for u := range n {
			row := make([]float32, n-u-1)
			sp.msRow(u, row)
			for v := u + 1; v < n; v++ {
				if got, want := row[v-u-1], float32(sp.ms(u, v)); got != want {
					t.Fatalf("dim %d, pair (%d, %d): msRow %v, ms %v", dim, u, v, got, want)
				}
			}
		}
	}
}

func TestFirstCutAndCandidatesGrowWithTheFleet(t *testing.T) {
	for _, c := range []struct {
		set          Config
		placed       int
		first, cands int
	}{
		{Config{}, 100, DefaultFirstCut, DefaultCandidates},
		{Config{}, 1000, DefaultFirstCut, DefaultCandidates},
		{Config{}, 5000, 750, 400},
		{Config{}, 5001, 751, 401}, // rounded up
		{Config{FirstCut: 768, Candidates: 96}, 5000, 768, 96},
		{Config{FirstCut: -1}, 5000, -1, 400},
	} {
		first, cands := c.set.sizes(c.placed)
		if first != c.first || cands != c.cands {
			t.Errorf("%+v, %d placed relays: first cut %d, candidates %d; want %d and %d", c.set, c.placed, first, cands, c.first, c.cands)
		}
	}
}
