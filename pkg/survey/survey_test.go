package survey

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

func TestResolveTarget(t *testing.T) {
	relays := []registry.Relay{
		{Name: "tokyo-1", Region: "tokyo", Admin: "10.0.0.1:9090"},
		{Name: "osaka", Region: "osaka", Admin: "10.0.0.2:9090"},
		{Name: "os2", Region: "osaka", Admin: "10.0.0.3:9090"},
	}
	tg, err := ResolveTarget("srv.example:443", relays)
	if err != nil || tg.Addr != "srv.example:443" || tg.Name != "srv.example:443" || tg.Relay != "" {
		t.Fatalf("host:port: %+v %v", tg, err)
	}
	// A region is a host next to its relay: the relay's admin address,
	// under a node name apart from the relay's.
	tg, err = ResolveTarget("Tokyo", relays)
	if err != nil || tg.Addr != "10.0.0.1:9090" || tg.Relay != "tokyo-1" || tg.Name != "dst:Tokyo" {
		t.Fatalf("region: %+v %v", tg, err)
	}
	if _, err := ResolveTarget("osaka", relays); err == nil || !strings.Contains(err.Error(), "os2, osaka") {
		t.Fatalf("ambiguous region: %v", err)
	}
	if _, err := ResolveTarget("paris", relays); err == nil || !strings.Contains(err.Error(), "regions: osaka, tokyo") {
		t.Fatalf("unknown: %v", err)
	}
}

func TestRelayPairsNewestOfBothDirections(t *testing.T) {
	now := time.Unix(1000, 0)
	usable := map[string]registry.Relay{"a": {}, "b": {}, "c": {}}
	pairs := []registry.Pair{
		// a learnt 2 % loss from what it sent to b; b sent nothing to a.
		// b's tunnels to a sustained 40 Mbit/s.
		{From: "a", To: "b", RTTMs: 10, Samples: 5, Loss: 0.02, LossLearnt: true, UpdatedAt: now.Add(-30 * time.Second)},
		{From: "b", To: "a", RTTMs: 11, Samples: 5, SendBps: 40e6, SendAt: now.Add(-time.Minute), UpdatedAt: now.Add(-2 * time.Second)},
		{From: "a", To: "c", RTTMs: 20, Samples: 5, Loss: 1, UpdatedAt: now},               // no answer: unusable
		{From: "c", To: "b", RTTMs: 30, Estimated: true, UpdatedAt: now.Add(-time.Minute)}, // a prior: used, marked
		{From: "a", To: "gone", RTTMs: 5, Samples: 5, UpdatedAt: now},                      // not a usable relay
	}
	got, notes := relayPairs(pairs, usable, ownRTTs(pairs), now)
	if len(notes) != 0 {
		t.Fatalf("notes %q, want none", notes)
	}
	if len(got) != 2 {
		t.Fatalf("pairs %+v, want a-b and b-c", got)
	}
	if got[0].A != "a" || got[0].B != "b" || got[0].RTTMs != 11 || got[0].AgeSec != 2 || got[0].Loss != 0.02 {
		t.Fatalf("a-b: %+v, want b's newer 11 ms, 2 s old, and a's 2 %% loss", got[0])
	}
	if got[0].ALossSource != planner.LearntFromTunnels || got[0].BLossSource != "" || got[1].ALossSource != "" || got[1].BLossSource != "" {
		t.Fatalf("a-b %+v, b-c %+v: want a's sends to b learnt from tunnels, nothing else", got[0], got[1])
	}
	if got[0].BSendBps != 40e6 || got[0].BSendAgeSec != 60 || got[0].ASendBps != 0 {
		t.Fatalf("a-b: %+v, want b's learnt 40 Mbit/s to a, a minute old, and none from a", got[0])
	}
	if got[1].A != "b" || got[1].B != "c" || !got[1].Estimated || got[1].AgeSec != 60 {
		t.Fatalf("b-c: %+v", got[1])
	}
}

