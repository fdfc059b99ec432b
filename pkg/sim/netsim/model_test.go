package netsim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cityRTTs returns the true RTTs between a data-centre host in city a and
// one in city b over many seeds (one pair per seed): the model's spread,
// not one draw's.
func cityRTTs(t *testing.T, cfg Config, a, b string, seeds int) []float64 {
	t.Helper()
	ia, ok1 := CityIndex(a)
	ib, ok2 := CityIndex(b)
	if !ok1 || !ok2 {
		t.Fatalf("%s or %s not in the city table", a, b)
	}
	cfg.Relays = 1
	var rtts []float64
	for seed := range uint64(seeds) {
		w := newTestWorld(t, cfg, seed)
		rnd := rand.New(rand.NewPCG(seed, 99))
		rtts = append(rtts, w.RTTMs(w.ServerIn(ia, rnd), w.ServerIn(ib, rnd)))
	}
	slices.Sort(rtts)
	return rtts
}

func quantile(sorted []float64, q float64) float64 { return sorted[int(q*float64(len(sorted)-1))] }

// The median true RTT between data centres in well-known city pairs lies
// in a band around the RTTs publicly quoted between cloud regions and VPS
// locations there (typical values in the comments; the bands are about
// ±25% of them, wider where quoted values vary).
func TestCityRTTs(t *testing.T) {
	for _, c := range []struct {
		a, b   string
		lo, hi float64
	}{
		{"London", "New York", 65, 110}, // ~72
		{"Frankfurt", "Amsterdam", 4, 20},
		{"Sydney", "London", 230, 350}, // ~260–280
		{"London", "Frankfurt", 8, 25}, // ~14
		{"New York", "Chicago", 14, 30},
		{"New York", "Los Angeles", 50, 85},  // ~65
		{"Los Angeles", "Tokyo", 85, 135},    // ~105
		{"Frankfurt", "Tokyo", 180, 290},     // ~225
		{"Frankfurt", "Singapore", 130, 200}, // ~160
		{"Tokyo", "Singapore", 55, 95},       // ~70
		{"Hong Kong", "Singapore", 25, 50},   // ~35
		{"Sydney", "Singapore", 75, 120},     // ~92
		{"London", "Mumbai", 95, 150},        // ~115
		{"Sao Paulo", "Miami", 90, 140},      // ~110
		{"Sao Paulo", "London", 160, 250},    // ~190
		{"Johannesburg", "London", 130, 200}, // ~155
		{"Tokyo", "Seoul", 20, 45},           // ~33
		{"Frankfurt", "Hong Kong", 160, 250}, // ~190
		{"Tel Aviv", "Frankfurt", 45, 80},    // ~60
		{"New York", "Tokyo", 130, 200},      // ~150
	} {
		rtts := cityRTTs(t, Config{}, c.a, c.b, 200)
		med := quantile(rtts, 0.5)
		t.Logf("%-12s %-12s p10 %5.1f  median %5.1f  p90 %5.1f ms", c.a, c.b, quantile(rtts, 0.1), med, quantile(rtts, 0.9))
		if med < c.lo || med > c.hi {
			t.Errorf("%s–%s: median true RTT %.1f ms, want %v to %v", c.a, c.b, med, c.lo, c.hi)
		}
	}
}

// Paths between regions go through hubs; paths within one are direct.
func TestHubRouting(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 1}, 1)
	rnd := rand.New(rand.NewPCG(1, 1))
	in := func(name string) Point {
		c, _ := CityIndex(name)
		return w.ServerIn(c, rnd)
	}
	name := func(c int) string {
		if c < 0 {
			return "-"
		}
		return cities[c].Name
	}
	for _, c := range []struct{ a, b, viaA, viaB string }{
		{"Frankfurt", "Tokyo", "Marseille", "Tokyo"},
		{"Paris", "Ashburn", "London", "New York"},
		{"Madrid", "Berlin", "-", "-"},
		{"Tokyo", "Frankfurt", "Tokyo", "Marseille"},
	} {
		p := w.Path(in(c.a), in(c.b))
		if name(p.Via[0]) != c.viaA || name(p.Via[1]) != c.viaB {
			t.Errorf("%s–%s via %s, %s; want %s, %s", c.a, c.b, name(p.Via[0]), name(p.Via[1]), c.viaA, c.viaB)
		}
	}
}

