package shortlist

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// corridors are two ways across a field: a northern pair of cities a
// little nearer each other than the southern pair, whose farthest relays
// have a fast route the coordinates cannot show.
func corridors() (*plane, Input, [2]string) {
	p, in := emptyField()
	// Each city's relays lie farther from the line between the ends
	// the higher their number.
	for _, city := range []struct {
		prefix   string
		x, y, dy float64
	}{{"wn", 61, 75, 0.4}, {"en", 139, 75, 0.4}, {"ws", 60, 25, -0.4}, {"es", 140, 25, -0.4}} {
		for i := range 6 {
			p.place(&in, fmt.Sprintf("%s%d", city.prefix, i), [2]float64{city.x, city.y + float64(i)*city.dy})
		}
	}
	fast := [2]string{"ws5", "es5"}
	p.detour[key(fast[0], fast[1])] = -30
	return p, in, fast
}

// The best plan crosses by the north; a runner-up by the south, whose
// fast pair no candidate holds. With one round of targeted probes, only a
// plan that searches the runner-up's bottleneck in that round finds it.
func TestPlanSearchesTheRunnersUpsBottlenecks(t *testing.T) {
	plan := func(neckPlans int) []string {
		p, in, _ := corridors()
		cfg := Config{FirstCut: 8, Candidates: 4, PerSite: 1, Neighbours: 5, Rounds: 1, NeckPlans: neckPlans}
		res, _, _, err := Plan(context.Background(), cfg, in, p)
		if err != nil {
			t.Fatal(err)
		}
		return res.Best.Chain
	}
	_, _, fast := corridors()
	if chain := plan(1); slices.Equal(chain, fast[:]) {
		t.Fatalf("searching the best plan's bottleneck alone the plan %v found the fast pair: the test proves nothing", chain)
	}
	if chain := plan(0); !slices.Equal(chain, fast[:]) {
		t.Errorf("chose %v, want the fast pair %v", chain, fast)
	}
}