// A relay's learnt rate and loss to this host go on the pair between
// them, on the relay's side, whichever way round the pair is written; a
// learnt loss raises the pair's (the higher of the two ways), never lowers
// it, and a learnt 0 is an answer.
func TestApplyLearnt(t *testing.T) {
	m := &planner.Matrix{Pairs: []planner.Pair{
		{A: ClientNode, B: "r1", RTTMs: 20},
		{A: "r2", B: ClientNode, RTTMs: 30, Loss: 0.05},
		{A: "r1", B: "r2", RTTMs: 5},
		{A: ClientNode, B: "r3", RTTMs: 9},
		{A: ClientNode, B: "r4", RTTMs: 9, Loss: 1},
	}}
	applyLearnt(m, map[string]windows{"r1": {learntToUsBps: 28e6, learntToUsAgeSec: 30, learntLossToUs: 0.01, learntLossOK: true},
		"r2": {learntToUsBps: 90e6, learntLossOK: true}, "r3": {learntLossToUs: 0.2}, "r4": {learntLossToUs: 0.02, learntLossOK: true}})
	want := []planner.Pair{
		{A: ClientNode, B: "r1", RTTMs: 20, BSendBps: 28e6, BSendAgeSec: 30, Loss: 0.01, BLossSource: planner.LearntFromTunnels},
		{A: "r2", B: ClientNode, RTTMs: 30, ASendBps: 90e6, Loss: 0.05, ALossSource: planner.LearntFromTunnels},
		{A: "r1", B: "r2", RTTMs: 5},
		{A: ClientNode, B: "r3", RTTMs: 9},
		{A: ClientNode, B: "r4", RTTMs: 9, Loss: 1},
	}
	if !slices.Equal(m.Pairs, want) {
		t.Fatalf("pairs %+v, want %+v", m.Pairs, want)
	}
}

func TestTriangleFloorIsTheSecondHighest(t *testing.T) {
	if _, ok := triangleFloor(nil); ok {
		t.Fatal("a floor without witnesses")
	}
	ws := []witness{
		{name: "w1", toClaimantMs: 10, toTargetMs: 100},  // floor 40
		{name: "w2", toClaimantMs: 20, toTargetMs: 100},  // floor 30
		{name: "liar", toClaimantMs: 1, toTargetMs: 1e6}, // floor ~5e5: outvoted
	}
	if f, ok := triangleFloor(ws); !ok || f != 40 {
		t.Fatalf("floor %v %v, want the median 40", f, ok)
	}
	// Of two, the lower: a lying witness cannot condemn alone.
	if f, ok := triangleFloor(ws[1:]); !ok || f != 30 {
		t.Fatalf("floor of w2 and the liar %v %v, want w2's 30", f, ok)
	}
	// One witness, even this host, is no verdict: its own path may be a
	// bad route that an honest detour more than halves.
	if f, ok := triangleFloor(ws[:1]); ok {
		t.Fatalf("one witness gave a verdict (floor %v)", f)
	}
	if f := (witness{toClaimantMs: 80, toTargetMs: 100}).floorMs(); f != 0 {
		t.Fatalf("a witness farther from the claimant than half its path: floor %v, want 0", f)
	}
	// A claimant far from every witness, claiming to be next to a target
	// two of them are next to: the triangle's other side (X→T ≥ W→X/2 −
	// W→T) bounds it, however many witnesses far from the target see
	// nothing wrong.
	far := []witness{
		{name: "near-target-1", toClaimantMs: 250, toTargetMs: 2},  // floor 123
		{name: "near-target-2", toClaimantMs: 240, toTargetMs: 10}, // floor 110
		{name: "w3", toClaimantMs: 200, toTargetMs: 230},           // floor 0
		{name: "w4", toClaimantMs: 210, toTargetMs: 220},           // floor 0
		{name: "w5", toClaimantMs: 190, toTargetMs: 240},           // floor 0
	}
	if f, ok := triangleFloor(far); !ok || f != 110 {
		t.Fatalf("floor %v %v, want 110: two witnesses next to the target allow no less", f, ok)
	}
}

