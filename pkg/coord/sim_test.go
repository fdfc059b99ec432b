package coord

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// plane is a simulated fleet: nodes at points of a plane, the RTT between
// two being their distance in ms plus a little noise.
type plane struct {
	nodes []*Node
	x, y  []float64
	rnd   *rand.Rand
	now   time.Time
}

const planeSide = 250.0 // ms

func newPlane(t testing.TB, n int, seed uint64) *plane {
	t.Helper()
	p := &plane{rnd: rand.New(rand.NewPCG(seed, 0)), now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := 0; i < n; i++ {
		node, err := NewNode(fmt.Sprintf("r%03d", i), Config{}, rand.New(rand.NewPCG(seed, uint64(i)+1)))
		if err != nil {
			t.Fatal(err)
		}
		p.nodes = append(p.nodes, node)
		p.x = append(p.x, p.rnd.Float64()*planeSide)
		p.y = append(p.y, p.rnd.Float64()*planeSide)
	}
	return p
}

func (p *plane) trueMs(i, j int) float64 { return math.Hypot(p.x[i]-p.x[j], p.y[i]-p.y[j]) }

// measure is one probe: the true RTT, 2% noise, at least 0.1 ms.
func (p *plane) measure(i, j int) float64 {
	return math.Max(p.trueMs(i, j)*(1+0.02*p.rnd.NormFloat64()), 0.1)
}

func (p *plane) fleet() []Peer {
	f := make([]Peer, len(p.nodes))
	for i, n := range p.nodes {
		f[i] = Peer{Name: n.Name(), Coord: n.Coordinate()}
	}
	return f
}

// run lets every node probe at its budget for d, in rounds of one
// interval; each round the nodes go in a random order, and see the
// coordinates the fleet published at the round's start (as from a
// registry).
func (p *plane) run(t testing.TB, d time.Duration) {
	t.Helper()
	idx := map[string]int{}
	for i, n := range p.nodes {
		idx[n.Name()] = i
	}
	interval := p.nodes[0].Interval()
	order := make([]int, len(p.nodes))
	for i := range order {
		order[i] = i
	}
	for end := p.now.Add(d); p.now.Before(end); p.now = p.now.Add(interval) {
		fleet := p.fleet()
		p.rnd.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			name, ok := p.nodes[i].NextTarget(p.now, fleet)
			if !ok {
				t.Fatalf("%s: no target", p.nodes[i].Name())
			}
			j := idx[name]
			p.nodes[i].Observe(p.now, fleet[j], p.measure(i, j), false)
		}
	}
}

// medianRelErr is the median relative error of the coordinates' estimate
// over all pairs.
func (p *plane) medianRelErr(t testing.TB) float64 {
	var errs []float64
	coords := p.fleet()
	for i := range p.nodes {
		for j := i + 1; j < len(p.nodes); j++ {
			est, ok := EstimateMs(coords[i].Coord, coords[j].Coord)
			if !ok {
				t.Fatalf("no estimate %d-%d", i, j)
			}
			truth := p.trueMs(i, j)
			errs = append(errs, math.Abs(est-truth)/truth)
		}
	}
	return median(errs)
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// TestConvergence runs 200 nodes for 60 simulated minutes, each probing
// only the targets NextTarget gives at its budget, then checks the
// coordinates' estimates over all pairs, and endpoints placed by Fit.
func TestConvergence(t *testing.T) {
	p := newPlane(t, 200, 1)
	p.run(t, 60*time.Minute)
	got := p.medianRelErr(t)
	t.Logf("200 nodes, 60 min at %v per probe: median relative error %.4f", p.nodes[0].Interval(), got)
	if got > 0.10 {
		t.Errorf("median relative error %.4f, want <= 0.10", got)
	}

	t.Run("Fit", func(t *testing.T) {
		// Endpoints at random points of the plane measure 8 landmarks and
		// are placed by Fit; their estimates to every node are checked.
		fleet := p.fleet()
		idx := map[string]int{}
		for i, f := range fleet {
			idx[f.Name] = i
		}
		var medians []float64
		for e := 0; e < 20; e++ {
			x, y := p.rnd.Float64()*planeSide, p.rnd.Float64()*planeSide
			truth := func(i int) float64 { return math.Hypot(x-p.x[i], y-p.y[i]) }
			var samples []Landmark
			for _, l := range Landmarks(fleet, 8, p.rnd) {
				rtt := math.Max(truth(idx[l.Name])*(1+0.02*p.rnd.NormFloat64()), 0.1)
				samples = append(samples, Landmark{Coord: l.Coord, RTTMs: rtt})
			}
			if len(samples) != 8 {
				t.Fatalf("%d landmarks, want 8", len(samples))
			}
			c, err := Fit(samples, nil)
			if err != nil {
				t.Fatal(err)
			}
			var errs []float64
			for i, f := range fleet {
				est, ok := EstimateMs(c, f.Coord)
				if !ok {
					t.Fatalf("no estimate to %s", f.Name)
				}
				errs = append(errs, math.Abs(est-truth(i))/truth(i))
			}
			m := median(errs)
			medians = append(medians, m)
			if m > 0.15 {
				t.Errorf("endpoint %d at (%.0f, %.0f): median relative error %.4f, want <= 0.15", e, x, y, m)
			}
		}
		slices.Sort(medians)
		t.Logf("20 endpoints fitted from 8 landmarks: median relative error to the 200 nodes: best %.4f, median %.4f, worst %.4f",
			medians[0], medians[len(medians)/2], medians[len(medians)-1])
	})
}
