package shortlist

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/planner"
)

// plane is a fleet on a plane: RTT = distance in ms, except the pairs in
// detour, whose true RTT is the distance plus the extra ms (a bad route
// the coordinates cannot show).
type plane struct {
	pos    map[string][2]float64
	detour map[[2]string]float64
	asked  [][]Probe
}

func (p *plane) trueMs(a, b string) float64 {
	pa, pb := p.pos[a], p.pos[b]
	return math.Hypot(pa[0]-pb[0], pa[1]-pb[1]) + p.detour[key(a, b)]
}

func (p *plane) Probe(_ context.Context, probes []Probe) ([]float64, error) {
	p.asked = append(p.asked, slices.Clone(probes))
	out := make([]float64, len(probes))
	for i, pr := range probes {
		out[i] = p.trueMs(pr.From, pr.To)
	}
	return out, nil
}

// exactCoord places a node exactly: its position in seconds on the
// first two of serf's eight dimensions.
func exactCoord(xy [2]float64) *coordinate.Coordinate {
	c := coordinate.NewCoordinate(coordinate.DefaultConfig())
	c.Vec[0], c.Vec[1] = xy[0]/1000, xy[1]/1000
	c.Height = 0
	return c
}

// newPlane lays n relays at random on a 200×100 ms field, the client at
// its left end and the destination at its right.
func newPlane(n int, seed uint64) (*plane, Input) {
	rnd := rand.New(rand.NewPCG(seed, 1))
	p := &plane{pos: map[string][2]float64{"client": {0, 50}, "destination": {200, 50}}, detour: map[[2]string]float64{}}
	in := Input{
		Client:      planner.Node{Name: "client"},
		Destination: planner.Node{Name: "destination"},
		Request:     planner.Request{Constraints: planner.Constraints{MaxHops: 3}},
	}
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		p.pos[name] = [2]float64{rnd.Float64() * 200, rnd.Float64() * 100}
		in.Relays = append(in.Relays, Relay{Node: planner.Node{Name: name, Relay: true}, Coord: exactCoord(p.pos[name])})
	}
	return p, in
}

// oracle plans on the true matrix of every node.
func (p *plane) oracle(t *testing.T, in Input) *planner.Result {
	t.Helper()
	m := &planner.Matrix{Nodes: []planner.Node{in.Client, in.Destination}}
	names := []string{"client", "destination"}
	for _, r := range in.Relays {
		m.Nodes = append(m.Nodes, r.Node)
		names = append(names, r.Node.Name)
	}
	for i, a := range names {
		for _, b := range names[i+1:] {
			m.Pairs = append(m.Pairs, planner.Pair{A: a, B: b, RTTMs: p.trueMs(a, b)})
		}
	}
	req := in.Request
	req.Client, req.Destination = "client", "destination"
	res, err := planner.Search(m, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestPlanFindsTheOracleChainOnMeasurements(t *testing.T) {
	for seed := range uint64(20) {
		p, in := newPlane(30, seed)
		res, _, st, err := Plan(context.Background(), Config{}, in, p)
		if err != nil {
			t.Fatal(err)
		}
		want := p.oracle(t, in)
		if !slices.Equal(res.Best.Chain, want.Best.Chain) {
			t.Errorf("seed %d: chose %v (%.1f Mbit/s), the oracle %v (%.1f Mbit/s)", seed,
				res.Best.Chain, res.Best.PredictedBps/1e6, want.Best.Chain, want.Best.PredictedBps/1e6)
		}
		if st.Estimated != 0 || st.Measured != len(res.Best.Segments) {
			t.Errorf("seed %d: best plan stands on %d estimated and %d measured segments, want all %d measured",
				seed, st.Estimated, st.Measured, len(res.Best.Segments))
		}
		if st.Rounds < 2 || st.Probes != countProbes(p.asked) {
			t.Errorf("seed %d: stats %+v, prober asked %d probes in %d batches", seed, st, countProbes(p.asked), len(p.asked))
		}
	}
}

func countProbes(batches [][]Probe) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// A segment whose route is far worse than the coordinates say: the chain
// the estimates prefer is measured, found slow, and replaced; planning on
// estimates alone keeps it.
func TestPlanMeasuresAwayAnEstimateThatLies(t *testing.T) {
	p, in := newPlane(30, 3)
	first, _, _, err := Plan(context.Background(), Config{Rounds: -1}, in, &plane{pos: p.pos, detour: p.detour})
	if err != nil {
		t.Fatal(err)
	}
	chain := first.Best.Chain
	if len(chain) < 2 {
		t.Fatalf("want a chain of two relays or more to break, got %v", chain)
	}
	// Break the relay-to-relay segment in the middle: estimates still say
	// it is short.
	mid := len(chain) / 2
	p.detour[key(chain[mid-1], chain[mid])] = 150

	blind, _, blindSt, err := Plan(context.Background(), Config{Rounds: -1}, in, &plane{pos: p.pos, detour: p.detour})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blind.Best.Chain, chain) || blindSt.Estimated == 0 {
		t.Fatalf("without targeted probes the plan should keep %v on estimates; got %v (%+v)", chain, blind.Best.Chain, blindSt)
	}
	res, _, _, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(res.Best.Chain, chain) {
		t.Fatalf("targeted probes kept the broken chain %v", chain)
	}
	if want := p.oracle(t, in); !slices.Equal(res.Best.Chain, want.Best.Chain) {
		t.Errorf("chose %v, the oracle %v", res.Best.Chain, want.Best.Chain)
	}
}

type failing struct{ short bool }

func (f failing) Probe(_ context.Context, probes []Probe) ([]float64, error) {
	if f.short {
		return make([]float64, len(probes)-1), nil
	}
	return nil, errors.New("admin API down")
}

func TestPlanReportsAProberThatFails(t *testing.T) {
	_, in := newPlane(10, 1)
	if _, _, _, err := Plan(context.Background(), Config{}, in, failing{}); err == nil || err.Error() != "admin API down" {
		t.Errorf("got %v, want the prober's error", err)
	}
	if _, _, _, err := Plan(context.Background(), Config{}, in, failing{short: true}); err == nil {
		t.Error("a prober answering fewer probes than asked was accepted")
	}
	in.Relays[0].Node.Name = "client"
	if _, _, _, err := Plan(context.Background(), Config{}, in, &plane{}); err == nil {
		t.Error("a relay named like the client was accepted")
	}
}
