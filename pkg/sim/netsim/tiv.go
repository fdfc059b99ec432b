package netsim

import (
	"math/rand/v2"
	"slices"
)

// TIVStats describes the triangle-inequality violations among sampled
// relay pairs: pairs (a, b) for which some relay c gives
// RTT(a,c) + RTT(c,b) < RTT(a,b).
type TIVStats struct {
	Pairs int // pairs sampled
	// Share is the fraction of pairs with any shorter detour through one
	// relay; Share10 and Share20 those whose best detour is at least 10%
	// and 20% shorter than the direct path.
	Share, Share10, Share20 float64
	// MedianGain is the median, over the violating pairs, of how much
	// shorter their best detour is: 1 − detour/direct.
	MedianGain float64
	// TriangleShare is the fraction of the triangles looked at, (a, b)
	// and one other relay c, in which c is a shorter detour: a share of
	// triangles, not of pairs, so it does not grow with the number of
	// relays as Share does.
	TriangleShare float64
}

// TIVShare is TIVStats(sample, rnd).Share.
func (w *World) TIVShare(sample int, rnd *rand.Rand) float64 {
	return w.TIVStats(sample, rnd).Share
}

// TIVStats samples pairs of distinct relays (drawn from rnd, with
// replacement) and, for each, looks for the best detour through every
// other relay: sample·NumRelays RTTs. It needs 3 relays; with fewer it
// returns the zero TIVStats.
func (w *World) TIVStats(sample int, rnd *rand.Rand) TIVStats {
	n := len(w.relays)
	if n < 3 || sample <= 0 {
		return TIVStats{}
	}
	var s TIVStats
	var gains []float64
	var triangles, violating int
	for range sample {
		i := rnd.IntN(n)
		j := rnd.IntN(n - 1)
		if j >= i {
			j++
		}
		a, b := w.relays[i], w.relays[j]
		direct := w.RTTMs(a, b)
		best := direct
		for k, c := range w.relays {
			if k == i || k == j {
				continue
			}
			d := w.RTTMs(a, c) + w.RTTMs(c, b)
			triangles++
			if d < direct {
				violating++
			}
			best = min(best, d)
		}
		s.Pairs++
		if best < direct {
			gain := 1 - best/direct
			gains = append(gains, gain)
			if gain >= 0.1 {
				s.Share10++
			}
			if gain >= 0.2 {
				s.Share20++
			}
		}
	}
	s.Share = float64(len(gains)) / float64(s.Pairs)
	s.Share10 /= float64(s.Pairs)
	s.Share20 /= float64(s.Pairs)
	s.TriangleShare = float64(violating) / float64(triangles)
	if len(gains) > 0 {
		slices.Sort(gains)
		s.MedianGain = gains[len(gains)/2]
	}
	return s
}