func TestLossRates(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 1000}, 5)
	cfg := w.Config()
	rnd := rand.New(rand.NewPCG(5, 5))
	ps := mixedPoints(w, rnd, 200)
	var short, long []float64
	for range 20000 {
		a, b := ps[rnd.IntN(len(ps))], ps[rnd.IntN(len(ps))]
		if a.ID() == b.ID() {
			continue
		}
		l := w.LossRate(a, b)
		if !(l > 0) || l > cfg.LossMax {
			t.Fatalf("loss rate %v out of (0, %v]", l, cfg.LossMax)
		}
		if p := w.ProbeLossRate(a, b); math.Abs(p-(1-(1-l)*(1-l))) > 1e-15 {
			t.Fatalf("probe loss %v for loss rate %v", p, l)
		}
		if !a.dc || !b.dc {
			continue
		}
		switch d := DistanceKm(a, b); {
		case d < 1000:
			short = append(short, l)
		case d > 10000:
			long = append(long, l)
		}
	}
	slices.Sort(short)
	slices.Sort(long)
	ms, ml := quantile(short, 0.5), quantile(long, 0.5)
	t.Logf("data-centre loss rate: under 1,000 km median %.4f%% (p90 %.4f%%), over 10,000 km median %.3f%% (p90 %.3f%%)",
		100*ms, 100*quantile(short, 0.9), 100*ml, 100*quantile(long, 0.9))
	if ms < 0.0001 || ms > 0.001 {
		t.Errorf("short paths: median loss %.4f%%, want 0.01%% to 0.1%%", 100*ms)
	}
	if ml < 0.003 || ml > 0.012 {
		t.Errorf("long paths: median loss %.3f%%, want 0.3%% to 1.2%%", 100*ml)
	}
	for _, c := range [][2]string{{"Frankfurt", "Amsterdam"}, {"London", "New York"}, {"Sydney", "London"}} {
		ia, _ := CityIndex(c[0])
		ib, _ := CityIndex(c[1])
		a, b := w.ServerIn(ia, rnd), w.ServerIn(ib, rnd)
		t.Logf("%s–%s: RTT %.1f ms, loss %.3f%%", c[0], c[1], w.RTTMs(a, b), 100*w.LossRate(a, b))
	}
}

func TestSample(t *testing.T) {
	// Loss raised so that the count of lost probes is tight.
	w := newTestWorld(t, Config{Relays: 50, LossBase: 0.02, LossSigma: -1}, 6)
	rnd := rand.New(rand.NewPCG(6, 6))
	a, b := w.Relay(1), w.Relay(2)
	rtt, pLost := w.RTTMs(a, b), w.ProbeLossRate(a, b)
	const n = 200000
	lost, sum := 0, 0.0
	for range n {
		s, l := w.Sample(a, b, rnd)
		if l {
			if s != 0 {
				t.Fatalf("lost probe with RTT %v", s)
			}
			lost++
			continue
		}
		if s < rtt {
			t.Fatalf("sample %v ms below the true RTT %v", s, rtt)
		}
		sum += s - rtt
	}
	want := pLost * n
	sd := math.Sqrt(n * pLost * (1 - pLost))
	t.Logf("RTT %.2f ms: %d of %d probes lost (expected %.0f ± %.0f), mean queueing %.3f ms", rtt, lost, n, want, sd, sum/float64(n-lost))
	if math.Abs(float64(lost)-want) > 5*sd {
		t.Errorf("%d probes lost, want %.0f ± %.0f", lost, want, 5*sd)
	}
	cfg := w.Config()
	wantJ := cfg.JitterFrac*rtt + cfg.JitterMinMs
	if mj := sum / float64(n-lost); math.Abs(mj-wantJ) > 0.02*wantJ {
		t.Errorf("mean queueing delay %.3f ms, want %.3f", mj, wantJ)
	}

	// With jitter and loss off a sample is the true RTT.
	w = newTestWorld(t, Config{Relays: 50, JitterFrac: -1, JitterMinMs: -1, LossBase: -1, LossPer100Ms: -1}, 6)
	for i := range 49 {
		s, l := w.Sample(w.Relay(i), w.Relay(i+1), rnd)
		if l || s != w.RelayRTTMs(i, i+1) {
			t.Fatalf("sample %v (lost %v), true RTT %v", s, l, w.RelayRTTMs(i, i+1))
		}
	}
	if s, l := w.Sample(w.Relay(0), w.Relay(0), rnd); s != 0 || l {
		t.Errorf("sample to itself: %v, %v", s, l)
	}
}

