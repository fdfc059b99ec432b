package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Search plans the path from req.Client to req.Destination over m: the
// direct path, the best chain of at most MaxHops relays, and runners-up,
// ranked, with reasons. It validates m as Matrix.Validate does. It is pure
// and safe for concurrent use; it allocates about 20 bytes × n² for n
// usable relays.
//
// When nothing connects the client to the destination, Best is the direct
// plan without segments, and its reasons say so.
//
// The best chain is exact: the highest PredictedBps over every chain of
// distinct relays within the constraints, ties going to the lower total
// RTT, then fewer relays, then the lexicographically smaller chain.
// With req.SizeBytes > 0 it is the soonest predicted completion time
// instead (then the same tie-breaks), and every plan carries its Transfer.
func Search(m *Matrix, req Request) (*Result, error) {
	req, err := req.withDefaults()
	if err != nil {
		return nil, err
	}
	idx, err := m.index()
	if err != nil {
		return nil, err
	}
	s, err := newSearch(m, req, idx)
	if err != nil {
		return nil, err
	}
	if err := m.walkPairs(idx, s.addPair); err != nil {
		return nil, err
	}
	s.mirror()
	return s.result(), nil
}

// search holds one Search: the dense graph of usable nodes and scratch
// space for the dynamic programs.
//
// Dense indices: 0..relays−1 are the usable relays in name order (so index
// order is name order, which the lexicographic tie-break relies on), then
// the client, then the destination.
type search struct {
	m   *Matrix
	req Request

	node    []int     // dense index → index in m.Nodes
	dense   []int32   // index in m.Nodes → dense index; −1 = not usable in this search
	windows []int64   // dense index → window as a receiver, bytes (unknown ones assumed)
	sends   []int64   // dense index → send window, bytes; 0 = unknown (no limit)
	limits  []float64 // dense index → LimitBps, bits/s; 0 = unknown
	ccs     []string  // dense index → CongestionControl
	// stripes[d] is the most connections dense node d's segments to
	// other relays may be striped over: its MaxStripes within the
	// request's; 1 for the client and the destination, whose segments
	// are never striped.
	stripes []int
	// stripesOffBy is a usable relay that takes no striped segments (a
	// relay from before them: max_stripes absent), when another relay
	// does: then nothing is striped, as a striped header could pass
	// through it and it would refuse the header. "" otherwise.
	stripesOffBy string
	relays       int
	n            int // relays + 2: the row length of rate and pairOf
	client       int
	dst          int

	// rate[u*n+v] is the ceiling of segment u→v (u on the client side) in
	// the requested direction, bits/s; 0 = no usable pair.
	rate []float64
	// rtt[u*n+v] is the RTT of the usable pair u–v, milliseconds; 0 =
	// none. Dense beside rate because the route program reads it along
	// rows; through pairOf it would miss the cache on every read.
	rtt []float64
	// pairOf[u*n+v] is 1 + the index in m.Pairs of the pair u–v, in one of
	// the two cells u→v and v→u (see pair); 0 = none. Negated for a pair
	// whose loss (or its source), measured windows or learnt rates mirror
	// must read (most pairs have none, and mirror then reads only the
	// dense tables: their loss is unknown both ways).
	pairOf []int32
	// factor[k] is (1−RelayOverhead)^k: what k relays leave of a rate.
	factor []float64
	// staleIgnored counts stale pairs between usable nodes left out.
	staleIgnored int

	// Scratch, reused across runs: layer buffers of the bottleneck
	// program, and per-layer distances and parents of the route program.
	layerA, layerB []float64
	dist           [][]float64
	par            [][]int32

	// With a size only (see restBounds): bounds on the rest of a chain.
	restMs, restBps [][]float64
	minLastMs       float64

	// measured indexes Request.Measured (nil: none, or ranking by size).
	measured map[measuredKey]Measurement
	// keptOver is the untried chain a measured one was kept ahead of
	// (keepMeasured); nil when none was.
	keptOver []int32
	// prior is the loss a segment nobody measured gets (sendLoss).
	prior LossPrior
}

// candidate is a chain found by the search, in dense indices.
type candidate struct {
	chain        []int32
	predictedBps float64
	rttMs        float64
	// completionMs is the predicted completion time for Request.SizeBytes,
	// ms (only with a size; +Inf when the path moves nothing).
	completionMs float64
	origin       string // how it was found, for its reasons: "best chain with 2 relays; best chain avoiding r1"
}

