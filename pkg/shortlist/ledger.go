package shortlist

import (
	"math"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/coord"
)

// ledger is what a plan knows of its nodes and of the pairs between them,
// with the nodes' names interned: a plan at thousands of relays looks up
// the figures of a few hundred thousand pairs a round (the candidates'
// matrix), and one map keyed by two small integers is several times
// cheaper than the five keyed by two names it replaces.
type ledger struct {
	id    map[string]int32
	name  []string
	coord []*coordinate.Coordinate // by id; nil: not placed
	// down are the relays this host's own probe could not reach: no hop
	// of the plan at all.
	down  []bool
	pairs map[uint64]sources
}

// sources are the figures known of one pair's RTT, ms; 0 is none.
type sources struct {
	measuredMs float64 // probed in this plan
	earlierMs  float64 // the Prior's
	exactMs    float64 // published by a relay
	failed     bool    // a probe of it failed in this plan
	// verified says measuredMs is the median of Config.VerifyHandshakes
	// handshakes or more (see verify).
	verified bool
}

func newLedger() *ledger {
	return &ledger{id: map[string]int32{}, pairs: map[uint64]sources{}}
}

// intern is name's id, a new one for a name not seen before.
func (l *ledger) intern(name string) int32 {
	if i, ok := l.id[name]; ok {
		return i
	}
	i := int32(len(l.name))
	l.id[name] = i
	l.name = append(l.name, name)
	l.coord = append(l.coord, nil)
	l.down = append(l.down, false)
	return i
}

// pairKey is the unordered pair {a, b}: RTTs are symmetric.
func pairKey(a, b int32) uint64 {
	if b < a {
		a, b = b, a
	}
	return uint64(uint32(a))<<32 | uint64(uint32(b))
}

// pairOf is the ids of a pairKey, the lower first.
func pairOf(k uint64) (a, b int32) { return int32(k >> 32), int32(uint32(k)) }

// at is what is known of the pair {a, b} by name.
func (l *ledger) at(a, b string) sources { return l.pairs[pairKey(l.intern(a), l.intern(b))] }

// update changes the pair {a, b}'s figures by name.
func (l *ledger) update(a, b string, change func(*sources)) {
	k := pairKey(l.intern(a), l.intern(b))
	f := l.pairs[k]
	change(&f)
	l.pairs[k] = f
}

// rtt is the best figure known for the pair {a, b} (ids): measured in this
// plan, else the Prior's, else published, else estimated from coordinates;
// none (ok false) once a probe of it failed or either end is down.
func (l *ledger) rtt(a, b int32) (ms float64, estimated, ok bool) {
	f := l.pairs[pairKey(a, b)]
	switch {
	case f.measuredMs > 0:
		return f.measuredMs, false, true
	case f.failed || l.down[a] || l.down[b]:
		return 0, false, false
	case f.earlierMs > 0:
		return f.earlierMs, false, true
	case f.exactMs > 0:
		return f.exactMs, false, true
	}
	ms, ok = coord.EstimateMs(l.coord[a], l.coord[b])
	return ms, true, ok && ms > 0
}

// grid is the figures between a round's nodes, laid out flat for the
// passes over every pair (the candidates' matrix, optimisticPairs): each
// pair is looked up once a round.
type grid struct {
	name []string  // the client, the destination, then the candidates
	ms   []float64 // n×n, symmetric; +Inf: no segment (ok false)
	est  []bool    // n×n: the figure is an estimate
}

// Grid positions of the endpoints; the candidates follow.
const (
	gridClient = 0
	gridDst    = 1
)

// fill lays out the figures between names (the client, the destination,
// then the candidates) by rtt over their positions, reusing g's memory.
func (g *grid) fill(names []string, rtt func(i, j int) (ms float64, estimated, ok bool)) {
	n := len(names)
	g.name = names
	if cap(g.ms) < n*n {
		g.ms, g.est = make([]float64, n*n), make([]bool, n*n)
	}
	g.ms, g.est = g.ms[:n*n], g.est[:n*n]
	for i := range n {
		g.ms[i*n+i], g.est[i*n+i] = math.Inf(1), false
		for j := i + 1; j < n; j++ {
			ms, e, ok := rtt(i, j)
			if !ok {
				ms, e = math.Inf(1), false
			}
			g.ms[i*n+j], g.ms[j*n+i] = ms, ms
			g.est[i*n+j], g.est[j*n+i] = e, e
		}
	}
}

func (g *grid) n() int { return len(g.name) }

// fig is the figure between positions i and j: ok false when the pair is
// no segment.
func (g *grid) fig(i, j int) (ms float64, estimated, ok bool) {
	k := i*g.n() + j
	return g.ms[k], g.est[k], !math.IsInf(g.ms[k], 1)
}

// fillGrid lays out the figures between the nodes ids (names: theirs) in
// g as fill(names, l.rtt) would, without a lookup of every pair: the
// estimates first, then the pairs the ledger holds a figure for. A round's
// grid at 5,000 relays is a few hundred thousand pairs, of which a few
// tens of thousands are known, and looking each up in the pairs' map was
// a fifth of a plan's computation. ids must be distinct (Plan refuses
// relays of one name).
func (l *ledger) fillGrid(g *grid, names []string, ids []int32) {
	pos := make([]int32, len(l.name))
	for i := range pos {
		pos[i] = -1
	}
	for i, id := range ids {
		pos[id] = int32(i)
	}
	g.fill(names, func(i, j int) (float64, bool, bool) {
		a, b := ids[i], ids[j]
		if l.down[a] || l.down[b] {
			return 0, false, false
		}
		ms, ok := coord.EstimateMs(l.coord[a], l.coord[b])
		return ms, true, ok && ms > 0
	})
	n := len(names)
	for k := range l.pairs {
		a, b := pairOf(k)
		i, j := pos[a], pos[b]
		if i < 0 || j < 0 || i == j {
			continue
		}
		// In grid order, as fill asks: an estimate is not symmetric to
		// the last bit.
		if j < i {
			i, j = j, i
		}
		ms, est, ok := l.rtt(ids[i], ids[j])
		if !ok {
			ms, est = math.Inf(1), false
		}
		g.ms[int(i)*n+int(j)], g.ms[int(j)*n+int(i)] = ms, ms
		g.est[int(i)*n+int(j)], g.est[int(j)*n+int(i)] = est, est
	}
}
