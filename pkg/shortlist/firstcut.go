package shortlist

import (
	"math"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/planner"
)

// startCosts starts costing the pairs of placed relays for the first
// cut's ranking (pairCosts): n²/2 estimates, most of a plan's
// computation at thousands of relays. They hang on the relays'
// coordinates alone, so they are computed while the first round's
// probes are out.
func (r *planRun) startCosts() {
	all := placedSpace(r.in.Relays)
	ready := make(chan []float32, 1)
	r.sp, r.costsReady = all, ready
	r.costsFrom = r.waited()
	go func() { ready <- all.pairCosts() }()
}

// priorChains is what a replan's first round measures besides the first
// cut's ends (recheck): the direct path and the segments of the chains
// the Prior ranked (of relays still in the fleet), measured again, not
// taken from the Prior. Their relays are candidates whatever the ranking
// says (kept): the last plan's answer is the chain to beat, and its
// relays were often found by its rounds (a bottleneck's neighbours), not
// by the ranking.
func (r *planRun) priorChains() {
	if r.prior == nil {
		return
	}
	client, dst := r.client, r.dst
	r.recheck = append(r.recheck, r.batch...) // the direct path
	seen := map[[2]string]bool{key(client, dst): true}
	for _, chain := range r.prior.Chains {
		if slices.ContainsFunc(chain, func(name string) bool { _, ok := r.placed[name]; return !ok }) {
			continue
		}
		for _, name := range chain {
			if !slices.Contains(r.kept, name) {
				r.kept = append(r.kept, name)
			}
		}
		hops := slices.Concat([]string{client}, chain, []string{dst})
		for i := 1; i < len(hops); i++ {
			if k := key(hops[i-1], hops[i]); !seen[k] {
				seen[k] = true
				r.recheck = append(r.recheck, r.orient(hops[i-1], hops[i]))
			}
		}
	}
}

// rankFirstCut picks the first cut (r.cands): the relays on the chains
// with the lowest estimated cost (see rankCandidates), of the placed
// relays the first round left reachable, and the kept ones.
func (r *planRun) rankFirstCut() {
	client, dst := r.client, r.dst
	blockedFrom := time.Now()
	tri := <-r.costsReady
	if _, ok := r.p.(Clock); ok {
		// A real round's wait hides the pairs' costs up to its length; the
		// model's clock does not wait, so the plan waited for them here.
		r.st.Hidden = min(time.Since(blockedFrom), r.waited()-r.costsFrom)
	}
	sp := r.sp
	sp.off = make([]bool, sp.n())
	reachable := 0
	fromClient, toDst := make([]float64, sp.n()), make([]float64, sp.n())
	for i, name := range sp.name {
		a, _, okA := r.rtt(client, name)
		b, _, okB := r.rtt(name, dst)
		if !okA || !okB {
			sp.off[i] = true
			a, b = math.Inf(1), math.Inf(1)
		} else {
			reachable++
		}
		fromClient[i], toDst[i] = a, b
	}
	r.at = make(map[string]int, sp.n())
	for i, name := range sp.name {
		r.at[name] = i
	}
	for k, f := range r.l.pairs {
		a, b := pairOf(k)
		u, okU := r.at[r.l.name[a]]
		v, okV := r.at[r.l.name[b]]
		if f.exactMs > 0 && okU && okV {
			sp.addExact(u, v, f.exactMs)
		}
	}
	directMs, _, okDirect := r.rtt(client, dst)
	if !okDirect {
		directMs = math.Inf(1)
	}
	r.directMs = directMs
	r.hops = r.in.Request.Constraints.MaxHops
	if r.hops == 0 {
		r.hops = planner.DefaultMaxHops
	}
	r.site = siteLimit{perSite: r.cfg.PerSite, radius: r.cfg.SiteRadius}
	firstCut, candidates := r.cfg.sizes(reachable)
	r.candidates = candidates
	r.wide = sp.rankCandidates(fromClient, toDst, r.directMs, r.hops, max(firstCut, candidates), r.site, tri)
	for _, v := range r.wide {
		r.cands = append(r.cands, sp.name[v])
	}
	r.keep()
	r.st.FirstCut = slices.Clone(r.cands)
}

// keep adds the kept relays the candidates lack, and sorts them.
func (r *planRun) keep() {
	for _, name := range r.kept {
		if !slices.Contains(r.cands, name) {
			r.cands = append(r.cands, name)
		}
	}
	slices.Sort(r.cands)
	r.st.Candidates = len(r.cands)
}

// measureEnds is round 2: every candidate's segments to the client and
// to the destination. The endpoints' coordinates are fitted from a few
// landmarks, the least accurate estimates there are, and those are the
// first and last segments of every chain. (A replan knows most of them
// from its Prior; its round measures the rest, and recheck.)
func (r *planRun) measureEnds() error {
	client, dst := r.client, r.dst
	r.batch = append(r.batch[:0], r.recheck...)
	for _, c := range r.cands {
		if _, est, _ := r.rtt(client, c); est {
			r.batch = append(r.batch, Probe{From: client, To: c})
		}
		if _, est, _ := r.rtt(c, dst); est {
			if r.in.DestinationProbes {
				r.batch = append(r.batch, Probe{From: dst, To: c})
			} else {
				r.batch = append(r.batch, Probe{From: c, To: dst})
			}
		}
	}
	// The first cut is described while its ends are probed.
	if err := r.probeDescribing(r.batch, r.cands); err != nil {
		return err
	}
	// The landmarks that answered late rank the first cut too.
	if err := r.late(false); err != nil {
		return err
	}
	// The search budget counts from here: the first cut's ends are in.
	r.searchFrom = r.elapsed()
	return nil
}

// rankOnEnds ranks a first cut larger than the candidates again on its
// measured ends: the candidates are its best Candidates.
func (r *planRun) rankOnEnds() {
	if len(r.cands) <= r.candidates {
		return
	}
	client, dst := r.client, r.dst
	sub := r.sp.subset(r.wide, r.cfg.Caution)
	var fc, td []float64
	for _, name := range sub.name {
		a, estA, okA := r.rtt(client, name)
		b, estB, okB := r.rtt(name, dst)
		if !okA || !okB {
			a, b = math.Inf(1), math.Inf(1)
		}
		// An end still in flight (a LateProber's straggler) is an
		// estimate, as cautious as the pairs between relays.
		if estA {
			a *= sub.scale
		}
		if estB {
			b *= sub.scale
		}
		fc, td = append(fc, a), append(td, b)
	}
	r.cands = r.cands[:0]
	for _, v := range sub.rankCandidates(fc, td, r.directMs, r.hops, r.candidates, r.site, nil) {
		r.cands = append(r.cands, sub.name[v])
	}
	r.keep()
}