func newSearch(m *Matrix, req Request, idx map[string]int) (*search, error) {
	ci, ok := idx[req.Client]
	if !ok {
		return nil, fmt.Errorf("client %q: not a node of the matrix", req.Client)
	}
	di, ok := idx[req.Destination]
	if !ok {
		return nil, fmt.Errorf("destination %q: not a node of the matrix (Matrix.Resolve maps regions to nodes)", req.Destination)
	}
	if ci == di {
		return nil, fmt.Errorf("client and destination are both %q", req.Client)
	}
	usable := func(i int) bool { return m.Nodes[i].Relay && i != ci && i != di }
	names := func(field string, list []string) (map[int]bool, error) {
		set := make(map[int]bool, len(list))
		for _, name := range list {
			i, ok := idx[name]
			switch {
			case !ok:
				return nil, fmt.Errorf("constraints.%s: unknown relay %q", field, name)
			case !m.Nodes[i].Relay:
				return nil, fmt.Errorf("constraints.%s: %q is not a relay", field, name)
			}
			set[i] = true
		}
		return set, nil
	}
	include, err := names("include", req.Constraints.Include)
	if err != nil {
		return nil, err
	}
	exclude, err := names("exclude", req.Constraints.Exclude)
	if err != nil {
		return nil, err
	}
	s := &search{m: m, req: req, dense: make([]int32, len(m.Nodes))}
	for i := range m.Nodes {
		s.dense[i] = -1
		if usable(i) && (len(include) == 0 || include[i]) && !exclude[i] {
			s.node = append(s.node, i)
		}
	}
	slices.SortFunc(s.node, func(a, b int) int { return cmp.Compare(m.Nodes[a].Name, m.Nodes[b].Name) })
	s.relays = len(s.node)
	s.client, s.dst = s.relays, s.relays+1
	s.node = append(s.node, ci, di)
	s.n = len(s.node)
	s.windows, s.sends, s.limits, s.ccs = make([]int64, s.n), make([]int64, s.n), make([]float64, s.n), make([]string, s.n)
	s.stripes = make([]int, s.n)
	for d, i := range s.node {
		s.dense[i] = int32(d)
		s.limits[d] = m.Nodes[i].LimitBps
		s.ccs[d] = m.Nodes[i].CongestionControl
		s.stripes[d] = 1
		if d < s.relays {
			s.stripes[d] = max(1, min(m.Nodes[i].MaxStripes, req.Constraints.MaxStripes))
		}
		if d < s.relays && m.Nodes[i].MaxStripes <= 0 && s.stripesOffBy == "" {
			s.stripesOffBy = m.Nodes[i].Name
		}
		s.sends[d] = m.Nodes[i].SendWindowBytes
		s.windows[d] = m.Nodes[i].WindowBytes
		if s.windows[d] <= 0 {
			s.windows[d] = req.Model.DefaultWindowBytes
		}
	}
	if !slices.ContainsFunc(s.stripes, func(n int) bool { return n >= 2 }) {
		s.stripesOffBy = "" // nothing stripes: nothing to say
	}
	s.rate = make([]float64, s.n*s.n)
	s.rtt = make([]float64, s.n*s.n)
	s.pairOf = make([]int32, s.n*s.n)
	hops := min(req.Constraints.MaxHops, s.relays)
	s.factor = make([]float64, hops+1)
	s.factor[0] = 1
	for k := 1; k <= hops; k++ {
		s.factor[k] = s.factor[k-1] * (1 - req.Model.RelayOverhead)
	}
	s.indexMeasured()
	s.prior = lossPriorOf(m.Pairs, req.Constraints.MaxAgeSec, req.Constraints.UseStale)
	return s, nil
}

// maxHops is the most relays a chain can have in this search.
func (s *search) maxHops() int { return len(s.factor) - 1 }

// addPair is walkPairs' visitor: it enters pair k, between m.Nodes a and
// b, when both ends are usable and it is not stale. It writes only cell
// a→b, with the pair's direction-independent cap in rate: sorted pairs
// then fill the tables row by row; mirror does the rest.
func (s *search) addPair(k, a, b int) {
	da, db := int(s.dense[a]), int(s.dense[b])
	if da < 0 || db < 0 {
		return
	}
	p := &s.m.Pairs[k]
	if p.AgeSec > s.req.Constraints.MaxAgeSec && !s.req.Constraints.UseStale {
		s.staleIgnored++
		return
	}
	x := da*s.n + db
	s.rate[x] = s.capBps(da, db, p)
	s.rtt[x] = p.RTTMs
	s.pairOf[x] = int32(k + 1)
	if p.hasExtras() || p.ALossSource != "" || p.BLossSource != "" {
		s.pairOf[x] = -s.pairOf[x]
	}
}

