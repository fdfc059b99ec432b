package netsim

import (
	"math/rand/v2"
	"testing"
)

func newTestWorld(t *testing.T, cfg Config, seed uint64) *World {
	t.Helper()
	w, err := NewWorld(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// mixedPoints returns the world's relays and some endpoints and servers.
func mixedPoints(w *World, rnd *rand.Rand, extra int) []Point {
	ps := w.Relays()
	for i := range extra {
		if i%2 == 0 {
			ps = append(ps, w.RandomEndpoint(rnd))
		} else {
			ps = append(ps, w.RandomServer(rnd))
		}
	}
	return ps
}

func TestRTTSymmetricPositive(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 300}, 42)
	rnd := rand.New(rand.NewPCG(1, 1))
	ps := mixedPoints(w, rnd, 100)
	for range 20000 {
		a, b := ps[rnd.IntN(len(ps))], ps[rnd.IntN(len(ps))]
		ab, ba := w.RTTMs(a, b), w.RTTMs(b, a)
		if ab != ba {
			t.Fatalf("RTT %v→%v = %v, back %v", a.ID(), b.ID(), ab, ba)
		}
		if l1, l2 := w.LossRate(a, b), w.LossRate(b, a); l1 != l2 {
			t.Fatalf("loss %v one way, %v the other", l1, l2)
		}
		if a.ID() == b.ID() {
			if ab != 0 {
				t.Fatalf("RTT from a point to itself = %v", ab)
			}
			continue
		}
		// Never faster than light in fibre on the great circle, plus the
		// access delays.
		floor := 2*DistanceKm(a, b)/w.Config().FibreKmPerMs + 2*(a.AccessMs()+b.AccessMs())
		if !(ab > 0) || ab < floor {
			t.Fatalf("RTT %v ms, floor %v ms (%+v)", ab, floor, w.Path(a, b))
		}
		if p := w.Path(a, b); p.RTTMs != ab {
			t.Fatalf("Path says %v ms, RTTMs %v", p.RTTMs, ab)
		}
	}
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Relays: 200}
	w1, w2 := newTestWorld(t, cfg, 7), newTestWorld(t, cfg, 7)
	r1, r2 := rand.New(rand.NewPCG(3, 3)), rand.New(rand.NewPCG(3, 3))
	p1, p2 := mixedPoints(w1, r1, 50), mixedPoints(w2, r2, 50)
	if len(p1) != len(p2) {
		t.Fatal("worlds of one seed differ in size")
	}
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatalf("point %d differs: %+v vs %+v", i, p1[i], p2[i])
		}
	}
	for i := range p1 {
		j := (i * 7) % len(p1)
		if w1.RTTMs(p1[i], p1[j]) != w2.RTTMs(p2[i], p2[j]) {
			t.Fatalf("RTT %d–%d differs between worlds of one seed", i, j)
		}
		s1, l1 := w1.Sample(p1[i], p1[j], r1)
		s2, l2 := w2.Sample(p2[i], p2[j], r2)
		if s1 != s2 || l1 != l2 {
			t.Fatalf("Sample %d–%d differs between worlds of one seed", i, j)
		}
	}
	// Another seed places relays elsewhere and gives other RTTs.
	w3 := newTestWorld(t, cfg, 8)
	sameCity, sameRTT := 0, 0
	for i := range w1.NumRelays() {
		if w1.Relay(i).City() == w3.Relay(i).City() {
			sameCity++
		}
		j := (i + 1) % w1.NumRelays()
		if w1.RelayRTTMs(i, j) == w3.RelayRTTMs(i, j) {
			sameRTT++
		}
	}
	if sameCity > w1.NumRelays()/5 || sameRTT > 0 {
		t.Errorf("seeds 7 and 8: %d of %d relays in the same city, %d equal RTTs", sameCity, w1.NumRelays(), sameRTT)
	}
}

