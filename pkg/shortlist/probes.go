package shortlist

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/planner"
)

// waited is the Clock's time, none for a Prober that takes it.
func (r *planRun) waited() time.Duration {
	if c, ok := r.p.(Clock); ok {
		return c.Waited()
	}
	return 0
}

// elapsed is the plan's time since it began: the wall clock's and the
// Clock's, less what Stats.Hidden says a real round would have hidden.
func (r *planRun) elapsed() time.Duration {
	return time.Since(r.began) + r.waited() - r.st.Hidden
}

// record takes in a probe's value: a figure, a failure, or a probe still
// in flight.
func (r *planRun) record(b Probe, ms float64) {
	k := key(b.From, b.To)
	switch {
	case Pending(ms):
		r.pending[k] = true
		return
	case ms > 0:
		verified := r.cfg.VerifyHandshakes > r.cfg.Handshakes && b.Handshakes >= r.cfg.VerifyHandshakes
		r.l.update(b.From, b.To, func(f *sources) { f.measuredMs, f.verified = ms, verified })
	default:
		r.l.update(b.From, b.To, func(f *sources) { f.failed = true })
		if b.From == r.client && b.To != r.dst {
			r.l.down[r.l.intern(b.To)] = true
		}
	}
	delete(r.pending, k)
}

// rtt is the best figure known for a pair (see ledger.rtt); asked only
// once the plan is placed.
func (r *planRun) rtt(a, b string) (ms float64, estimated, ok bool) {
	return r.l.rtt(r.l.intern(a), r.l.intern(b))
}

// lengthMs is how long a probe takes, by the best figures known: the
// round trip of asking its maker (none for this host's own) and its
// handshakes.
func (r *planRun) lengthMs(pr Probe) float64 {
	ms, _, _ := r.rtt(pr.From, pr.To)
	ms *= float64(max(pr.Handshakes, 1))
	if pr.From != r.client {
		ask, _, _ := r.rtt(r.client, pr.From)
		ms += ask
	}
	return ms
}

// roundMs foresees how long a round of batch lasts (Config.Deadline):
// the quorum's longest of its requests, a relay's probes one request
// as long as its longest, or an awaited probe's (Probe.Awaited) if
// longer.
func (r *planRun) roundMs(batch []Probe) float64 {
	byMaker := map[string]float64{}
	var reqs []float64
	awaitedMs := 0.0
	for _, pr := range batch {
		if r.pending[key(pr.From, pr.To)] {
			continue
		}
		pr.Handshakes = max(pr.Handshakes, r.cfg.Handshakes)
		ms := r.lengthMs(pr)
		if pr.Awaited {
			awaitedMs = max(awaitedMs, ms)
		}
		if pr.From == r.client {
			reqs = append(reqs, ms)
		} else {
			byMaker[pr.From] = max(byMaker[pr.From], ms)
		}
	}
	reqs = slices.AppendSeq(reqs, maps.Values(byMaker))
	if len(reqs) == 0 {
		return 0
	}
	slices.Sort(reqs)
	return max(reqs[r.cfg.RoundNeedsAt(2, len(reqs))-1], awaitedMs)
}

// probe makes one round of batch's probes and records their values.
func (r *planRun) probe(batch []Probe) error {
	if len(batch) == 0 {
		return nil
	}
	// A pair in flight since an earlier round is not asked again.
	batch = slices.DeleteFunc(batch, func(b Probe) bool { return r.pending[key(b.From, b.To)] })
	if len(batch) == 0 {
		return nil
	}
	for i := range batch {
		// A probe verify makes comes with more handshakes.
		batch[i].Handshakes = max(batch[i].Handshakes, r.cfg.Handshakes)
		if r.ready {
			batch[i].ExpectMs, _, _ = r.rtt(batch[i].From, batch[i].To)
		}
	}
	// The longest probes first (lengthMs): the Prober has a bounded
	// number in flight and the round lasts until its last one, so a
	// long probe started late is the round's tail.
	if r.ready {
		// Each probe's length once, not once a comparison: sorting
		// a round of thousands of probes by map lookups was several
		// per cent of a plan's computation at 5,000 relays.
		type long struct {
			pr Probe
			ms float64
		}
		byLength := make([]long, len(batch))
		for i, pr := range batch {
			byLength[i] = long{pr, r.lengthMs(pr)}
		}
		slices.SortStableFunc(byLength, func(x, y long) int { return cmp.Compare(y.ms, x.ms) })
		for i, l := range byLength {
			batch[i] = l.pr
		}
	}
	rtts, err := r.p.Probe(r.ctx, batch)
	if err != nil {
		return err
	}
	if len(rtts) != len(batch) {
		return fmt.Errorf("shortlist: the prober answered %d of %d probes", len(rtts), len(batch))
	}
	r.st.Probes += len(batch)
	r.st.Rounds++
	for i, b := range batch {
		r.record(b, rtts[i])
	}
	return nil
}

// late takes in the probes of earlier rounds that answered since
// (all of those in flight, with wait).
func (r *planRun) late(wait bool) error {
	lp, ok := r.p.(LateProber)
	if !ok || len(r.pending) == 0 {
		return nil
	}
	answers, err := lp.Late(r.ctx, wait)
	for _, a := range answers {
		r.record(a.Probe, a.RTTMs)
	}
	return err
}

// orient says which end of a segment measures it: the client its own
// segment, a relay its segment to the destination (unless the
// destination makes probes); between relays the end nearer the
// client (by the best figure known), whom the client asks: a relay's
// probe costs the round trip of asking it too.
func (r *planRun) orient(a, b string) Probe {
	client, dst := r.client, r.dst
	switch {
	case b == client, a == dst && !r.in.DestinationProbes:
		return Probe{From: b, To: a}
	case a == client, b == dst && !r.in.DestinationProbes:
		return Probe{From: a, To: b}
	}
	ma, _, okA := r.rtt(client, a)
	mb, _, okB := r.rtt(client, b)
	if okB && (!okA || mb < ma) {
		return Probe{From: b, To: a}
	}
	return Probe{From: a, To: b}
}

// unmeasured says a segment's figure is not this plan's measurement:
// an estimate, or the Prior's (published pairs count as measured).
func (r *planRun) unmeasured(s planner.Segment) bool {
	f := r.l.at(s.From, s.To)
	return s.Estimated || f.measuredMs == 0 && f.earlierMs > 0
}

// unsettled says a plan rests on a figure this plan did not measure.
func (r *planRun) unsettled(p planner.Plan) bool {
	return slices.ContainsFunc(p.Segments, r.unmeasured)
}