// mirror completes what addPair entered: for every pair, both cells u→v
// and v→u of rate (the directed ceilings) and rtt. pairOf stays as it is:
// only the few segments of the plans reported read it. It walks the
// matrix in tiles so that the transposed cells stay in cache: cell by cell
// down a column, each write would miss the cache and the TLB.
func (s *search) mirror() {
	const tile = 64
	n := s.n
	for u0 := 0; u0 < n; u0 += tile {
		for v0 := u0; v0 < n; v0 += tile {
			for u := u0; u < min(u0+tile, n); u++ {
				for v := max(v0, u+1); v < min(v0+tile, n); v++ {
					x, y := u*n+v, v*n+u
					src := x
					if s.pairOf[x] == 0 {
						if s.pairOf[y] == 0 {
							continue
						}
						src = y
					}
					c, rtt := s.rate[src], s.rtt[src]
					// wu and wv: the ways u and v receive.
					inf := math.Inf(1)
					var wu, wv way
					if k := s.pairOf[src]; k > 0 {
						wu = way{windowBps(flightBytes(s.windows[u], s.sends[v]), rtt), inf}
						wv = way{windowBps(flightBytes(s.windows[v], s.sends[u]), rtt), inf}
						if s.prior.ok() {
							lu, _ := s.sendLoss(v, rtt, 0, "")
							lv, _ := s.sendLoss(u, rtt, 0, "")
							wu.connBps, wv.connBps = min(wu.connBps, s.lossBps(v, rtt, lu)), min(wv.connBps, s.lossBps(u, rtt, lv))
						}
					} else {
						p := &s.m.Pairs[-k-1]
						lu, _ := s.pairLoss(v, p)
						lv, _ := s.pairLoss(u, p)
						wu = way{min(s.flightBps(v, u, p), s.lossBps(v, rtt, lu)), s.learntBps(v, p)}
						wv = way{min(s.flightBps(u, v, p), s.lossBps(u, rtt, lv)), s.learntBps(u, p)}
					}
					// The connections of u→v and of v→u; a call only
					// for the few cells between relays that stripe.
					nx, ny := 1, 1
					if s.stripes[u] > 1 && s.stripes[v] > 1 {
						nx, ny = s.segmentStripes(u, v, wu, wv, c), s.segmentStripes(v, u, wv, wu, c)
					}
					s.rate[x], s.rate[y] = s.dirRate(wu.boundBps(nx), wv.boundBps(nx), c), s.dirRate(wv.boundBps(ny), wu.boundBps(ny), c)
					s.rtt[x], s.rtt[y] = rtt, rtt
				}
			}
		}
	}
}

// flightBps is the window bound of data flowing from dense node from to
// dense node to over pair p, bits/s: the receiver's window, or the
// sender's send window where that is smaller.
func (s *search) flightBps(from, to int, p *Pair) float64 {
	return windowBps(flightBytes(s.recvWindow(to, p), s.sends[from]), p.RTTMs)
}

// recvWindow is dense node to's receive window on pair p, bytes: the one
// measured on that path, else the node's.
func (s *search) recvWindow(to int, p *Pair) int64 {
	if p.AWindowBytes > 0 || p.BWindowBytes > 0 {
		w := p.BWindowBytes
		if s.name(to) == p.A {
			w = p.AWindowBytes
		}
		if w > 0 {
			return w
		}
	}
	return s.windows[to]
}

// learntBps is the rate dense node sender's traffic over pair p was learnt
// to reach, bits/s; +Inf when unknown.
func (s *search) learntBps(sender int, p *Pair) float64 {
	bps := p.BSendBps
	if s.name(sender) == p.A {
		bps = p.ASendBps
	}
	if bps <= 0 {
		return math.Inf(1)
	}
	return bps
}

// capBps is capBps for the pair p between dense nodes u and v.
func (s *search) capBps(u, v int, p *Pair) float64 {
	return capBps(minLimit(s.limits[u], s.limits[v]), p.Loss)
}

// lossBps is lossBps for data dense node sender sends over rttMs with loss.
func (s *search) lossBps(sender int, rttMs, loss float64) float64 {
	return lossBps(rttMs, loss, s.ccs[sender], s.req.Model.MSSBytes)
}

// dirRate is a segment's ceiling in the requested direction, bits/s, from
// the bounds (window and loss) with its client-side end (fromBps) and its
// destination-side end (toBps) receiving, under the cap capBps.
func (s *search) dirRate(fromBps, toBps, capBps float64) float64 {
	switch s.req.Direction {
	case Up:
		return min(toBps, capBps)
	case Both:
		return min(fromBps, toBps, capBps)
	}
	return min(fromBps, capBps)
}

