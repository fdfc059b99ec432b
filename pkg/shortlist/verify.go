package shortlist

import "github.com/relaymesh/relaymesh/planner"

// verify re-measures, with Config.VerifyHandshakes handshakes each, the
// bottleneck segments the answer was chosen on, its own and its close
// runners-up's, and plans again on those figures. The rounds choose on
// one handshake a probe (Config.Handshakes), and among thousands of pairs
// the one a plan ends on is the one whose reading was luckiest: a
// handshake that read low, or the better chain's that met a queue. Only
// the segments that decide are measured again, a handful of probes.
//
// No pass is made that would end past the deadline, but the search budget
// does not bound them: it bounds the search. Held to it (the rounds
// leaving room for a pass before it ends), checking cost the plans the
// search rounds it displaced and planned no better in the simulator;
// after it, a pass or two of a round's length planned markedly better
// (docs/defaults.md#verifying-the-answer).
func (r *planRun) verify() error {
	if hasEstimate(r.res.Best) {
		return nil
	}
	for pass := 0; pass < r.cfg.VerifyPasses; pass++ {
		batch := r.deciding()
		if len(batch) == 0 || r.pastDeadline(batch) {
			return nil
		}
		if err := r.probe(batch); err != nil {
			return err
		}
		// The pass's own probes are awaited; a straggler of an
		// earlier round that has answered by now joins too.
		if err := r.late(false); err != nil {
			return err
		}
		r.st.Verified += len(batch)
		if err := r.searchAgain(true); err != nil {
			return err
		}
	}
	return nil
}

// deciding are the probes verify makes, each awaited: every segment of
// the best plan, each of which could be its bottleneck once the others
// read true, and every segment of each runner-up within VerifyMargin of it, where those
// figures are measurements (this plan's or its Prior's) not yet verified.
func (r *planRun) deciding() []Probe {
	if r.cfg.VerifyHandshakes <= r.cfg.Handshakes || r.res == nil {
		return nil
	}
	var batch []Probe
	seen := map[[2]string]bool{}
	add := func(s planner.Segment) {
		k := key(s.From, s.To)
		if s.Estimated || seen[k] || r.pending[k] || r.l.at(s.From, s.To).verified {
			return
		}
		seen[k] = true
		pr := r.orient(s.From, s.To)
		pr.Handshakes = r.cfg.VerifyHandshakes
		// The pass waits for each: the longest, which a quorum
		// would leave out, is the bottleneck it is made for.
		pr.Awaited = true
		batch = append(batch, pr)
	}
	for _, s := range r.res.Best.Segments {
		add(s)
	}
	for _, pl := range r.res.Alternatives {
		if pl.Bottleneck >= 0 && within(pl, r.res.Best, r.cfg.VerifyMargin) {
			for _, s := range pl.Segments {
				add(s)
			}
		}
	}
	return batch
}
