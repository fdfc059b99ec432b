package shortlist

import (
	"cmp"
	"slices"

	"github.com/relaymesh/relaymesh/planner"
)

// searchAgain plans over the candidates again (without the estimated
// pairs, with measuredOnly).
func (r *planRun) searchAgain(measuredOnly bool) (err error) {
	r.m = r.build(measuredOnly)
	r.res, err = planner.Search(r.m, r.req)
	return err
}

// answer settles the plan once the rounds have ended: r.res and r.m are
// then the answer and the matrix it was planned on.
func (r *planRun) answer() error {
	// The best plan waiting on a probe in flight: wait for it (but at
	// the deadline or the search budget's end, when it counts as the
	// estimate it is, below).
	if !r.st.Deadlined && !r.st.OutOfBudget && slices.ContainsFunc(r.res.Best.Segments, func(s planner.Segment) bool { return r.pending[key(s.From, s.To)] }) {
		if err := r.late(true); err != nil {
			return err
		}
		if err := r.searchAgain(false); err != nil {
			return err
		}
	}
	// The rounds ran out with the best plan still standing on an
	// estimate: choose among the chains measured throughout. An estimate
	// the rounds did not get to is as likely too low as too high, and a
	// plan that rests on one too low is the miss that costs most
	// (docs/defaults.md#the-chains-measured-throughout).
	// Without rounds the plan stands on the estimates, as configured. At
	// the deadline or the search budget's end likewise the chains
	// measured throughout.
	if r.cfg.Rounds > 0 && hasEstimate(r.res.Best) {
		return r.searchAgain(true)
	}
	return nil
}

// learnt is what a replan can start from (Stats.Prior): the endpoints'
// coordinates, every figure measured (this plan's, then the Prior's),
// the chains ranked; nil when the endpoints could not be placed.
func (r *planRun) learnt() *Prior {
	if !validCoord(r.l.coord[r.clientID]) || !validCoord(r.l.coord[r.dstID]) {
		return nil
	}
	next := &Prior{Client: r.l.coord[r.clientID], Destination: r.l.coord[r.dstID]}
	for k, f := range r.l.pairs {
		u, v := pairOf(k)
		ms := f.measuredMs
		if ms == 0 && !f.failed && !r.l.down[u] && !r.l.down[v] {
			ms = f.earlierMs
		}
		if ms > 0 {
			a, b := r.l.name[u], r.l.name[v]
			next.Pairs = append(next.Pairs, Measured{A: min(a, b), B: max(a, b), RTTMs: ms})
		}
	}
	slices.SortFunc(next.Pairs, func(x, y Measured) int { return cmp.Or(cmp.Compare(x.A, y.A), cmp.Compare(x.B, y.B)) })
	for _, pl := range append([]planner.Plan{r.res.Best}, r.res.Alternatives...) {
		if len(pl.Chain) > 0 {
			next.Chains = append(next.Chains, slices.Clone(pl.Chain))
		}
	}
	return next
}

// tally fills in the Stats of the answer: what it learnt, the relays
// unreachable, its segments by source.
func (r *planRun) tally() {
	r.st.Prior = r.learnt()
	for id, down := range r.l.down {
		if down {
			r.st.Unreachable = append(r.st.Unreachable, r.l.name[id])
		}
	}
	slices.Sort(r.st.Unreachable)
	for _, seg := range r.res.Best.Segments {
		if seg.Estimated {
			r.st.Estimated++
		} else {
			r.st.Measured++
		}
	}
}