// A relay that claims to be next to everything is not believed where the
// relays around it measured otherwise: its claim is dropped, not rounded
// to the floor (the best lie the check would still believe); honest
// measurements pass, and a probed measurement of the same pair by the
// other end stands.
func TestRelayPairsTriangle(t *testing.T) {
	now := time.Unix(1000, 0)
	usable := map[string]registry.Relay{"liar": {}, "a": {}, "b": {}, "c": {}}
	m := func(from, to string, ms float64) registry.Pair {
		return registry.Pair{From: from, To: to, RTTMs: ms, Samples: 5, UpdatedAt: now}
	}
	// a, b and c are 200 ms apart; a and c see the liar at 10 ms, so
	// through it b is at least 200/2 - 10 = 90 ms away for both.
	pairs := []registry.Pair{
		m("a", "b", 200), m("a", "c", 200), m("c", "b", 200),
		m("a", "liar", 10), m("c", "liar", 10),
		m("liar", "b", 1),  // the lie
		m("liar", "a", 11), // honest
	}
	find := func(got []planner.Pair, x, y string) (planner.Pair, bool) {
		for _, p := range got {
			if (p.A == x && p.B == y) || (p.A == y && p.B == x) {
				return p, true
			}
		}
		return planner.Pair{}, false
	}
	pairOf := func(got []planner.Pair, x, y string) planner.Pair {
		p, ok := find(got, x, y)
		if !ok {
			t.Fatalf("no pair %s-%s in %+v", x, y, got)
		}
		return p
	}
	got, notes := relayPairs(pairs, usable, ownRTTs(pairs), now)
	if p, ok := find(got, "liar", "b"); ok {
		t.Fatalf("liar-b: %+v, want the claim dropped (below the witnesses' floor 90 ms)", p)
	}
	if p := pairOf(got, "a", "liar"); p.Estimated || p.RTTMs < 10 || p.RTTMs > 11 {
		t.Fatalf("a-liar (honest): %+v", p)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "liar -> b: liar claims 1.00 ms") || !strings.Contains(notes[0], "a, c") ||
		!strings.Contains(notes[0], "no less than 90.00 ms") || !strings.Contains(notes[0], "claim dropped") {
		t.Fatalf("notes %q", notes)
	}
	// b's own measurement of the liar stands.
	pairs = append(pairs, m("b", "liar", 150))
	got, _ = relayPairs(pairs, usable, ownRTTs(pairs), now)
	if p := pairOf(got, "liar", "b"); p.Estimated || p.RTTMs != 150 {
		t.Fatalf("liar-b with b's measurement: %+v, want b's 150 ms", p)
	}
	// A lie the triangle cannot see (no witness measured both ends), the
	// newest figure of the pair: the other end's higher one still stands.
	lie := registry.Pair{From: "liar", To: "c", RTTMs: 1, Samples: 5, UpdatedAt: now.Add(time.Minute)}
	honest := registry.Pair{From: "c", To: "liar", RTTMs: 120, Samples: 5, UpdatedAt: now}
	got, _ = relayPairs([]registry.Pair{lie, honest}, usable, nil, now)
	if p := pairOf(got, "liar", "c"); p.RTTMs != 120 {
		t.Fatalf("liar-c: %+v, want c's own 120 ms over the liar's newer 1 ms", p)
	}
}

// A relay's answer for a destination carries what its tunnels received
// from it: the destination's sends on that pair, learnt by the receiver.
func TestPairOfProbe(t *testing.T) {
	got := pairOfProbe("r1", "srv", probe.Summary{Samples: 3, MedianMs: 40, LearntRecvBps: 3.5e6, LearntRecvAgeSec: 12})
	want := planner.Pair{A: "r1", B: "srv", RTTMs: 40, BSendBps: 3.5e6, BSendAgeSec: 12, BSendSource: planner.LearntByReceiver}
	if got != want {
		t.Fatalf("pair %+v, want %+v", got, want)
	}
	if got := pairOfProbe("client", "r1", probe.Summary{Samples: 3, MedianMs: 20}); got.BSendBps != 0 || got.BSendSource != "" {
		t.Fatalf("a probe without a learnt rate: %+v", got)
	}
}
