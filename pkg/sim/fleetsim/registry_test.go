package fleetsim

import (
	"math"
	"testing"
)

// The registry read is the measurement at the fleet sizes measured,
// between them on the line joining their neighbours, and grows beyond the
// largest.
func TestRegistryReadAt(t *testing.T) {
	for _, c := range []struct {
		relays            int
		relaysMs, pairsMs float64
	}{
		{0, 4 - 10*9.0/90, 4 - 10*18.0/90}, {10, 4, 4}, {100, 13, 22}, {550, 41, 88.5}, {1000, 69, 155},
		{5000, 321, 696}, {10000, 321 + 5000*252.0/4000, 696 + 5000*541.0/4000},
	} {
		got := RegistryReadAt(c.relays)
		if math.Abs(got.RelaysMs-c.relaysMs) > 1e-9 || math.Abs(got.PairsMs-c.pairsMs) > 1e-9 {
			t.Errorf("RegistryReadAt(%d) = %+v, want {%v %v}", c.relays, got, c.relaysMs, c.pairsMs)
		}
	}
}

// A plan starts once the relays are read, and waits for the pairs only
// where its first round ended before them.
func TestRegistryReadWithPlanMs(t *testing.T) {
	r := RegistryRead{RelaysMs: 500, PairsMs: 700}
	if got := r.WithPlanMs(3000, 400); got != 3500 {
		t.Errorf("first round 400 ms past a 200 ms wait: %v, want 3500", got)
	}
	if got := r.WithPlanMs(3000, 50); got != 3650 {
		t.Errorf("first round 50 ms: %v, want 3650 (150 ms waited for the pairs)", got)
	}
}
