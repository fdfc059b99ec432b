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
		{0, 3 - 10*12.0/90}, {10, 3}, {100, 15}, {550, 63}, {1000, 111}, {3000, 305}, {5000, 499}, {10000, 499 + 5000*388.0/4000},
	} {
		if got := RegistryReadMs(c.relays); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("RegistryReadMs(%d) = %v, want %v", c.relays, got, c.want)
		}
	}
}
