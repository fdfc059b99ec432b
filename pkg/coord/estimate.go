package coord

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/hashicorp/serf/coordinate"
)

// EstimateMs is the RTT two coordinates predict, in milliseconds, as Serf's
// Coordinate.DistanceTo and Consul compute it: the Euclidean distance of the
// vectors plus both heights, plus both adjustments when that sum stays
// positive. ok is false when either is nil, invalid (NaN or infinite
// components) or of another dimension, where Serf would panic.
func EstimateMs(a, b *coordinate.Coordinate) (ms float64, ok bool) {
	if a == nil || b == nil || len(a.Vec) != len(b.Vec) || !valid(a) || !valid(b) {
		return 0, false
	}
	return estimateSeconds(a, b) * 1000, true
}

// valid is Coordinate.IsValid (no NaN or infinite component), faster: x-x
// is NaN exactly when x is NaN or infinite.
func valid(c *coordinate.Coordinate) bool {
	s := c.Error - c.Error + c.Adjustment - c.Adjustment + c.Height - c.Height
	for _, x := range c.Vec {
		s += x - x
	}
	return s == 0
}

// estimateSeconds is EstimateMs in seconds (Serf's unit) for coordinates
// already checked.
func estimateSeconds(a, b *coordinate.Coordinate) float64 {
	dist := vecDistance(a.Vec, b.Vec) + a.Height + b.Height
	if adjusted := dist + a.Adjustment + b.Adjustment; adjusted > 0 {
		dist = adjusted
	}
	return dist
}

func vecDistance(a, b []float64) float64 {
	sum := 0.0
	for i := range a {
		x := a[i] - b[i]
		sum += x * x
	}
	return math.Sqrt(sum)
}

// Landmark is one RTT an endpoint measured to a peer with a known
// coordinate, for Fit.
type Landmark struct {
	Coord *coordinate.Coordinate
	RTTMs float64
}

// Fit places an endpoint that runs no Vivaldi of its own (a client, a
// destination) from the RTTs it measured to a few landmarks: it returns the
// coordinate (vector and height; no adjustment) whose EstimateMs to each
// landmark is closest to the RTT measured, in relative error (the sum of
// squared relative errors is minimised, so near landmarks weigh more, as
// the nearest relays matter most to an endpoint).
//
// The search is a gradient descent with backtracking, started from the
// landmarks' centroid and from each landmark (moved a tenth of the way to
// the centroid); the best end wins. It draws no random numbers, so it is
// deterministic. The coordinate's Error is the root mean square relative
// error of the fit, at most cfg.VivaldiErrorMax; with fewer landmarks than
// dimensions + 1 the position is underdetermined and a small Error says
// only that the RTTs given are matched. cfg nil means
// coordinate.DefaultConfig().
func Fit(samples []Landmark, cfg *coordinate.Config) (*coordinate.Coordinate, error) {
	if cfg == nil {
		cfg = coordinate.DefaultConfig()
	}
	dim := int(cfg.Dimensionality)
	if dim == 0 {
		return nil, errors.New("coord: Fit: Dimensionality is 0")
	}
	if len(samples) == 0 {
		return nil, errors.New("coord: Fit: no landmarks")
	}
	f := fitter{dim: dim, heightMin: math.Max(cfg.HeightMin, 0)}
	for i, s := range samples {
		switch {
		case s.Coord == nil:
			return nil, fmt.Errorf("coord: Fit: landmark %d has no coordinate", i)
		case len(s.Coord.Vec) != dim:
			return nil, fmt.Errorf("coord: Fit: landmark %d has %d dimensions, want %d", i, len(s.Coord.Vec), dim)
		case !valid(s.Coord):
			return nil, fmt.Errorf("coord: Fit: landmark %d has an invalid coordinate", i)
		case !(s.RTTMs > 0) || math.IsInf(s.RTTMs, 0):
			return nil, fmt.Errorf("coord: Fit: landmark %d has RTTMs %v, must be > 0", i, s.RTTMs)
		}
		f.vecs = append(f.vecs, s.Coord.Vec)
		// The landmark's height and adjustment are part of every estimate
		// to it: what the endpoint's own vector and height must make up is
		// what remains of the RTT.
		f.offset = append(f.offset, s.Coord.Height+s.Coord.Adjustment)
		f.rtt = append(f.rtt, s.RTTMs/1000)
	}

	centroid := make([]float64, dim)
	for _, v := range f.vecs {
		for i := range v {
			centroid[i] += v[i] / float64(len(f.vecs))
		}
	}
	starts := [][]float64{centroid}
	for _, v := range f.vecs {
		if vecDistance(v, centroid) == 0 {
			continue
		}
		s := make([]float64, dim)
		for i := range s {
			s[i] = v[i] + (centroid[i]-v[i])/10
		}
		starts = append(starts, s)
	}
	var best []float64
	bestH, bestF := 0.0, math.Inf(1)
	for _, s := range starts {
		x, h, obj := f.descend(s, f.heightMin)
		if obj < bestF {
			best, bestH, bestF = x, h, obj
		}
	}
	c := coordinate.NewCoordinate(cfg)
	c.Vec, c.Height = best, bestH
	c.Error = math.Min(math.Sqrt(bestF/float64(len(f.rtt))), cfg.VivaldiErrorMax)
	if !valid(c) {
		return nil, errors.New("coord: Fit: no valid coordinate found")
	}
	return c, nil
}

