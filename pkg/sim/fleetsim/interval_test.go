package fleetsim

import (
	"math"
	"testing"
)

// The intervals against values worked by hand and published tables.
func TestIntervals(t *testing.T) {
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.0005 }
	// Wilson, 192 of 200 (96 %): 0.9229 to 0.9796.
	if w := Wilson95(192, 200); !near(w[0], 0.9229) || !near(w[1], 0.9796) {
		t.Errorf("Wilson95(192, 200) = %v, want [0.9229 0.9796]", w)
	}
	if w := Wilson95(200, 200); w[1] != 1 || !near(w[0], 0.9812) {
		t.Errorf("Wilson95(200, 200) = %v, want [0.9812 1]", w)
	}
	// The median's interval for n = 100 is x(40) to x(61) (Conover's
	// table); for n = 5 the range.
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // x(k) = k, given in reverse
	}
	if ci := MedianCI95(v); ci != [2]float64{40, 61} {
		t.Errorf("MedianCI95 of 1..100 = %v, want [40 61]", ci)
	}
	if ci := MedianCI95([]float64{3, 1, 2, 5, 4}); ci != [2]float64{1, 5} {
		t.Errorf("MedianCI95 of 5 values = %v, want the range", ci)
	}
}
