package fleetsim

import (
	"math"
	"testing"
)

// The registry read is the measurement at the fleet sizes measured,
// between them on the line joining their neighbours, and grows beyond the
// largest.
func TestRegistryReadMs(t *testing.T) {
	for _, c := range []struct {
		relays int
		want   float64
	}{
		{0, 4 - 10*21.0/90}, {10, 4}, {100, 25}, {550, 95.5}, {1000, 166}, {3000, 483.5}, {5000, 801}, {10000, 801 + 5000*635.0/4000},
	} {
		if got := RegistryReadMs(c.relays); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("RegistryReadMs(%d) = %v, want %v", c.relays, got, c.want)
		}
	}
}
