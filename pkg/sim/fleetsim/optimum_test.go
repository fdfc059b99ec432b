package fleetsim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/relaymesh/relaymesh/planner"
)

// bruteBottleneckMs tries every chain of distinct relays up to maxHops.
func bruteBottleneckMs(m *trueMatrix, alive []bool, to, from []float64, directMs float64, maxHops int) float64 {
	return bruteWindowedMs(m, alive, to, from, directMs, maxHops, nil)
}

// bruteWindowedMs is bruteBottleneckMs with each segment's RTT times its
// client-side relay's scale (nil: 1), as bestByHopsMs counts it.
func bruteWindowedMs(m *trueMatrix, alive []bool, to, from []float64, directMs float64, maxHops int, scale []float64) float64 {
	sc := func(v int) float64 {
		if scale == nil {
			return 1
		}
		return scale[v]
	}
	best := directMs
	var walk func(last int, used []bool, hops int, worst float64)
	walk = func(last int, used []bool, hops int, worst float64) {
		best = math.Min(best, math.Max(worst, from[last]*sc(last)))
		if hops == maxHops {
			return
		}
		for v := 0; v < m.n; v++ {
			if alive[v] && !used[v] {
				used[v] = true
				walk(v, used, hops+1, math.Max(worst, float64(m.rtt[last*m.n+v])*sc(last)))
				used[v] = false
			}
		}
	}
	for v := 0; v < m.n; v++ {
		if alive[v] {
			used := make([]bool, m.n)
			used[v] = true
			walk(v, used, 1, to[v])
		}
	}
	return best
}

// instance is a small random fleet, its ends and a hop limit.
type instance struct {
	m        *trueMatrix
	alive    []bool
	to, from []float64
	directMs float64
	hops     int
}

func randomInstance(rnd *rand.Rand) instance {
	n := 1 + rnd.IntN(7)
	in := instance{m: newTrueMatrix(n, func(a, b int) float64 { return 1 + rnd.Float64()*200 }),
		alive: make([]bool, n), to: make([]float64, n), from: make([]float64, n)}
	for v := range n {
		in.alive[v] = rnd.IntN(5) > 0
		in.to[v], in.from[v] = 1+rnd.Float64()*200, 1+rnd.Float64()*200
	}
	in.directMs = 1 + rnd.Float64()*300
	in.hops = 1 + rnd.IntN(4)
	return in
}

func TestBestBottleneckIsTheBruteForceOptimum(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 300; trial++ {
		in := randomInstance(rnd)
		m, alive, to, from, direct, hops := in.m, in.alive, in.to, in.from, in.directMs, in.hops
		n := m.n
		got := m.bestBottleneckMs(alive, to, from, direct, hops)
		want := bruteBottleneckMs(m, alive, to, from, direct, hops)
		if got != want {
			t.Fatalf("trial %d (n %d, hops %d): dynamic program %v, brute force %v", trial, n, hops, got, want)
		}
	}
}

// With each relay's window, the optimum in throughput is still the brute
// force's, each segment counted at its receiver's scale.
func TestWindowedOptimumIsTheBruteForceOptimum(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 9))
	for trial := 0; trial < 300; trial++ {
		in := randomInstance(rnd)
		scale := make([]float64, in.m.n)
		for v := range scale {
			scale[v] = 0.05 + rnd.Float64()
		}
		byHops := in.m.bestByHopsMs(in.alive, in.to, in.from, in.directMs, in.hops, scale)
		got := byHops[len(byHops)-1]
		if want := bruteWindowedMs(in.m, in.alive, in.to, in.from, in.directMs, in.hops, scale); got != want {
			t.Fatalf("trial %d (n %d, hops %d): dynamic program %v, brute force %v", trial, in.m.n, in.hops, got, want)
		}
	}
}

