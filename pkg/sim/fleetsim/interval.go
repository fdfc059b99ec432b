package fleetsim

import (
	"math"
	"slices"
)

// z95 is the standard normal's 97.5th percentile: two-sided 95 %.
const z95 = 1.959963984540054

// Wilson95 is the 95 % Wilson score interval of a share: successes out of
// n. Unlike the normal approximation it stays within [0, 1] and holds near
// 0 and 1, where the shares this package reports sit.
func Wilson95(successes, n int) [2]float64 {
	if n <= 0 {
		return [2]float64{}
	}
	p, nf := float64(successes)/float64(n), float64(n)
	z2 := z95 * z95
	centre := (p + z2/(2*nf)) / (1 + z2/nf)
	half := z95 * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf)) / (1 + z2/nf)
	return [2]float64{max(0, centre-half), min(1, centre+half)}
}

// MedianCI95 is a distribution-free 95 % confidence interval for the
// median of what v samples: the order statistics x(a) and x(n+1−a), with
// a the largest for which P(B ≤ a−1) ≤ 2.5 % for B ~ Binomial(n, ½), so
// the interval covers the median with at least 95 %. With fewer than 6
// values no a qualifies, and it is v's range.
func MedianCI95(v []float64) [2]float64 {
	n := len(v)
	if n == 0 {
		return [2]float64{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	a, cdf := 1, 0.0
	for k := 0; k < n/2; k++ {
		cdf += binomialHalf(n, k)
		if cdf > 0.025 {
			break
		}
		a = k + 1
	}
	return [2]float64{s[a-1], s[n-a]}
}

// binomialHalf is P(B = k) for B ~ Binomial(n, ½), through logarithms so
// that large n does not underflow.
func binomialHalf(n, k int) float64 {
	ln, _ := math.Lgamma(float64(n + 1))
	lk, _ := math.Lgamma(float64(k + 1))
	lnk, _ := math.Lgamma(float64(n - k + 1))
	return math.Exp(ln - lk - lnk - float64(n)*math.Ln2)
}
