package pathbench

import (
	"math"
	"testing"
)

// The steady rate is the second half's: a transfer that ramps for its first
// second and then moves 100 Mbit/s for 3 s reads 100, where its average
// is lower; too short a transfer reads 0 (unknown).
func TestSteadyBps(t *testing.T) {
	var s []progressSample
	for ms := 50; ms <= 4000; ms += 50 {
		secs := float64(ms) / 1000
		bytes := 12.5e6 * max(0, secs-1) // 100 Mbit/s after 1 s of nothing
		s = append(s, progressSample{secs, int64(bytes)})
	}
	if got := steadyBps(s); math.Abs(got-100e6) > 1e3 {
		t.Errorf("steady %v bit/s, want 100e6", got)
	}
	if got := steadyBps([]progressSample{{0.05, 100}, {0.1, 200}}); got != 0 {
		t.Errorf("a 0.1 s transfer: steady %v, want 0 (unknown)", got)
	}
	// The half-way point between samples is interpolated.
	if got := steadyBps([]progressSample{{1, 0}, {3, 2e6}, {4, 3e6}}); math.Abs(got-8e6) > 1 {
		t.Errorf("steady %v, want 8e6 (1 MB at 2 s, half way from 0 at 1 s to 2 MB at 3 s; 3 MB at 4 s)", got)
	}
}
