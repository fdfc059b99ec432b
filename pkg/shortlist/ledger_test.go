package shortlist

import (
	"math"
	"slices"
	"testing"

	"github.com/hashicorp/serf/coordinate"
)

// fillGrid lays out what fill over ledger.rtt does, figure for figure:
// every source of a figure, failed pairs, relays that are down (with and
// without a measurement), a relay without a coordinate, one with an
// invalid coordinate, and pairs outside the grid; the grid's order is not
// the ids'.
func TestFillGridIsFillOverTheLedger(t *testing.T) {
	l := newLedger()
	for i, name := range []string{"client", "dst", "r0", "r1", "r2", "r3", "r4", "r5", "out"} {
		id := l.intern(name)
		if name != "r3" { // r3 is not placed
			l.coord[id] = exactCoord([2]float64{float64(20 * i), float64(7 * (i % 3))})
		}
	}
	// r5's coordinate is invalid: no estimate to it.
	bad := coordinate.NewCoordinate(coordinate.DefaultConfig())
	bad.Vec[0] = math.NaN()
	l.coord[l.intern("r5")] = bad
	l.down[l.intern("r4")] = true
	set := func(a, b string, f sources) { l.update(a, b, func(s *sources) { *s = f }) }
	set("client", "r0", sources{measuredMs: 11})
	set("r0", "r1", sources{earlierMs: 12})
	set("r1", "r2", sources{exactMs: 13})
	set("r0", "r2", sources{measuredMs: 14, earlierMs: 99, exactMs: 98})
	set("r2", "dst", sources{failed: true, exactMs: 15})
	set("r1", "dst", sources{failed: true, measuredMs: 16})
	set("r4", "r0", sources{measuredMs: 17}) // down, but measured
	set("r4", "r1", sources{exactMs: 18})    // down: none
	set("r3", "r0", sources{exactMs: 19})    // not placed, published
	set("out", "r0", sources{measuredMs: 20})
	names := []string{"r2", "client", "r5", "dst", "r0", "r4", "r1", "r3"}
	ids := make([]int32, len(names))
	for i, name := range names {
		ids[i] = l.intern(name)
	}
	var fast, plain grid
	l.fillGrid(&fast, names, ids)
	plain.fill(names, func(i, j int) (float64, bool, bool) { return l.rtt(ids[i], ids[j]) })
	for i := range names {
		for j := range names {
			k := i*len(names) + j
			same := fast.ms[k] == plain.ms[k] || math.IsNaN(fast.ms[k]) && math.IsNaN(plain.ms[k])
			if !same || fast.est[k] != plain.est[k] {
				t.Errorf("%s–%s: fillGrid %v (estimated %v), fill %v (estimated %v)",
					names[i], names[j], fast.ms[k], fast.est[k], plain.ms[k], plain.est[k])
			}
		}
	}
	// The cases are what they say: a measurement of a down relay stands,
	// a failed pair is none, an unplaced relay's published pair counts.
	for _, c := range []struct {
		a, b string
		ms   float64
	}{{"r4", "r0", 17}, {"r2", "dst", math.Inf(1)}, {"r1", "dst", 16}, {"r3", "r0", 19}, {"r0", "r2", 14}, {"r4", "r1", math.Inf(1)}, {"r5", "r0", math.Inf(1)}} {
		i, j := slices.Index(names, c.a), slices.Index(names, c.b)
		if got := fast.ms[i*len(names)+j]; got != c.ms {
			t.Errorf("%s–%s: %v, want %v", c.a, c.b, got, c.ms)
		}
	}
}
