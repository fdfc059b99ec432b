package shortlist

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/planner"
)

// build is the candidates' matrix; with measuredOnly, without the
// estimated pairs. It invalidates the matrix it built before.
func (r *planRun) build(measuredOnly bool) *planner.Matrix {
	names := append([]string{r.client, r.dst}, r.cands...)
	// Room for every pair at once, and for a few rounds' new
	// candidates: a Pair is some 150 bytes, and growing a slice of
	// a few hundred thousand by appends copied it over and over
	// (a third of a second a plan at 5,000 relays).
	if n := len(names) * (len(names) - 1) / 2; cap(r.pairs) < n {
		r.pairs = make([]planner.Pair, 0, n+n/4)
	}
	m := &planner.Matrix{Nodes: []planner.Node{r.in.Client, r.in.Destination}, Pairs: r.pairs[:0]}
	m.Nodes[0].Relay, m.Nodes[1].Relay = false, false
	ids := make([]int32, len(names))
	for i, name := range names {
		ids[i] = r.l.intern(name)
	}
	r.l.fillGrid(&r.g, names, ids)
	for _, c := range r.cands {
		m.Nodes = append(m.Nodes, r.placed[c].Node)
	}
	for i, a := range names {
		for j := i + 1; j < len(names); j++ {
			if ms, est, ok := r.g.fig(i, j); ok && !(est && measuredOnly) {
				m.Pairs = append(m.Pairs, planner.Pair{A: a, B: names[j], RTTMs: max(ms, 0.001), Estimated: est})
			}
		}
	}
	r.pairs = m.Pairs
	slices.SortFunc(m.Nodes, func(x, y planner.Node) int { return cmp.Compare(x.Name, y.Name) })
	return m
}

// necksOf is a plan's longest segments (more than one when
// they tie) whose neighbourhoods were not searched yet. Searching
// those of its next-longest segments too, in the same round, left
// fewer probes for the rest of the round and planned worse in the
// simulator (1,000 relays).
func (r *planRun) necksOf(p planner.Plan) (out [][2]string) {
	if b := p.Bottleneck; b >= 0 && len(p.Chain) > 0 && r.cfg.Neighbours > 0 {
		for _, seg := range p.Segments {
			if k := key(seg.From, seg.To); seg.RTTMs >= p.Segments[b].RTTMs && !r.searched[k] {
				out = append(out, [2]string{seg.From, seg.To})
			}
		}
	}
	return out
}

// rounds are the shortlist's rounds (round 4 of the package
// documentation): each plans over the candidates and probes what the
// best plan could be wrong about, until the plan is done. r.res and r.m
// are then the last search's.
func (r *planRun) rounds() error {
	r.isCand = map[string]bool{}
	for _, c := range r.cands {
		r.isCand[c] = true
	}
	r.searched = map[[2]string]bool{}
	for round := 0; ; round++ {
		if done, err := r.round(round); done || err != nil {
			return err
		}
	}
}

// round plans over the candidates and, unless the rounds end there
// (done), probes the next round's batch.
func (r *planRun) round(round int) (done bool, err error) {
	if round > 0 {
		if err := r.late(false); err != nil {
			return false, err
		}
	}
	if len(r.undescribed) > 0 {
		if err := r.describe(slices.Sorted(maps.Keys(r.undescribed))); err != nil {
			return false, err
		}
	}
	r.m = r.build(false)
	if r.res, err = planner.Search(r.m, r.req); err != nil {
		return false, err
	}
	necks := r.necksOf(r.res.Best)
	if round == r.cfg.Rounds || !r.unsettled(r.res.Best) && len(necks) == 0 {
		return true, nil
	}
	necks, settled, err := r.settle(necks)
	if settled || err != nil {
		return settled, err
	}
	added := r.nextBatch(r.withRunnersUp(necks))
	// A round that would end past the deadline or the search
	// budget is not made.
	if r.overBudget(r.batch) {
		return true, nil
	}
	// The new candidates are described while the round's probes run.
	// A round with nothing new to ask waits for what is in flight.
	if !slices.ContainsFunc(r.batch, func(b Probe) bool { return !r.pending[key(b.From, b.To)] }) {
		if err := r.late(true); err != nil {
			return false, err
		}
	}
	if err := r.probeDescribing(r.batch, added); err != nil {
		return false, err
	}
	r.cands = append(r.cands, added...)
	r.st.Candidates = len(r.cands)
	return false, nil
}

// withRunnersUp is necks with those of the runners-up, up to NeckPlans
// ranked plans in all (necksOf: not searched yet).
func (r *planRun) withRunnersUp(necks [][2]string) [][2]string {
	for i, pl := range r.res.Alternatives {
		if i+1 >= r.cfg.NeckPlans {
			break
		}
		for _, n := range r.necksOf(pl) {
			if !slices.Contains(necks, n) && !slices.Contains(necks, [2]string{n[1], n[0]}) {
				necks = append(necks, n)
			}
		}
	}
	return necks
}

