package planner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// benchMatrix is a complete matrix of relays relays plus a client and a
// destination: nodes on a plane 200 ms across, RTT = distance + 1 ms, a
// quarter of the windows unknown, some limits and some loss.
func benchMatrix(relays int) *Matrix {
	rng := rand.New(rand.NewPCG(uint64(relays), 7))
	m := &Matrix{}
	type pt struct{ x, y float64 }
	pos := make([]pt, 0, relays+2)
	add := func(n Node, p pt) {
		m.Nodes = append(m.Nodes, n)
		pos = append(pos, p)
	}
	add(Node{Name: "client", WindowBytes: 256 << 10}, pt{0, 0})
	add(Node{Name: "srv", Region: "far"}, pt{150, 100})
	windows := []int64{0, 64 << 10, 1 << 20, 4 << 20}
	for i := range relays {
		n := Node{Name: fmt.Sprintf("r%05d", i), Relay: true, WindowBytes: windows[rng.IntN(len(windows))]}
		if rng.IntN(4) == 0 {
			n.LimitBps = float64(100+rng.IntN(900)) * 1e6
		}
		add(n, pt{rng.Float64() * 200, rng.Float64() * 200})
	}
	m.Pairs = make([]Pair, 0, len(m.Nodes)*(len(m.Nodes)-1)/2)
	for a := range m.Nodes {
		for b := a + 1; b < len(m.Nodes); b++ {
			p := Pair{A: m.Nodes[a].Name, B: m.Nodes[b].Name, RTTMs: 1 + math.Hypot(pos[a].x-pos[b].x, pos[a].y-pos[b].y)}
			if rng.IntN(10) == 0 {
				p.Loss = rng.Float64() * 0.01
			}
			m.Pairs = append(m.Pairs, p)
		}
	}
	return m
}

var benchMatrices sync.Map // relays → *Matrix: built once per process, not per b.N round

func benchmarkPlan(b *testing.B, relays int) {
	v, ok := benchMatrices.Load(relays)
	if !ok {
		v, _ = benchMatrices.LoadOrStore(relays, benchMatrix(relays))
	}
	m := v.(*Matrix)
	req := Request{Client: "client", Destination: "srv", Direction: Both, Constraints: Constraints{MaxHops: 4}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := Search(m, req)
		if err != nil || len(r.Best.Chain) == 0 {
			b.Fatalf("Search: %v, best chain %v", err, r.Best.Chain)
		}
	}
}

func BenchmarkPlan1000(b *testing.B) { benchmarkPlan(b, 1000) }
func BenchmarkPlan5000(b *testing.B) { benchmarkPlan(b, 5000) }

// BenchmarkSearchUniform5000 is the worst case for pruning: every segment
// capped at the same rate and no relay overhead, so no row can be skipped
// and every relay count ties. Not in `make bench-planner`; see
// bench/results/planner.md.
func BenchmarkSearchUniform5000(b *testing.B) {
	v, ok := benchMatrices.Load(5000)
	if !ok {
		v, _ = benchMatrices.LoadOrStore(5000, benchMatrix(5000))
	}
	m := v.(*Matrix)
	uniform := &Matrix{Nodes: slices.Clone(m.Nodes), Pairs: make([]Pair, len(m.Pairs))}
	for i := range uniform.Nodes {
		uniform.Nodes[i].LimitBps = 1e6 // far below every window bound
	}
	for i, p := range m.Pairs {
		uniform.Pairs[i] = Pair{A: p.A, B: p.B, RTTMs: p.RTTMs}
	}
	req := Request{Client: "client", Destination: "srv", Direction: Both, Model: Model{RelayOverhead: -1}, Constraints: Constraints{MaxHops: 4, MinGain: -1}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Search(uniform, req); err != nil {
			b.Fatal(err)
		}
	}
}