// fitter holds Fit's problem, in seconds: find x, h >= heightMin that
// minimise sum(((|x - vecs[i]| + h + offset[i]) / rtt[i] - 1)^2).
type fitter struct {
	dim       int
	heightMin float64
	vecs      [][]float64
	offset    []float64
	rtt       []float64
}

func (f *fitter) objective(x []float64, h float64) float64 {
	sum := 0.0
	for i, v := range f.vecs {
		r := (vecDistance(x, v)+h+f.offset[i])/f.rtt[i] - 1
		sum += r * r
	}
	return sum
}

// descend runs the gradient descent from (x, h) and returns where it ends
// and the objective there.
func (f *fitter) descend(x []float64, h float64) ([]float64, float64, float64) {
	x = slices.Clone(x)
	obj := f.objective(x, h)
	gx := make([]float64, f.dim)
	nx := make([]float64, f.dim)
	// The step adapts: it doubles after each step that lowered the
	// objective and halves after each that did not, so its start matters
	// little.
	step := 1e-3 / float64(len(f.vecs))
	for iter := 0; iter < 2000 && step > 1e-15; iter++ {
		clear(gx)
		gh := 0.0
		for i, v := range f.vecs {
			d := vecDistance(x, v)
			r := (d+h+f.offset[i])/f.rtt[i] - 1
			g := 2 * r / f.rtt[i]
			gh += g
			if d > 0 {
				for j := range gx {
					gx[j] += g * (x[j] - v[j]) / d
				}
			}
		}
		if gh == 0 && !slices.ContainsFunc(gx, func(g float64) bool { return g != 0 }) {
			break // a minimum, exactly
		}
		for {
			for j := range nx {
				nx[j] = x[j] - step*gx[j]
			}
			nh := math.Max(h-step*gh, f.heightMin)
			if nobj := f.objective(nx, nh); nobj < obj {
				done := obj-nobj <= 1e-15*obj
				copy(x, nx)
				h, obj = nh, nobj
				step *= 2
				if done {
					return x, h, obj
				}
				break
			}
			step /= 2
			if step <= 1e-15 {
				return x, h, obj
			}
		}
	}
	return x, h, obj
}

// Landmarks chooses up to m landmarks for Fit among the peers with a valid
// coordinate, spread over the space: farthest-point sampling on the
// coordinates' vectors (heights, which are access delay rather than place,
// are left out), from a first peer drawn with rnd (nil: the first by name).
// Peers are taken in name order (a name given twice counts once; peers of
// another dimension than the first by name are left out), so the result
// depends on the set of peers and rnd, not on their order. Cost O(len(peers)
// * m).
func Landmarks(peers []Peer, m int, rnd *rand.Rand) []Peer {
	if m <= 0 {
		return nil
	}
	cand := make([]Peer, 0, len(peers))
	for _, p := range peers {
		if p.Coord != nil && valid(p.Coord) && len(p.Coord.Vec) > 0 {
			cand = append(cand, p)
		}
	}
	slices.SortStableFunc(cand, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	cand = slices.CompactFunc(cand, func(a, b Peer) bool { return a.Name == b.Name })
	if len(cand) > 0 {
		dim := len(cand[0].Coord.Vec)
		cand = slices.DeleteFunc(cand, func(p Peer) bool { return len(p.Coord.Vec) != dim })
	}
	if len(cand) == 0 {
		return nil
	}
	m = min(m, len(cand))
	first := 0
	if rnd != nil {
		first = rnd.IntN(len(cand))
	}
	out := make([]Peer, 0, m)
	minDist := make([]float64, len(cand))
	for i := range minDist {
		minDist[i] = math.Inf(1)
	}
	next := first
	for len(out) < m {
		c := cand[next]
		out = append(out, c)
		minDist[next] = -1 // chosen
		best := -1
		for i, p := range cand {
			if minDist[i] < 0 {
				continue
			}
			minDist[i] = math.Min(minDist[i], vecDistance(p.Coord.Vec, c.Coord.Vec))
			if best < 0 || minDist[i] > minDist[best] {
				best = i
			}
		}
		if best < 0 {
			break
		}
		next = best
	}
	return out
}
