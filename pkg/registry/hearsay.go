package registry

import (
	"slices"
	"time"
)

// A fleet-file reader such as relayctl pulls scope=fleet from every relay:
// each relay's answer carries its own measurements and coordinate, and
// what it pulled from the others. Over the authenticated admin channel a
// relay speaks for itself only: its own word is the pairs it measured
// (from it) and its own coordinate. A pair to it, measured by the other
// end, is that end's word: believed from the liar it would be a way to
// outvote the other end's own measurement of the pair. What it passes on
// of others is hearsay, and one compromised relay could otherwise make up
// every other relay's figures, the newest winning. So hearsay is believed
// only of relays that did not answer this reader themselves (their own
// word stands), and where several relays pass on the same pair, the
// highest RTT counts: one relay can make a pair look worse than the
// others say, never better (which is what pulls plans). Hearsay
// coordinates are believed only where every relay that passes one on
// agrees (one carrier: its word, as for a relay reached only through it).

// splitWord is relay's answer at (pairs and coordinates, already sane)
// split into its own word and hearsay.
func splitWord(relay string, pairs []Pair, coords []Coordinate, at time.Time) pull {
	p := pull{at: at}
	for _, pr := range pairs {
		if pr.From == relay {
			p.pairs = append(p.pairs, pr)
		} else {
			p.heardPairs = append(p.heardPairs, pr)
		}
	}
	for _, c := range coords {
		if c.Relay == relay {
			p.coords = append(p.coords, c)
		} else {
			p.heardCoords = append(p.heardCoords, c)
		}
	}
	return p
}

// answeredLocked says whether relay answered this registry's latest pull
// of it (its own word is then fresh); f.mu held.
func (f *Fleet) answeredLocked(relay string) bool {
	p, ok := f.pulled[relay]
	return relay == f.self || ok && p.err == nil && !p.at.IsZero()
}

// believedHearsayPairsLocked is the hearsay pairs believed: of pairs whose
// measuring end (from) did not answer, per (from, to), the highest RTT any
// carrier passed on (of equal ones the newest); f.mu held.
func (f *Fleet) believedHearsayPairsLocked() []Pair {
	best := map[[2]string]Pair{}
	for _, p := range f.pulled {
		for _, h := range p.heardPairs {
			if f.answeredLocked(h.From) {
				continue
			}
			k := [2]string{h.From, h.To}
			old, ok := best[k]
			if !ok || worseRTT(h, old) > 0 || worseRTT(h, old) == 0 && h.UpdatedAt.After(old.UpdatedAt) {
				best[k] = h
			}
		}
	}
	out := make([]Pair, 0, len(best))
	for _, p := range best {
		out = append(out, p)
	}
	return out
}

// worseRTT compares what a and b say of a pair's RTT: > 0 when a's is
// worse (not answering counts as worst).
func worseRTT(a, b Pair) int {
	switch aa, ba := a.Answering(), b.Answering(); {
	case aa != ba:
		if ba {
			return 1
		}
		return -1
	case a.RTTMs > b.RTTMs:
		return 1
	case a.RTTMs < b.RTTMs:
		return -1
	}
	return 0
}

// believedHearsayCoordsLocked is the hearsay coordinates believed: of
// relays that did not answer, the coordinate every carrier that passes
// one on agrees on (the newest of theirs); f.mu held.
func (f *Fleet) believedHearsayCoordsLocked() []Coordinate {
	heard := map[string][]Coordinate{}
	for _, p := range f.pulled {
		for _, c := range p.heardCoords {
			if !f.answeredLocked(c.Relay) {
				heard[c.Relay] = append(heard[c.Relay], c)
			}
		}
	}
	var out []Coordinate
	for _, cs := range heard {
		agree := !slices.ContainsFunc(cs[1:], func(c Coordinate) bool { return !sameCoord(c, cs[0]) })
		if agree {
			out = append(out, slices.MaxFunc(cs, func(a, b Coordinate) int { return a.UpdatedAt.Compare(b.UpdatedAt) }))
		}
	}
	return out
}

// sameCoord says whether a and b place their relay alike (vector, height,
// adjustment and error equal).
func sameCoord(a, b Coordinate) bool {
	x, y := a.Coord, b.Coord
	return x != nil && y != nil && slices.Equal(x.Vec, y.Vec) && x.Height == y.Height && x.Adjustment == y.Adjustment && x.Error == y.Error
}
