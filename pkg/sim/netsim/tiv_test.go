package netsim

import (
	"math/rand/v2"
	"testing"
)

// Without the random factors, bad routes and the same-provider discount,
// the model is a metric: no relay is a shorter detour for any pair. So the
// TIVs of the default world come from the modelled routing effects, not
// from artefacts of the geometry.
func TestNoTIVWithoutRoutingEffects(t *testing.T) {
	cfg := Config{Relays: 300, CityPairSigma: -1, RouteSigma: -1, HostPairSigma: -1, BadRouteShare: -1, SameProviderFactor: 1}
	w := newTestWorld(t, cfg, 3)
	s := w.TIVStats(500, rand.New(rand.NewPCG(3, 3)))
	if s.Share != 0 {
		t.Errorf("deterministic model has TIVs: %+v", s)
	}
}

// The TIV statistics of the default world (doc.go; the figures it logs:
// docs/defaults.md#the-modelled-internet): measured on 2,000 sampled pairs
// of a 500-relay world, and on 500 pairs for two more seeds.
func TestTIVShare(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		w := newTestWorld(t, Config{Relays: 500}, seed)
		pairs := 2000
		if seed > 1 {
			pairs = 500
		}
		s := w.TIVStats(pairs, rand.New(rand.NewPCG(seed, 1)))
		t.Logf("seed %d, %d pairs: any shorter detour %.3f, ≥10%% shorter %.3f, ≥20%% shorter %.3f, median gain %.3f, violating triangles %.3f",
			seed, pairs, s.Share, s.Share10, s.Share20, s.MedianGain, s.TriangleShare)
		check := func(name string, v, lo, hi float64) {
			if v < lo || v > hi {
				t.Errorf("seed %d: %s = %.3f, want %v to %v", seed, name, v, lo, hi)
			}
		}
		check("Share", s.Share, 0.6, 0.9)
		check("Share10", s.Share10, 0.15, 0.4)
		check("Share20", s.Share20, 0.03, 0.15)
		check("MedianGain", s.MedianGain, 0.02, 0.12)
		check("TriangleShare", s.TriangleShare, 0.03, 0.15)
		bad, rnd := 0, rand.New(rand.NewPCG(seed, 2))
		for range 20000 {
			if w.Path(w.Relay(rnd.IntN(500)), w.Relay(rnd.IntN(500))).BadRouteMs > 0 {
				bad++
			}
		}
		t.Logf("seed %d: %.3f of relay pairs have a bad route", seed, float64(bad)/20000)
		if got := w.TIVShare(pairs, rand.New(rand.NewPCG(seed, 1))); seed == 3 && got != s.Share {
			t.Errorf("TIVShare %v, TIVStats.Share %v", got, s.Share)
		}
	}
}

// The world fitted to the King data set's detours (WithKingDetours) has
// about its shares on each seed the fit averaged: a shorter one-hop
// detour for 85 % of pairs, one at least 20 % shorter for 22 %.
func TestKingDetours(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		w := newTestWorld(t, Config{Relays: 500}.WithKingDetours(), seed)
		s := w.TIVStats(500, rand.New(rand.NewPCG(seed, 1)))
		t.Logf("seed %d: any shorter detour %.3f, ≥20%% shorter %.3f", seed, s.Share, s.Share20)
		if s.Share < 0.75 || s.Share > 0.92 || s.Share20 < 0.16 || s.Share20 > 0.28 {
			t.Errorf("seed %d: shorter detour for %.3f of pairs, ≥20%% shorter for %.3f; want about 0.85 and 0.22", seed, s.Share, s.Share20)
		}
	}
}