// bottlenecks returns best[k] for k = 1..maxHops (best[0] unused): the
// highest bottleneck rate over walks client → k relays → destination that
// avoid relay ban (−1: none), bits/s; 0 = no such walk, or none whose
// prediction best[k]·factor[k] reaches lbBps.
//
// It is a Bellman-Ford over hop count with (max, min) in place of
// (min, +): layer[v] is the best bottleneck reaching relay v with k
// relays. Walks may repeat a relay; Search only keeps simple chains, and
// a walk repeating a relay is never better than the shorter simple chain
// inside it (same or higher bottleneck, less overhead, less RTT).
//
// lbBps is a prediction some simple chain is known to reach; the bound
// rises as layers find better walks. A walk through relay u at layer j
// predicts at most layer[u]·factor[j], so rows below the bound are
// skipped: on a spread-out fleet most of them. That can only lower a
// best[k] that could not reach the bound anyway; those are reported as 0.
func (s *search) bottlenecks(ban int, lbBps float64) []float64 {
	n, r := s.n, s.relays
	best := make([]float64, s.maxHops()+1)
	prev, cur := s.layerA[:r], s.layerB[:r]
	copy(prev, s.rate[s.client*n:s.client*n+r])
	for k := 1; ; k++ {
		if ban >= 0 {
			prev[ban] = 0
		}
		for u, bu := range prev {
			best[k] = max(best[k], min(bu, s.rate[u*n+s.dst]))
		}
		if best[k]*s.factor[k] < lbBps {
			best[k] = 0 // maybe lowered by skipped rows: unknown, and below the bound
		}
		lbBps = max(lbBps, best[k]*s.factor[k])
		if k == len(best)-1 {
			return best
		}
		clear(cur)
		for u, bu := range prev {
			if bu == 0 || bu*s.factor[k] < lbBps {
				continue
			}
			// The hot loop: one row of rate, read in order. The min/max
			// builtins compile to branch-free code; comparisons with
			// branches cost 4× on real data, where they are unpredictable.
			row := s.rate[u*n : u*n+r]
			cur := cur[:len(row)]
			for v, rv := range row {
				cur[v] = max(cur[v], min(rv, bu))
			}
		}
		prev, cur = cur, prev
	}
}

// route returns the walk client → k relays → destination with the least
// total RTT among those whose every segment rate is at least floorBps,
// ties going to the lexicographically smaller chain, avoiding relay ban
// (−1: none), and its total RTT. floorBps must be a bottlenecks()[k] > 0
// for the same ban: then such a walk exists, and this is the best walk
// with k relays.
func (s *search) route(k int, floorBps float64, ban int) ([]int32, float64) {
	n, r := s.n, s.relays
	inf := math.Inf(1)
	d1 := s.dist[1][:r]
	for v := range d1 {
		d1[v] = inf
		if s.rate[s.client*n+v] >= floorBps && v != ban {
			d1[v] = s.rtt[s.client*n+v]
		}
	}
	for j := 2; j <= k; j++ {
		prev, cur, par := s.dist[j-1][:r], s.dist[j][:r], s.par[j][:r]
		for v := range cur {
			cur[v] = inf
		}
		for u, du := range prev {
			if du == inf {
				continue
			}
			rtt := s.rtt[u*n : u*n+r]
			for v, rv := range s.rate[u*n : u*n+r] {
				if rv < floorBps || v == ban {
					continue
				}
				c := du + rtt[v]
				if c < cur[v] || (c == cur[v] && s.prefixLess(j-1, int32(u), par[v])) {
					cur[v], par[v] = c, int32(u)
				}
			}
		}
	}
	last, total := int32(-1), inf
	for u, du := range s.dist[k][:r] {
		if du == inf || s.rate[u*n+s.dst] < floorBps {
			continue
		}
		c := du + s.rtt[u*n+s.dst]
		if c < total || (c == total && s.prefixLess(k, int32(u), last)) {
			last, total = int32(u), c
		}
	}
	if last < 0 {
		panic("planner: no route at a bottleneck the same graph reached")
	}
	chain := make([]int32, k)
	chain[k-1] = last
	for j := k; j > 1; j-- {
		chain[j-2] = s.par[j][chain[j-1]]
	}
	return chain, total
}

// prefixLess reports whether the best route prefix of j relays ending at u
// sorts before the one ending at w. Walking back, the last difference
// seen is the earliest position, which decides.
func (s *search) prefixLess(j int, u, w int32) bool {
	less := false
	for ; ; j-- {
		if u != w {
			less = u < w
		}
		if j == 1 {
			return less
		}
		u, w = s.par[j][u], s.par[j][w]
	}
}

