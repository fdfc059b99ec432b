package fleetsim

import "math"

// trueMatrix is the world's true relay-to-relay RTTs, milliseconds, kept
// as float32 so that 5,000 relays fit in 100 MB: the optimum's dynamic
// program reads it n² times per hop.
type trueMatrix struct {
	n   int
	rtt []float32 // row-major n×n, symmetric
}

func newTrueMatrix(n int, rttMs func(a, b int) float64) *trueMatrix {
	m := &trueMatrix{n: n, rtt: make([]float32, n*n)}
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			v := float32(rttMs(a, b))
			m.rtt[a*n+b], m.rtt[b*n+a] = v, v
		}
	}
	return m
}

// bestBottleneckMs is the lowest possible longest-segment RTT, ms, of a
// path from the client to the destination through at most maxHops relays
// among those alive, under the true RTTs: toRelayMs[v] is the client's RTT
// to relay v, fromRelayMs[v] relay v's to the destination, directMs the
// direct path's. With equal windows a chain's rate is window/bottleneck,
// so this is the optimum every plan is judged against.
func (m *trueMatrix) bestBottleneckMs(alive []bool, toRelayMs, fromRelayMs []float64, directMs float64, maxHops int) float64 {
	byHops := m.bestByHopsMs(alive, toRelayMs, fromRelayMs, directMs, maxHops, nil)
	return byHops[len(byHops)-1]
}

// bestByHopsMs is bestBottleneckMs for each most relays k = 0..maxHops
// (0: direct): out[k] is the lowest bottleneck of a path through at most k
// relays wherever that is below out[k−1] (a path through more relays that
// is no faster is never the better chain, so the program does not look
// for it: out[k] = out[k−1] then, or more).
//
// It is a minimax dynamic program over hop counts: best[v] is the lowest
// bottleneck of a path from the client that ends at relay v after k
// relays. A path that repeats a relay is never better than the one that
// skips the loop, so allowing repeats does not change the optimum.
//
// With recvScale (by relay; nil: all 1) each segment's RTT counts times
// its receiving relay's scale (pairCase.recvScale: the segment's
// client-side end receives a download), so the bottleneck is in
// throughput: the optimum with each relay's window.
func (m *trueMatrix) bestByHopsMs(alive []bool, toRelayMs, fromRelayMs []float64, directMs float64, maxHops int, recvScale []float64) []float64 {
	n := m.n
	best := make([]float64, n)
	next := make([]float64, n)
	opt := directMs
	out := []float64{directMs}
	for v := 0; v < n; v++ {
		best[v] = math.Inf(1)
		if alive[v] {
			best[v] = toRelayMs[v]
		}
	}
	scale := func(v int) float64 {
		if recvScale == nil {
			return 1
		}
		return recvScale[v]
	}
	for k := 1; ; k++ {
		for v := 0; v < n; v++ {
			if alive[v] {
				opt = math.Min(opt, math.Max(best[v], fromRelayMs[v]*scale(v)))
			}
		}
		out = append(out, opt)
		if k >= maxHops {
			return out
		}
		for v := 0; v < n; v++ {
			next[v] = best[v]
			if !alive[v] {
				continue
			}
			row := m.rtt[v*n : (v+1)*n]
			for u := 0; u < n; u++ {
				// Only a path already better than the optimum so far can
				// lead to a better one.
				if b := best[u]; b < next[v] && b < opt {
					if alive[u] {
						next[v] = math.Min(next[v], math.Max(b, float64(row[u])*scale(u)))
					}
				}
			}
		}
		best, next = next, best
	}
}

// modelRate is a path's rate by the planner's model, in client windows
// per ms: its bottleneck's (bottleneckMs an RTT, or with windows that
// differ the windowed RTT of pairCase.windowedMs), times (1 − overhead)
// for each relay (planner.Model.RelayOverhead: the throughput each relay
// costs).
func modelRate(bottleneckMs float64, relays int, overhead float64) float64 {
	return math.Pow(1-overhead, float64(relays)) / bottleneckMs
}

// bestModelRate is the highest modelRate of any path, from bestByHopsMs.
func bestModelRate(byHopsMs []float64, overhead float64) float64 {
	best := 0.0
	for k, ms := range byHopsMs {
		best = math.Max(best, modelRate(ms, k, overhead))
	}
	return best
}

// bestAmongMs is bestBottleneckMs with only the relays in set as hops:
// the best the planner could have chosen from the candidates it saw.
// O(maxHops·len(set)²).
func (m *trueMatrix) bestAmongMs(set []int, toRelayMs, fromRelayMs []float64, directMs float64, maxHops int) float64 {
	best := make([]float64, len(set))
	next := make([]float64, len(set))
	opt := directMs
	for i, v := range set {
		best[i] = toRelayMs[v]
	}
	for k := 1; ; k++ {
		for i, v := range set {
			opt = math.Min(opt, math.Max(best[i], fromRelayMs[v]))
		}
		if k == maxHops {
			return opt
		}
		for i, v := range set {
			next[i] = best[i]
			for j, u := range set {
				if b := best[j]; b < next[i] && b < opt {
					next[i] = math.Min(next[i], math.Max(b, float64(m.rtt[v*m.n+u])))
				}
			}
		}
		best, next = next, best
	}
}
