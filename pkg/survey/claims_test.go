package survey

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/planner"
)

// A relay answering every shortlist probe with 1 ms (to the destination
// and to its peers) used to be believed: the plan went through it. Its
// claims are now checked against what this host and the relays that
// measured it saw, dropped, and noted; the plan is the true matrix's.
func TestShortlistDropsDoubtedClaims(t *testing.T) {
	f := newPlaneFleet(t, 12) // all within the first cut: every relay probes the destination
	honest := f.oracle(t)
	// The liar: a relay the honest plan does not take, the one nearest
	// the straight path; it answers 1 ms to everything.
	others := slices.DeleteFunc(slices.Clone(f.reg.relays), func(r registry.Relay) bool { return slices.Contains(honest, r.Name) })
	detour := func(r registry.Relay) float64 { return f.distance("client", r.Admin) + f.distance(r.Admin, planeDst) }
	liar := slices.MinFunc(others, func(a, b registry.Relay) int { return cmp.Compare(detour(a), detour(b)) })
	f.lies = map[string]float64{liar.Admin: 1}
	// Every relay measured its three nearest peers and published it, as
	// relays in probe mode coordinates do.
	publishNearest(f, 3, 1)
	s := f.survey(ModeShortlist)
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1 // every answer in its round, as in TestSurveyShortlistsALargeFleet
	s.Timeout = 30 * time.Second
	res, err := s.Run(context.Background(), planeDst)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Matrix.Pairs {
		if (p.A == liar.Name || p.B == liar.Name) && !p.Estimated && p.RTTMs == 1 {
			t.Errorf("the liar's claim is in the matrix: %+v", p)
		}
	}
	notes := strings.Join(res.Notes, "\n")
	if !strings.Contains(notes, liar.Name+" -> "+planeDst+": "+liar.Name+" claims 1.00 ms") || !strings.Contains(notes, "claim dropped") {
		t.Errorf("notes %q: want the liar's claim to the destination dropped", notes)
	}
	plan, err := planner.Search(res.Matrix, planner.Request{Client: ClientNode, Destination: planeDst})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Best.Chain, honest) {
		t.Errorf("plan %v, the true matrix's %v (the liar: %s)", plan.Best.Chain, honest, liar.Name)
	}
	t.Logf("plan %v; liar %s; notes:\n%s", plan.Best.Chain, liar.Name, notes)
}

// Honest relays whose answers carry ordinary noise (here up to ±10 % of
// the RTT, more than a handshake's median varies on a quiet path) are
// never doubted: a claim is refused only below a floor that needs a
// detour more than halving two witnesses' own paths, which noise of a few
// per cent cannot make.
func TestShortlistBelievesHonestNoise(t *testing.T) {
	f := newPlaneFleet(t, 40)
	f.noise = 0.10
	// Every relay published its measurements of its three nearest, 5 %
	// over the truth: witnesses for many claims.
	publishNearest(f, 3, 1.05)
	s := f.survey(ModeShortlist)
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1
	s.Timeout = 30 * time.Second
	res, err := s.Run(context.Background(), planeDst)
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(res.Notes, "\n"); strings.Contains(notes, "claim dropped") {
		t.Errorf("an honest relay's claim was dropped:\n%s", notes)
	}
}

// publishNearest makes every relay of f publish its measurement of its k
// nearest peers, the true RTT times scale.
func publishNearest(f *planeFleet, k int, scale float64) {
	now := time.Now()
	for _, a := range f.reg.relays {
		near := slices.Clone(f.reg.relays)
		slices.SortFunc(near, func(x, y registry.Relay) int {
			return cmp.Compare(f.distance(a.Admin, x.Admin), f.distance(a.Admin, y.Admin))
		})
		for _, b := range near[1 : k+1] {
			f.reg.pairs = append(f.reg.pairs, registry.Pair{From: a.Name, To: b.Name, RTTMs: f.distance(a.Admin, b.Admin) * scale, Samples: 5, UpdatedAt: now})
		}
	}
}

// A relay caught in one lie loses its other claims too: here its claim to
// the destination is refuted by two witnesses, and its claim to a relay at
// about the same RTT from both, which no triangle can refute, is dropped
// with it.
func TestDoubtedRelayLosesItsOtherClaims(t *testing.T) {
	answer := func(from, to string, ms float64) shortlist.Answer {
		return shortlist.Answer{Probe: shortlist.Probe{From: from, To: to}, RTTMs: ms}
	}
	answers := []shortlist.Answer{
		answer(ClientNode, "liar", 10), answer(ClientNode, "y", 12), answer(ClientNode, "dst", 100),
		answer("w", "liar", 10), answer("w", "y", 12), answer("w", "dst", 100),
		answer("liar", "dst", 1), // both witnesses allow no less than 40 ms
		answer("liar", "y", 1),   // both allow 0 ms: believable alone
	}
	m := &planner.Matrix{}
	for _, a := range answers {
		m.Pairs = append(m.Pairs, planner.Pair{A: a.Probe.From, B: a.Probe.To, RTTMs: a.RTTMs})
	}
	notes := dropDoubtedClaims(m, nil, answers, nil, ClientNode)
	for _, p := range m.Pairs {
		if p.A == "liar" {
			t.Errorf("the liar's claim %s -> %s (%v ms) is in the matrix; notes:\n%s", p.A, p.B, p.RTTMs, strings.Join(notes, "\n"))
		}
	}
	if len(m.Pairs) != 6 || len(notes) != 2 {
		t.Errorf("%d pairs left (want the 6 witnesses' own), %d notes (want 2): %v", len(m.Pairs), len(notes), notes)
	}
}