// candidates returns simple chains avoiding relay ban (−1: none), sorted
// best first: with all, the best chain for every relay count that predicts
// at least as much as every shorter count's best (a longer, slower chain
// is never worth listing); without, only the best chain overall. lbBps is
// a prediction a chain avoiding ban is known to reach (0: none known).
func (s *search) candidates(ban int, lbBps float64, all bool, origin func(k int) string) []candidate {
	best := s.bottlenecks(ban, lbBps)
	ks := make([]int, 0, len(best))
	for k := 1; k < len(best); k++ {
		if best[k] > 0 {
			ks = append(ks, k)
		}
	}
	pred := func(k int) float64 { return best[k] * s.factor[k] }
	slices.SortStableFunc(ks, func(a, b int) int { return cmp.Compare(pred(b), pred(a)) })
	var out []candidate
	for _, k := range ks {
		if !all && len(out) > 0 && pred(k) < out[0].predictedBps {
			break // sorted: no later k can reach the best found
		}
		chain, rttMs := s.route(k, best[k], ban)
		if hasRepeat(chain) {
			// The cheapest walk at this bottleneck repeats a relay: the
			// simple chain inside it, found at a smaller k, beats it.
			continue
		}
		out = append(out, candidate{chain: chain, predictedBps: pred(k), rttMs: rttMs, origin: origin(k)})
		slices.SortFunc(out, compareCandidates)
	}
	if !all && len(out) > 1 {
		out = out[:1]
	}
	return out
}

// preferFewer moves the chain that wins the ties to the front of chains
// (sorted by compareCandidates): among those predicting within
// Model.ErrorMargin of the first, the one with the fewest relays; of equal
// counts, the earlier. Fallback chains added after the first call do not
// change its pick: a chain with fewer relays predicts at most that count's
// best, which was outside the margin, and the pick is the best chain of its
// own count.
func (s *search) preferFewer(chains []candidate) { s.preferFewerBy(chains, s.sized()) }

// preferFewerBy is preferFewer by completion time (sized) or by
// predicted rate.
func (s *search) preferFewerBy(chains []candidate, sized bool) {
	if len(chains) < 2 {
		return
	}
	floor := chains[0].predictedBps * (1 - s.req.Model.ErrorMargin)
	tied := func(c candidate) bool { return c.predictedBps >= floor }
	if sized {
		ceiling := chains[0].completionMs * (1 + s.req.Model.ErrorMargin)
		tied = func(c candidate) bool { return c.completionMs <= ceiling }
	}
	w := 0
	for i := 1; i < len(chains) && tied(chains[i]); i++ {
		if len(chains[i].chain) < len(chains[w].chain) {
			w = i
		}
	}
	if w > 0 {
		win := chains[w]
		copy(chains[1:w+1], chains[:w])
		chains[0] = win
	}
}

func hasRepeat(chain []int32) bool {
	for i := range chain {
		if slices.Contains(chain[i+1:], chain[i]) {
			return true
		}
	}
	return false
}

// compare is the ranking in force: compareCandidates without a size,
// compareSized with one.
func (s *search) compare(a, b candidate) int {
	if s.sized() {
		return compareSized(a, b)
	}
	return compareCandidates(a, b)
}

// compareSized is the ranking with a size: sooner predicted completion,
// then lower total RTT, then fewer relays, then the lexicographically
// smaller chain.
func compareSized(a, b candidate) int {
	return cmp.Or(
		cmp.Compare(a.completionMs, b.completionMs),
		cmp.Compare(a.rttMs, b.rttMs),
		cmp.Compare(len(a.chain), len(b.chain)),
		slices.Compare(a.chain, b.chain),
	)
}

// compareCandidates is the ranking: higher prediction, then lower total
// RTT, then fewer relays, then the lexicographically smaller chain (dense
// index order is name order). Direct is the candidate with no relays.
func compareCandidates(a, b candidate) int {
	return cmp.Or(
		cmp.Compare(b.predictedBps, a.predictedBps),
		cmp.Compare(a.rttMs, b.rttMs),
		cmp.Compare(len(a.chain), len(b.chain)),
		slices.Compare(a.chain, b.chain),
	)
}

