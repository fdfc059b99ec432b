package survey

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/planner"
)

// A shortlist plan believes what the relays it asks answer: each relay's
// RTT to the destination and to its peers is its own word, and one relay
// that answers 1 ms to everything would pull the plan through itself. So
// every answer is kept (recordingProber), and once the plan is made each
// relay's answer is checked by the triangle (triangle.go) against what the
// other nodes measured themselves: this host's own probes (of the relays,
// and of the destination: the direct path), the other relays' answers in
// this plan and their published measurements. A claim not believed is
// dropped from the matrix (no segment of the plan), noted, and left out
// of what a replan starts from.

// recordingProber is the survey's prober that keeps every answer it hands
// the plan (in rounds and late), for the check once the plan is made.
type recordingProber struct {
	*surveyProber
	mu      sync.Mutex
	answers []shortlist.Answer // answered probes only (RTTMs > 0)
}

func (r *recordingProber) Probe(ctx context.Context, probes []shortlist.Probe) ([]float64, error) {
	out, err := r.surveyProber.Probe(ctx, probes)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ms := range out {
		if i < len(probes) && ms > 0 { // NaN (pending) and failures are not answers
			r.answers = append(r.answers, shortlist.Answer{Probe: probes[i], RTTMs: ms})
		}
	}
	return out, err
}

func (r *recordingProber) Late(ctx context.Context, wait bool) ([]shortlist.Answer, error) {
	late, err := r.surveyProber.Late(ctx, wait)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range late {
		if a.RTTMs > 0 {
			r.answers = append(r.answers, a)
		}
	}
	return late, err
}

// recorded returns the answers so far, in the order they came.
func (r *recordingProber) recorded() []shortlist.Answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.answers)
}

// dropDoubtedClaims checks every relay's answer of a shortlist plan
// (answers, in the order they came: the newest of a pair counts) against
// the witnesses (this host, client, and the relays: their answers and
// their published measurements, pairs), drops from m each claim not
// believed (the measured pair of that value) and from prior (what a
// replan starts from; may be nil), and returns a note for each. A relay
// with one claim not believed has lied: its other claims are dropped too,
// believed or not. The triangle cannot refute a claim between two relays
// at about the same RTT from every witness, and a liar's word on those is
// worth no more than on the rest.
func dropDoubtedClaims(m *planner.Matrix, prior *shortlist.Prior, answers []shortlist.Answer, pairs []registry.Pair, client string) []string {
	own := ownRTTs(pairs)
	claims := map[[2]string]float64{}
	var order [][2]string
	for _, a := range answers {
		k := [2]string{a.Probe.From, a.Probe.To}
		own[k] = a.RTTMs
		if a.Probe.From == client {
			continue // this host's own: the witness, never doubted
		}
		if _, seen := claims[k]; !seen {
			order = append(order, k)
		}
		claims[k] = a.RTTMs
	}
	witnesses := map[string]bool{}
	for k := range own {
		witnesses[k[0]] = true
	}
	var notes []string
	liars := map[string]bool{}
	dropped := map[[2]string]bool{}
	for _, k := range order {
		from, to, claimMs := k[0], k[1], claims[k]
		var ws []witness
		for w := range witnesses {
			ws = append(ws, witness{name: w, toClaimantMs: own[[2]string{w, from}], toTargetMs: own[[2]string{w, to}]})
		}
		bad, doubted := checkClaim(from, to, claimMs, ws)
		if !doubted {
			continue
		}
		notes = append(notes, bad.note())
		liars[from], dropped[k] = true, true
		dropClaim(m, prior, from, to, claimMs)
	}
	for _, k := range order {
		if from, to := k[0], k[1]; liars[from] && !dropped[k] {
			notes = append(notes, fmt.Sprintf("%s -> %s: %s claims %.2f ms; dropped with the rest of %s's claims, one of which was not believed", from, to, from, claims[k], from))
			dropClaim(m, prior, from, to, claims[k])
		}
	}
	return notes
}

// dropClaim removes from m, and from prior (may be nil), the measured
// pair {from, to} whose figure is claimMs: the claim's.
func dropClaim(m *planner.Matrix, prior *shortlist.Prior, from, to string, claimMs float64) {
	same := func(a, b string, ms float64) bool {
		return ms == claimMs && (a == from && b == to || a == to && b == from)
	}
	m.Pairs = slices.DeleteFunc(m.Pairs, func(p planner.Pair) bool { return !p.Estimated && same(p.A, p.B, p.RTTMs) })
	if prior != nil {
		prior.Pairs = slices.DeleteFunc(prior.Pairs, func(p shortlist.Measured) bool { return same(p.A, p.B, p.RTTMs) })
	}
}