// A smaller world of the same seed holds the bigger one's first relays, so
// experiments can grow a world without reshuffling it.
func TestRelaysPrefixStable(t *testing.T) {
	small, big := newTestWorld(t, Config{Relays: 50}, 9), newTestWorld(t, Config{Relays: 500}, 9)
	for i := range small.NumRelays() {
		if small.Relay(i) != big.Relay(i) {
			t.Fatalf("relay %d differs between 50 and 500 relays", i)
		}
		for j := range i {
			if small.RelayRTTMs(i, j) != big.RelayRTTMs(i, j) {
				t.Fatalf("RTT %d–%d differs between 50 and 500 relays", i, j)
			}
		}
	}
}

func TestPlacement(t *testing.T) {
	cfg := Config{Relays: MaxRelays}.WithDefaults()
	w := newTestWorld(t, cfg, 11)
	total := 0.0
	for _, c := range cities {
		total += c.Weight
	}
	var count [numRegions]int
	providers := map[int]int{}
	for i, p := range w.Relays() {
		if j, ok := p.Relay(); !ok || j != i || p.ID() != uint64(i) {
			t.Fatalf("relay %d: Relay() = %d, %v; ID %d", i, j, ok, p.ID())
		}
		if p.AccessMs() < relayAccessMinMs || p.AccessMs() > relayAccessMaxMs {
			t.Fatalf("relay %d: access %v ms", i, p.AccessMs())
		}
		if p.Provider() < 0 || p.Provider() >= cfg.Providers {
			t.Fatalf("relay %d: provider %d", i, p.Provider())
		}
		if d := CityDistanceKm(p.City(), p.City()); d != 0 {
			t.Fatal(d)
		}
		count[p.Region()]++
		providers[p.Provider()]++
	}
	// Relays follow the city weights: each region's share within 1.5
	// points of its weight share (binomial σ ≤ 0.5 points at 10,000).
	var want [numRegions]float64
	for _, c := range cities {
		want[c.Region] += c.Weight / total
	}
	for r := range count {
		got := float64(count[r]) / float64(w.NumRelays())
		if got < want[r]-0.015 || got > want[r]+0.015 {
			t.Errorf("%v: %.3f of relays, weight share %.3f", Region(r), got, want[r])
		}
	}
	// Providers: 1/(k+1) weights, so provider 0 hosts about 1/H(20) ≈ 28%.
	if s := float64(providers[0]) / float64(w.NumRelays()); s < 0.25 || s > 0.31 {
		t.Errorf("provider 0 hosts %.3f of relays, want about 0.28", s)
	}

	rnd := rand.New(rand.NewPCG(5, 5))
	for range 1000 {
		e := w.RandomEndpoint(rnd)
		if _, ok := e.Relay(); ok || e.ID()&endpointBit == 0 {
			t.Fatalf("endpoint %d counts as a relay", e.ID())
		}
		if e.AccessMs() < endpointAccessMinMs || e.AccessMs() > endpointAccessMaxMs || e.Provider() < cfg.Providers {
			t.Fatalf("endpoint access %v ms, provider %d", e.AccessMs(), e.Provider())
		}
		s := w.RandomServer(rnd)
		if _, ok := s.Relay(); ok || s.AccessMs() > relayAccessMaxMs || s.Provider() >= cfg.Providers {
			t.Fatalf("server %+v", s)
		}
		// Within the metro radius of the city centre.
		var c Point
		c.x, c.y, c.z = unitVector(cities[e.City()].LatDeg, cities[e.City()].LonDeg)
		if d := DistanceKm(e, c); d > cfg.MetroRadiusKm*1.01 {
			t.Fatalf("endpoint %.1f km from its city centre", d)
		}
	}
}

// RTTMs is O(1) and allocates nothing: nothing is stored per pair.
func TestRTTAllocs(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 100}, 1)
	a, b := w.Relay(3), w.Relay(77)
	if n := testing.AllocsPerRun(100, func() { w.RTTMs(a, b); w.LossRate(a, b) }); n != 0 {
		t.Errorf("RTTMs and LossRate allocate %v times a call", n)
	}
}