// result runs the search and assembles the ranked plans.
func (s *search) result() *Result {
	req := s.req
	res := &Result{Client: req.Client, Destination: req.Destination, Direction: req.Direction, Alternatives: []Plan{}, Notes: []string{}, SizeBytes: req.SizeBytes}

	cd := s.client*s.n + s.dst
	direct, directKnown := candidate{chain: []int32{}, predictedBps: s.rate[cd], rttMs: s.rtt[cd]}, s.rtt[cd] > 0
	if s.sized() {
		direct.completionMs = math.Inf(1)
		if directKnown {
			direct.completionMs = s.flowOf(direct.chain).completionMs(req.SizeBytes)
		}
	}

	// find returns the chains avoiding relay ban (−1: none) by the ranking
	// in force: with all, the best for every relay count; known are chains
	// found before that avoid ban, which bound the search.
	find := func(ban int, known []candidate, all bool, origin func(k int) string) []candidate {
		lbBps := 0.0
		for _, c := range known {
			lbBps = max(lbBps, c.predictedBps)
		}
		found := s.candidates(ban, lbBps, all, origin)
		if !s.sized() {
			return found
		}
		return s.sizedCandidates(ban, append(found, known...), all, origin)
	}
	var chains []candidate
	var steadyTop *candidate // the chain a size-less plan picks: the crossover's
	if hops := s.maxHops(); hops > 0 {
		s.layerA, s.layerB = make([]float64, s.relays), make([]float64, s.relays)
		s.dist, s.par = make([][]float64, hops+1), make([][]int32, hops+1)
		for j := 1; j <= hops; j++ {
			s.dist[j], s.par[j] = make([]float64, s.relays), make([]int32, s.relays)
		}
		origin := func(k int) string { return fmt.Sprintf("best chain with %d relay%s", k, plural(k)) }
		chains = s.candidates(-1, 0, true, origin)
		if s.sized() && len(chains) > 0 {
			byRate := slices.Clone(chains)
			s.preferFewerBy(byRate, false)
			steadyTop = &byRate[0]
			chains = s.sizedCandidates(-1, chains, true, origin)
		}
		s.preferFewer(chains)
	}
	// Fallbacks: the best chain avoiding each relay of the top chain, in
	// case that relay fails or is busy. Chains already found that avoid
	// it bound the search.
	if len(chains) > 0 {
		for _, r := range chains[0].chain {
			name := s.name(int(r))
			var known []candidate
			for _, c := range chains {
				if !slices.Contains(c.chain, r) {
					known = append(known, c)
				}
			}
			for _, c := range find(int(r), known, false, func(int) string { return "best chain avoiding " + name }) {
				i := slices.IndexFunc(chains, func(o candidate) bool { return slices.Equal(o.chain, c.chain) })
				if i < 0 {
					chains = append(chains, c)
				} else {
					chains[i].origin += "; " + c.origin
				}
			}
		}
	}
	if s.measured != nil {
		s.measuredCap(chains)
		if directKnown {
			d := []candidate{direct}
			s.measuredCap(d)
			direct = d[0]
		}
	}
	slices.SortFunc(chains, s.compare)
	s.preferFewer(chains)
	keepDirect := s.keepMeasured(chains, direct, directKnown)

	res.Direct = s.plan(direct, direct, directKnown)
	chainWins := false
	var top candidate
	if len(chains) > 0 {
		top = chains[0]
		chainWins = !keepDirect && s.beatsDirect(top, direct, directKnown)
	}
	if chainWins {
		res.Best = s.plan(top, direct, directKnown)
		res.Best.Reasons = slices.Insert(res.Best.Reasons, 0, s.winReason(top, direct, directKnown))
		if s.keptOver != nil {
			res.Best.Reasons = slices.Insert(res.Best.Reasons, 1, s.keptReason(top))
		}
		if why := s.exploring(top, chains[1:]); why != "" {
			res.Best.Reasons = slices.Insert(res.Best.Reasons, 1, why)
			res.Exploring = true
		}
		if why := s.restsOn(res.Best, direct, directKnown); why != "" {
			res.Best.Reasons = slices.Insert(res.Best.Reasons, 1, why)
		}
		if why := s.directLoses(top, direct, directKnown); why != "" {
			res.Direct.Reasons = append(res.Direct.Reasons, why)
		}
		chains = chains[1:]
	} else {
		res.Awaiting = s.awaiting(chains)
		why := s.directWinReason(chains, direct, directKnown, res.Awaiting)
		if keepDirect {
			why = "direct wins: " + s.keptReason(direct)
		}
		res.Direct.Reasons = slices.Insert(res.Direct.Reasons, 0, why)
		res.Best = res.Direct
		res.Best.Segments, res.Best.Reasons = slices.Clone(res.Direct.Segments), slices.Clone(res.Direct.Reasons)
	}
	for _, c := range chains[:min(len(chains), MaxAlternatives)] {
		p := s.plan(c, direct, directKnown)
		lost := s.lossReason(c, chainWins, top, direct)
		p.Reasons = slices.Insert(p.Reasons, 0, lost+" — "+c.origin)
		res.Alternatives = append(res.Alternatives, p)
	}
	if steadyTop != nil && directKnown {
		res.Crossover = &Crossover{Chain: s.names(steadyTop.chain), Kind: CrossoverAlways}
		if direct.predictedBps > 0 {
			res.Crossover.Kind, res.Crossover.Bytes = crossover(s.flowOf(steadyTop.chain), s.flowOf(direct.chain))
		}
	}
	if s.keptOver != nil {
		res.KeptOver = s.names(s.keptOver)
	}
	res.Notes = s.notes(directKnown)
	res.LossPrior = s.prior
	return res
}

