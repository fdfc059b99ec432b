package shortlist

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/coord"
)

// landmarksRound is round 1: the landmarks and the direct path; a replan
// has none (its direct path is measured in its first round: see
// priorChains). It leaves the direct path in r.batch.
func (r *planRun) landmarksRound() error {
	client, dst := r.client, r.dst
	r.batch = []Probe{{From: client, To: dst}}
	r.dstPlaced = validCoord(r.in.DestinationCoord)
	if r.prior != nil {
		return nil
	}
	r.landmarks = coord.Landmarks(r.peers, r.cfg.Landmarks, rand.New(rand.NewPCG(r.cfg.Seed, uint64(len(r.peers)))))
	for _, lm := range r.landmarks {
		r.batch = append(r.batch, Probe{From: client, To: lm.Name})
		switch {
		case r.dstPlaced:
		case r.in.DestinationProbes:
			r.batch = append(r.batch, Probe{From: dst, To: lm.Name})
		default:
			r.batch = append(r.batch, Probe{From: lm.Name, To: dst})
		}
	}
	if err := r.probe(r.batch); err != nil {
		return err
	}
	// The fits need enough landmarks: with fewer than minFitLandmarks
	// (or three in four of fewer landmarks) answered for an end, wait
	// for those in flight.
	if r.short(client) || !r.dstPlaced && r.short(dst) {
		return r.late(true)
	}
	return nil
}

// short says fewer landmarks answered for end than its fit waits for.
func (r *planRun) short(end string) bool {
	n := 0
	for _, lm := range r.landmarks {
		if f := r.l.at(end, lm.Name); f.measuredMs > 0 || f.failed {
			n++
		}
	}
	return n < min(minFitLandmarks, (3*len(r.landmarks)+3)/4)
}

// fit is end's coordinate fitted to its landmarks' RTTs; nil when it
// cannot be.
func (r *planRun) fit(end string) *coordinate.Coordinate {
	var ls []coord.Landmark
	for _, lm := range r.landmarks {
		if ms := r.l.at(end, lm.Name).measuredMs; ms > 0 {
			ls = append(ls, coord.Landmark{Coord: lm.Coord, RTTMs: ms})
		}
	}
	c, err := coord.Fit(ls, r.cfg.Vivaldi)
	if err != nil {
		return nil
	}
	return c
}

// place gives the ledger the endpoints' coordinates (the Prior's, the
// destination's known one, or fitted), the relays', the pairs they
// published (Input.Published read now) and the Prior's measurements: from
// here on rtt can be asked.
func (r *planRun) place() error {
	client, dst := r.client, r.dst
	r.clientID, r.dstID = r.l.intern(client), r.l.intern(dst)
	switch {
	case r.prior != nil:
		r.l.coord[r.clientID], r.l.coord[r.dstID] = r.prior.Client, r.prior.Destination
	case r.dstPlaced:
		r.l.coord[r.clientID], r.l.coord[r.dstID] = r.fit(client), r.in.DestinationCoord
	default:
		r.l.coord[r.clientID], r.l.coord[r.dstID] = r.fit(client), r.fit(dst)
	}
	for _, pe := range r.peers {
		r.l.coord[r.l.intern(pe.Name)] = pe.Coord
	}
	exact := r.in.Exact
	if r.in.Published != nil {
		more, err := r.in.Published(r.ctx)
		if err != nil {
			return fmt.Errorf("shortlist: reading the relays' measurements: %w", err)
		}
		exact = slices.Concat(exact, more)
	}
	for _, e := range exact {
		if !e.Estimated && e.RTTMs > 0 {
			r.l.update(e.A, e.B, func(f *sources) { f.exactMs = e.RTTMs })
		}
	}
	// The Prior's measurements, the first of a pair's.
	if r.prior != nil {
		for _, e := range r.prior.Pairs {
			if e.RTTMs > 0 {
				r.l.update(e.A, e.B, func(f *sources) { f.earlierMs = cmp.Or(f.earlierMs, e.RTTMs) })
			}
		}
	}
	r.ready = true
	return nil
}
