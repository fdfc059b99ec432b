package coord

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/serf/coordinate"
)

func TestEstimateMs(t *testing.T) {
	c := func(adj, height float64, vec ...float64) *coordinate.Coordinate {
		return &coordinate.Coordinate{Vec: vec, Adjustment: adj, Height: height}
	}
	for _, tc := range []struct {
		name string
		a, b *coordinate.Coordinate
		want float64
		ok   bool
	}{
		// 3-4-5 triangle of 10 ms units, plus heights 1 ms and 2 ms.
		{"euclid+heights", c(0, 0.001, 0.03, 0), c(0, 0.002, 0, 0.04), 53, true},
		{"adjustments added", c(0.005, 0, 0.01), c(0.002, 0, 0), 17, true},
		// An adjustment that would make the distance negative is ignored.
		{"negative sum ignored", c(-0.02, 0, 0.01), c(-0.01, 0, 0), 10, true},
		{"negative adjustment kept when positive", c(-0.002, 0, 0.01), c(0, 0, 0), 8, true},
		{"missing", nil, c(0, 0, 0), 0, false},
		{"dimensions differ", c(0, 0, 1, 2), c(0, 0, 1), 0, false},
		{"NaN", c(0, 0, math.NaN()), c(0, 0, 0), 0, false},
		{"infinite height", c(0, math.Inf(1), 0), c(0, 0, 0), 0, false},
		{"infinite error", &coordinate.Coordinate{Vec: []float64{0}, Error: math.Inf(-1)}, c(0, 0, 0), 0, false},
	} {
		got, ok := EstimateMs(tc.a, tc.b)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v ms ok=%v, want %v ms ok=%v", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok {
			// Serf's own, which Consul uses, to the nanosecond.
			if serf := float64(tc.a.DistanceTo(tc.b).Nanoseconds()) / 1e6; math.Abs(got-serf) > 1e-6 {
				t.Errorf("%s: %v ms, serf says %v", tc.name, got, serf)
			}
		}
	}
}

func TestFitRecoversAPoint(t *testing.T) {
	// Exact 2-D coordinates: Fit finds the endpoint's place and height.
	cfg := coordinate.DefaultConfig()
	cfg.Dimensionality = 2
	at := func(x, y, h float64) *coordinate.Coordinate {
		c := coordinate.NewCoordinate(cfg)
		c.Vec[0], c.Vec[1], c.Height = x/1000, y/1000, h/1000
		return c
	}
	lms := []*coordinate.Coordinate{at(0, 0, 1), at(100, 0, 2), at(0, 100, 0.01), at(100, 100, 5), at(50, 120, 1)}
	want := at(30, 70, 4)
	var samples []Landmark
	for _, l := range lms {
		ms, _ := EstimateMs(want, l)
		samples = append(samples, Landmark{Coord: l, RTTMs: ms})
	}
	got, err := Fit(samples, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := vecDistance(got.Vec, want.Vec) * 1000; d > 0.01 || math.Abs(got.Height-want.Height)*1000 > 0.01 {
		t.Errorf("fitted at %v height %v, want %v height %v", got.Vec, got.Height, want.Vec, want.Height)
	}
	if got.Error > 1e-3 || got.Adjustment != 0 {
		t.Errorf("error %v adjustment %v, want ~0 and 0", got.Error, got.Adjustment)
	}
	again, _ := Fit(samples, cfg)
	if !slices.Equal(again.Vec, got.Vec) || again.Height != got.Height {
		t.Errorf("not deterministic: %v then %v", got, again)
	}
}

func TestFitErrors(t *testing.T) {
	ok := coordinate.NewCoordinate(coordinate.DefaultConfig())
	for _, tc := range []struct {
		name    string
		samples []Landmark
		cfg     *coordinate.Config
	}{
		{"none", nil, nil},
		{"nil coordinate", []Landmark{{Coord: nil, RTTMs: 1}}, nil},
		{"dimension", []Landmark{{Coord: &coordinate.Coordinate{Vec: []float64{0}}, RTTMs: 1}}, nil},
		{"invalid", []Landmark{{Coord: &coordinate.Coordinate{Vec: make([]float64, 8), Height: math.NaN()}, RTTMs: 1}}, nil},
		{"zero RTT", []Landmark{{Coord: ok, RTTMs: 0}}, nil},
		{"NaN RTT", []Landmark{{Coord: ok, RTTMs: math.NaN()}}, nil},
		{"no dimensions", []Landmark{{Coord: ok, RTTMs: 1}}, &coordinate.Config{}},
	} {
		if c, err := Fit(tc.samples, tc.cfg); err == nil {
			t.Errorf("%s: no error, got %+v", tc.name, c)
		}
	}
	// One landmark is enough for a coordinate (an underdetermined one).
	if _, err := Fit([]Landmark{{Coord: ok, RTTMs: 10}}, nil); err != nil {
		t.Errorf("one landmark: %v", err)
	}
}

func TestLandmarks(t *testing.T) {
	cfg := coordinate.DefaultConfig()
	cfg.Dimensionality = 2
	// A 10 x 10 grid, plus peers Landmarks must skip.
	var peers []Peer
	for x := 0; x < 10; x++ {
		for y := 0; y < 10; y++ {
			c := coordinate.NewCoordinate(cfg)
			c.Vec[0], c.Vec[1] = float64(x)/100, float64(y)/100
			peers = append(peers, Peer{Name: fmt.Sprintf("g%d%d", x, y), Coord: c})
		}
	}
	peers = append(peers, Peer{Name: "nil"}, Peer{Name: "nan", Coord: &coordinate.Coordinate{Vec: []float64{math.NaN(), 0}}},
		Peer{Name: "z3d", Coord: &coordinate.Coordinate{Vec: []float64{9, 9, 9}}})

	got := Landmarks(peers, 4, rand.New(rand.NewPCG(1, 2)))
	if len(got) != 4 {
		t.Fatalf("%d landmarks, want 4", len(got))
	}
	// Farthest-point sampling from any start takes corners after the first.
	corners := []string{"g00", "g09", "g90", "g99"}
	for _, l := range got[1:] {
		if !slices.Contains(corners, l.Name) {
			t.Errorf("landmarks %v: %s is no corner", names(got), l.Name)
		}
	}
	// The same from the peers in another order.
	rev := slices.Clone(peers)
	slices.Reverse(rev)
	if again := Landmarks(rev, 4, rand.New(rand.NewPCG(1, 2))); !slices.Equal(names(again), names(got)) {
		t.Errorf("reversed input: %v, then %v", names(got), names(again))
	}
	// The 8 most spread of the grid are 8 different peers, none skipped.
	got = Landmarks(peers, 8, nil)
	if len(sorted(names(got))) != 8 || slices.ContainsFunc(got, func(p Peer) bool { return p.Coord == nil || len(p.Coord.Vec) != 2 }) {
		t.Errorf("8 landmarks: %v", names(got))
	}
	if got := Landmarks(peers, 1000, nil); len(got) != 100 {
		t.Errorf("asking for more than there are: %d, want the 100 valid", len(got))
	}
	if got := Landmarks(peers, 0, nil); got != nil {
		t.Errorf("m = 0: %v", names(got))
	}
	if got := Landmarks(peers[100:102], 3, nil); got != nil {
		t.Errorf("no valid coordinate: %v", names(got))
	}
}

func names(ps []Peer) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}