// beatsDirect reports whether chain top is the plan to use rather than
// direct: it is ranked above direct and gains at least MinGain, in rate
// or, with a size, in completion time; or direct cannot compete.
func (s *search) beatsDirect(top, direct candidate, directKnown bool) bool {
	gain := 1 + s.req.Constraints.MinGain
	switch {
	case !directKnown || direct.predictedBps == 0:
		return true
	case s.sized():
		return top.completionMs*gain <= direct.completionMs && compareSized(top, direct) < 0
	}
	return top.predictedBps >= direct.predictedBps*gain && compareCandidates(top, direct) < 0
}

func (s *search) name(d int) string { return s.m.Nodes[s.node[d]].Name }

// plan builds the Plan for candidate c, with its own reasons; direct is
// the direct candidate, for the speed-up.
func (s *search) plan(c, direct candidate, directKnown bool) Plan {
	p := Plan{Chain: make([]string, len(c.chain)), Bottleneck: -1, Segments: []Segment{}, Reasons: []string{}}
	if directKnown {
		p.DirectPredictedBps = direct.predictedBps
	}
	if len(c.chain) == 0 && !directKnown {
		p.Reasons = append(p.Reasons, fmt.Sprintf("direct path %s→%s not measured: no usable pair", s.name(s.client), s.name(s.dst)))
		return p
	}
	path := make([]int, 0, len(c.chain)+2)
	path = append(path, s.client)
	for i, r := range c.chain {
		p.Chain[i] = s.name(int(r))
		path = append(path, int(r))
	}
	path = append(path, s.dst)
	minRate, minDown, minUp := math.Inf(1), math.Inf(1), math.Inf(1)
	for i := 0; i+1 < len(path); i++ {
		seg := s.segment(path[i], path[i+1])
		if seg.RateBps < minRate {
			minRate, p.Bottleneck = seg.RateBps, i
		}
		minDown, minUp = min(minDown, seg.DownBps), min(minUp, seg.UpBps)
		p.Bound = p.Bound || len(seg.Unknown) > 0
		p.TotalRTTMs += seg.RTTMs
		p.Segments = append(p.Segments, seg)
	}
	f := s.factor[len(c.chain)]
	p.PredictedBps, p.PredictedDownBps, p.PredictedUpBps = minRate*f, minDown*f, minUp*f
	modelBps := p.PredictedBps
	s.applyMeasured(&p, c.chain)
	if p.DirectPredictedBps > 0 {
		p.Speedup = p.PredictedBps / p.DirectPredictedBps
	}
	if s.sized() && p.PredictedBps > 0 {
		t := s.flowOf(c.chain).transfer(s.req.SizeBytes)
		if directKnown && direct.predictedBps > 0 {
			t.Speedup = direct.completionMs / t.CompletionMs
		}
		p.Transfer = &t
	}
	p.Reasons = s.describe(p, path)
	if why := measuredReason(p, modelBps); why != "" {
		p.Reasons = append(p.Reasons, why)
	}
	return p
}

// pair returns the usable pair between dense nodes u and v.
func (s *search) pair(u, v int) *Pair {
	k := s.pairOf[u*s.n+v]
	if k == 0 {
		k = s.pairOf[v*s.n+u]
	}
	if k < 0 {
		k = -k
	}
	return &s.m.Pairs[k-1]
}