// settle ends the rounds (settled) when they are close enough: the
// chains measured throughout hold one within Settle of the best plan the
// estimates promise, and its bottleneck's neighbourhood was searched, as
// a plan's must be (else this round searches it too: necks, with those).
func (r *planRun) settle(necks [][2]string) (_ [][2]string, settled bool, _ error) {
	if r.cfg.Settle > 0 && r.unsettled(r.res.Best) {
		// m is rebuilt (build reuses its pairs' memory): a settled
		// plan returns the matrix measured throughout, as one whose
		// rounds ran out does; else the next round builds anew.
		r.m = r.build(true)
		measured, err := planner.Search(r.m, r.req)
		if err != nil {
			return necks, false, err
		}
		// (A replan's chain that rests on its Prior's figures is
		// not measured throughout: it settles nothing.)
		if len(measured.Best.Segments) > 0 && !r.unsettled(measured.Best) && within(measured.Best, r.res.Best, r.cfg.Settle) {
			more := r.necksOf(measured.Best)
			if len(more) == 0 {
				r.st.Settled = true
				r.res = measured
				return necks, true, nil
			}
			for _, n := range more {
				if !slices.Contains(necks, n) {
					necks = append(necks, n)
				}
			}
		}
	}
	return necks, false, nil
}

// nextBatch makes r.batch the next round's probes: the necks'
// neighbourhoods, the ranked plans' segments not measured, the
// optimistic pairs. added are the relays that join the candidates.
func (r *planRun) nextBatch(necks [][2]string) (added []string) {
	seen := map[[2]string]bool{}
	r.batch = r.batch[:0]
	added = r.neighbourhoods(necks, seen)
	r.rankedSegments(seen)
	r.optimistic(seen)
	return added
}

// neighbourhoods adds the bottlenecks' neighbourhoods to the batch:
// relays close to either end of the best plan's longest segment are
// nearly interchangeable with it for the rest of the chain, but the
// segment itself differs pair by pair (routes, peering), by more than
// coordinates can tell. Probing the pairs between the two neighbourhoods
// finds the fast one; their relays join the candidates (added).
func (r *planRun) neighbourhoods(necks [][2]string, seen map[[2]string]bool) (added []string) {
	for _, neck := range necks {
		r.searched[key(neck[0], neck[1])] = true
		ends := r.near(neck[1])
		for _, a := range r.near(neck[0]) {
			for _, b := range ends {
				k := key(a, b)
				if _, est, ok := r.rtt(a, b); ok && est && !seen[k] && a != b {
					seen[k] = true
					r.batch = append(r.batch, r.orient(a, b))
				}
				for _, name := range [2]string{a, b} {
					if name != r.client && name != r.dst && !r.isCand[name] {
						r.isCand[name] = true
						added = append(added, name)
					}
				}
			}
		}
	}
	return added
}

// near is end and the Neighbours relays nearest it; an endpoint alone.
func (r *planRun) near(end string) []string {
	i, ok := r.at[end]
	if !ok { // an endpoint
		return []string{end}
	}
	return append(r.sp.nearest(i, r.cfg.Neighbours), end)
}

// rankedSegments adds the estimated segments of every plan the result
// ranks to the batch, and those known from the Prior only: the
// runner-up that measurement promotes must be measured too.
func (r *planRun) rankedSegments(seen map[[2]string]bool) {
	for _, pl := range append([]planner.Plan{r.res.Best}, r.res.Alternatives...) {
		for _, seg := range pl.Segments {
			k := key(seg.From, seg.To)
			if r.unmeasured(seg) && !seen[k] {
				seen[k] = true
				r.batch = append(r.batch, r.orient(seg.From, seg.To))
			}
		}
	}
}

// optimistic adds the estimated pairs on chains that would beat the bar
// (ExploreBar: the best chain measured throughout, by default) were the
// estimates Optimism times too high, most promising first: a detour's
// good long hops are what coordinates see worst.
func (r *planRun) optimistic(seen map[[2]string]bool) {
	if r.res.Best.Bottleneck < 0 {
		return
	}
	bMs := r.res.Best.Segments[r.res.Best.Bottleneck].RTTMs
	if r.cfg.ExploreBar == ExploreBarMeasured {
		if m := measuredBestMs(&r.g, r.hops); !math.IsInf(m, 1) {
			bMs = max(bMs, m)
		}
	}
	// The loop takes at most ExplorePerRound of them: each it
	// passes over is either added or already in the batch.
	optimism := flatOptimism(r.g.n(), r.cfg.Optimism)
	for i, name := range r.g.name {
		if r.young[name] {
			optimism[i] = min(r.cfg.Optimism, r.cfg.YoungOptimism)
		}
	}
	for _, pb := range optimisticPairs(&r.g, r.hops, bMs, optimism, r.cfg.ExplorePerRound) {
		if len(r.batch) >= r.cfg.ExplorePerRound {
			break
		}
		if k := key(pb.a, pb.b); !seen[k] {
			seen[k] = true
			r.batch = append(r.batch, r.orient(pb.a, pb.b))
		}
	}
}

// overBudget says a round of batch would end past the deadline or the
// search budget, and which (Stats.Deadlined, Stats.OutOfBudget).
func (r *planRun) overBudget(batch []Probe) bool {
	if !(r.cfg.Deadline > 0 || r.cfg.SearchBudget > 0) {
		return false
	}
	ends := r.endsAt(batch)
	r.st.Deadlined = r.cfg.Deadline > 0 && ends > r.cfg.Deadline
	r.st.OutOfBudget = r.cfg.SearchBudget > 0 && ends-r.searchFrom > r.cfg.SearchBudget
	return r.st.Deadlined || r.st.OutOfBudget
}

// pastDeadline says a round of batch would end past the deadline.
func (r *planRun) pastDeadline(batch []Probe) bool {
	return r.cfg.Deadline > 0 && r.endsAt(batch) > r.cfg.Deadline
}

// endsAt is when a round of batch would end, foreseen (roundMs).
func (r *planRun) endsAt(batch []Probe) time.Duration {
	return r.elapsed() + time.Duration(r.roundMs(batch)*float64(time.Millisecond))
}