// TestBestByHopsIsTheBruteForceOptimumOfEachLength checks each entry that
// can win against brute force, and the model's best rate against the best
// of brute force's.
func TestBestByHopsIsTheBruteForceOptimumOfEachLength(t *testing.T) {
	rnd := rand.New(rand.NewPCG(8, 8))
	for trial := 0; trial < 300; trial++ {
		in := randomInstance(rnd)
		m, alive, to, from, direct, hops := in.m, in.alive, in.to, in.from, in.directMs, in.hops
		n := m.n
		got := m.bestByHopsMs(alive, to, from, direct, hops, nil)
		if len(got) != hops+1 {
			t.Fatalf("trial %d: %d entries for %d hops", trial, len(got), hops)
		}
		want := []float64{direct}
		for k := 1; k <= hops; k++ {
			want = append(want, bruteBottleneckMs(m, alive, to, from, direct, k))
		}
		bestRate := 0.0
		for k := range want {
			if got[k] < want[k] || (k > 0 && want[k] < want[k-1] && got[k] != want[k]) {
				t.Fatalf("trial %d (n %d, hops %d): by hops %v, brute force %v", trial, n, hops, got, want)
			}
			bestRate = math.Max(bestRate, modelRate(want[k], k, 0.02))
		}
		if r := bestModelRate(got, 0.02); r != bestRate {
			t.Fatalf("trial %d: best model rate %v, brute force %v", trial, r, bestRate)
		}
	}
}

// The planner over a pair's true RTTs takes the fastest chain among the
// nodes it is given, each segment the right way round: the client's
// RTTs to the relays start a chain, the relays' to the destination end
// it.
func TestTrueChoiceIsThePlannersOverTheTrueRTTs(t *testing.T) {
	names := []string{"a", "b", "c"}
	relayMs := map[[2]int]float64{{0, 1}: 10}
	pc := &pairCase{
		relays: make([]*relay, len(names)),
		index:  map[string]int{"a": 0, "b": 1, "c": 2},
		truth: newTrueMatrix(len(names), func(a, b int) float64 {
			if ms, ok := relayMs[[2]int{min(a, b), max(a, b)}]; ok {
				return ms
			}
			return 100
		}),
		to:       []float64{10, 40, 30},
		from:     []float64{40, 10, 30},
		directMs: 200,
	}
	nodes := func(relays ...string) []planner.Node {
		out := []planner.Node{{Name: "client"}, {Name: "server"}}
		for _, r := range relays {
			out = append(out, planner.Node{Name: r, Relay: true})
		}
		return out
	}
	req := planner.Request{Constraints: planner.Constraints{MaxHops: 3}}
	for _, c := range []struct {
		relays []string
		want   []string
	}{
		{names, []string{"a", "b"}},         // 10 ms throughout; b then a would be 40
		{[]string{"a", "c"}, []string{"c"}}, // 30 ms; a alone is 40
		{[]string{"b"}, []string{"b"}},      // 40 ms against 200 direct
		{nil, nil},                          // direct
	} {
		got, err := pc.trueChoice(nodes(c.relays...), req, "client", "server", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("over %v: chose %v, want %v", c.relays, got, c.want)
		}
	}
	if _, err := pc.trueChoice(append(nodes(names...), planner.Node{Name: "stranger"}), req, "client", "server", nil); err == nil {
		t.Error("a node neither relay nor endpoint: no error")
	}
	// Over the pairs measured alone: without a–b measured, the chain
	// through both is out of reach, and c alone is the best left.
	measured := map[[2]string]bool{}
	for _, p := range [][2]string{{"client", "a"}, {"b", "server"}, {"client", "c"}, {"c", "server"}, {"client", "server"}} {
		measured[p], measured[[2]string{p[1], p[0]}] = true, true
	}
	if got, err := pc.trueChoice(nodes(names...), req, "client", "server", measured); err != nil || !slices.Equal(got, []string{"c"}) {
		t.Errorf("over the measured pairs: chose %v (%v), want [c]", got, err)
	}
}