// segment describes the usable segment u→v (u on the client side).
func (s *search) segment(u, v int) Segment {
	pair := s.pair(u, v)
	c := s.capBps(u, v, pair)
	// Each way: one connection's window bound with its sender's loss
	// bound, and the rate its sender was learnt to reach.
	lossU, sourceU := s.pairLoss(v, pair) // v's sends to u
	lossV, sourceV := s.pairLoss(u, pair)
	lu, lv := s.lossBps(v, pair.RTTMs, lossU), s.lossBps(u, pair.RTTMs, lossV)
	from := way{min(s.flightBps(v, u, pair), lu), s.learntBps(v, pair)}
	to := way{min(s.flightBps(u, v, pair), lv), s.learntBps(u, pair)}
	n := s.segmentStripes(u, v, from, to, c)
	wu, wv := from.boundBps(n), to.boundBps(n)
	seg := Segment{
		From: s.name(u), To: s.name(v), RTTMs: pair.RTTMs, Loss: lossU, LossSource: sourceU,
		LimitBps:  minLimit(s.limits[u], s.limits[v]),
		RateBps:   s.dirRate(wu, wv, c),
		DownBps:   min(wu, c),
		UpBps:     min(wv, c),
		Estimated: pair.Estimated,
		Stale:     pair.AgeSec > s.req.Constraints.MaxAgeSec,
		AgeSec:    pair.AgeSec,
	}
	// The receiver whose window counts: the client side for a download,
	// the destination side for an upload, the slower way for both.
	recv, send, w, lossB := u, v, from, lu
	if s.req.Direction == Up || (s.req.Direction == Both && wv < wu) {
		recv, send, w, lossB = v, u, to, lv
		seg.Loss, seg.LossSource = lossV, sourceV
	}
	if learnt := w.learntBps; !math.IsInf(learnt, 1) {
		seg.LearntBps = learnt
		seg.LearntAgeSec, seg.LearntSource = pair.BSendAgeSec, pair.BSendSource
		if s.name(send) == pair.A {
			seg.LearntAgeSec, seg.LearntSource = pair.ASendAgeSec, pair.ASendSource
		}
		if seg.LearntSource == "" {
			seg.LearntSource = LearntFromTunnels
		}
	}
	seg.Receiver, seg.Sender = s.name(recv), s.name(send)
	seg.WindowBytes, seg.SendWindowBytes = s.recvWindow(recv, pair), s.sends[send]
	seg.WindowAssumed = s.m.Nodes[s.node[recv]].WindowBytes <= 0 && seg.WindowBytes == s.windows[recv]
	seg.SenderCongestionControl = s.ccs[send]
	seg.LimitedBy = seg.limitedBy(w, n, c, lossB)
	if n > 1 {
		seg.Stripes = n
		seg.OneLinkBps = s.dirRate(from.boundBps(1), to.boundBps(1), c)
		seg.OneLinkLimitedBy = seg.limitedBy(w, 1, c, lossB)
	}
	seg.Unknown = s.unknowns(u, v, pair)
	return seg
}

// limitedBy names the term that sets the rate of n connections over seg
// (Segment.LimitedBy): of the way w the plan counts, with its sender's
// loss bound lossBps (one connection's), under the cap capBps. seg must
// have its windows.
func (seg *Segment) limitedBy(w way, n int, capBps, lossBps float64) string {
	wBps, lossB, learnt := w.boundBps(n), float64(n)*lossBps, w.learntBps
	switch {
	case wBps <= capBps && learnt <= wBps && learnt < lossB: // min took the learnt rate
		return limitedByLearnt
	case wBps <= capBps && lossB <= wBps: // min took the loss bound
		return limitedByLoss
	case wBps <= capBps && seg.SendWindowBytes > 0 && seg.SendWindowBytes < seg.WindowBytes:
		return limitedBySendWindow
	case wBps <= capBps:
		return limitedByWindow
	case seg.LimitBps > 0 && capBps == seg.LimitBps:
		return limitedByLimit
	}
	return limitedByLoss // total loss: a cap of 0
}

// lossSourceOf is who measured the loss of sender's sends over pair.
func lossSourceOf(sender string, p *Pair) string {
	if sender == p.A {
		return p.ALossSource
	}
	return p.BLossSource
}

// unknowns lists what segment u→v over pair rests on that nobody
// measured, learnt or declared (Segment.Unknown), in every direction the
// request counts (for Both, either way's unknown).
func (s *search) unknowns(u, v int, pair *Pair) []string {
	ways := [][2]int{{u, v}} // {receiver, sender}: a download's
	switch s.req.Direction {
	case Up:
		ways = [][2]int{{v, u}}
	case Both:
		ways = append(ways, [2]int{v, u})
	}
	var capacity, window, loss bool
	for _, w := range ways {
		recv, send := w[0], w[1]
		capacity = capacity || minLimit(s.limits[u], s.limits[v]) <= 0 && math.IsInf(s.learntBps(send, pair), 1) && pair.Loss < 1
		window = window || s.m.Nodes[s.node[recv]].WindowBytes <= 0 && s.recvWindow(recv, pair) == s.windows[recv]
		l, source := s.pairLoss(send, pair)
		loss = loss || l == 0 && source == "" && !LossTolerant(s.ccs[send])
	}
	var out []string
	for _, k := range []struct {
		unknown bool
		what    string
	}{{capacity, UnknownCapacity}, {window, UnknownWindow}, {loss, UnknownLoss}} {
		if k.unknown {
			out = append(out, k.what)
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