// The harder noise: a share of samples from the Pareto tail (mean queueing
// delay times U^(−1/α)) and a share below the RTT, by at most UnderMaxFrac.
func TestSampleTailAndUnderReads(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 50, LossBase: -1, LossPer100Ms: -1, NoiseTailShare: 0.05, UnderShare: 0.05}, 6)
	rnd := rand.New(rand.NewPCG(7, 7))
	a, b := w.Relay(1), w.Relay(2)
	rtt, cfg := w.RTTMs(a, b), w.Config()
	mean := cfg.JitterFrac*rtt + cfg.JitterMinMs
	const n = 200000
	under, far := 0, 0
	for range n {
		s, _ := w.Sample(a, b, rnd)
		switch {
		case s < rtt:
			under++
			if s < rtt*(1-cfg.UnderMaxFrac) {
				t.Fatalf("sample %v ms, more than %v below the RTT %v", s, cfg.UnderMaxFrac, rtt)
			}
		case s-rtt > 20*mean:
			far++
		}
	}
	// An exponential exceeds 20 means with e^−20 (never in 200,000); the
	// tail, Pareto with α 1.5, with 20^−1.5 ≈ 1.1 % of its 5 %.
	wantFar := 0.95 * n * 0.05 * math.Pow(20, -cfg.NoiseTailShape)
	t.Logf("RTT %.2f ms: %d under, %d beyond 20 mean queueing delays (expected %.0f)", rtt, under, far, wantFar)
	if math.Abs(float64(under)-0.05*n) > 5*math.Sqrt(n*0.05*0.95) {
		t.Errorf("%d samples below the RTT, want %.0f", under, 0.05*n)
	}
	if math.Abs(float64(far)-wantFar) > 5*math.Sqrt(wantFar) {
		t.Errorf("%d samples beyond 20 mean queueing delays, want %.0f", far, wantFar)
	}
}

// With drift, a share DriftShare of pairs is on a worse route at any
// moment, longer by at most DriftMaxFrac of its usual propagation; a
// pair's state holds for DriftHours and changes between moments further
// apart; without drift, At changes nothing.
func TestDrift(t *testing.T) {
	base := Config{Relays: 400, LossBase: -1, LossPer100Ms: -1}
	still := newTestWorld(t, base, 8)
	drifting := base
	drifting.DriftShare = 0.2
	w := newTestWorld(t, drifting, 8)
	cfg := w.Config()
	const pairs = 4000
	shifted := func(at time.Duration) []bool {
		now := w.At(at)
		out := make([]bool, pairs)
		for k := range pairs {
			i, j := k%200, 200+k/20
			usual, p := still.RelayRTTMs(i, j), now.Path(now.Relay(i), now.Relay(j))
			if still.At(at).RelayRTTMs(i, j) != usual {
				t.Fatalf("a world without drift changed pair %d–%d at %v", i, j, at)
			}
			extra := p.RTTMs - usual
			if math.Abs(extra-p.DriftMs) > 1e-9 || extra < 0 || p.DriftMs > cfg.DriftMaxFrac*(p.PropagationMs-p.DriftMs)+1e-9 {
				t.Fatalf("pair %d–%d at %v: %.3f ms over its usual %.3f, drift %.3f of propagation %.3f", i, j, at, extra, usual, p.DriftMs, p.PropagationMs)
			}
			out[k] = p.DriftMs > 0
		}
		return out
	}
	count := func(s []bool) (n int) {
		for _, b := range s {
			if b {
				n++
			}
		}
		return n
	}
	changed := func(a, b []bool) (n int) {
		for k := range a {
			if a[k] != b[k] {
				n++
			}
		}
		return n
	}
	// Routes are pairs of (city, provider), fewer than the relay pairs,
	// so the share is loose: most of the 4,000 pairs are distinct routes.
	now, minute, later := shifted(0), shifted(time.Minute), shifted(5*time.Hour)
	share := float64(count(now)) / pairs
	t.Logf("on a worse route: %.3f now, %.3f five hours later; changed in a minute %d, in five hours %d",
		share, float64(count(later))/pairs, changed(now, minute), changed(now, later))
	if share < 0.15 || share > 0.25 {
		t.Errorf("%.3f of pairs on a worse route, want about %.2f", share, cfg.DriftShare)
	}
	// A minute is 1/60 of a period: about 1/60 of the pairs start a new
	// one, and of those about 2·0.2·0.8 change state.
	if c := changed(now, minute); c > pairs/60 {
		t.Errorf("%d pairs changed state in a minute, want under %d", c, pairs/60)
	}
	// Five periods on, every pair has redrawn: 2·0.2·0.8 = 32 % differ.
	if c := float64(changed(now, later)) / pairs; c < 0.25 || c > 0.40 {
		t.Errorf("%.3f of pairs changed state in five hours, want about 0.32", c)
	}
}
