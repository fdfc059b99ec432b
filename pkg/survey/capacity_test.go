package survey

import (
	"slices"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/packettrain"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// Only relay-to-relay segments whose capacity is unknown are asked for,
// each send once, by its sender in the plan's direction.
func TestUnknownCapacities(t *testing.T) {
	unknown := []string{planner.UnknownCapacity}
	plans := []planner.Plan{
		{Segments: []planner.Segment{
			{From: ClientNode, To: "r1", Unknown: unknown},
			{From: "r1", To: "r2", Unknown: unknown},
			{From: "r2", To: "srv", Unknown: unknown},
		}},
		{Segments: []planner.Segment{
			{From: "r1", To: "r2", Unknown: unknown},
			{From: "r2", To: "r3", Unknown: []string{planner.UnknownWindow}},
			{From: "r3", To: "r4", Unknown: unknown},
		}},
	}
	isRelay := func(n string) bool { return n != ClientNode && n != "srv" }
	for _, tc := range []struct {
		dir  planner.Direction
		want []CapacityAsk
	}{
		{planner.Down, []CapacityAsk{{"r2", "r1"}, {"r4", "r3"}}},
		{planner.Up, []CapacityAsk{{"r1", "r2"}, {"r3", "r4"}}},
		{planner.Both, []CapacityAsk{{"r2", "r1"}, {"r1", "r2"}, {"r4", "r3"}, {"r3", "r4"}}},
	} {
		if got := UnknownCapacities(plans, tc.dir, isRelay); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.dir, got, tc.want)
		}
	}
	var many []planner.Segment
	for i := range 20 {
		many = append(many, planner.Segment{From: string(rune('a' + i)), To: string(rune('b' + i)), Unknown: unknown})
	}
	if got := UnknownCapacities([]planner.Plan{{Segments: many}}, planner.Down, isRelay); len(got) != MaxCapacityAsks {
		t.Errorf("%d asks, want at most %d", len(got), MaxCapacityAsks)
	}
}

// An answer lands on the sender's side of the pair, as a probe's, and a
// probed rate published in the registry reaches the planner as one.
func TestProbedRateInMatrix(t *testing.T) {
	m := &planner.Matrix{Pairs: []planner.Pair{{A: "r1", B: "r2", RTTMs: 10}}}
	if !setProbed(m, CapacityAsk{Sender: "r2", Receiver: "r1"}, packettrain.Answer{SendBps: 9e7, AgeSec: 3}) {
		t.Fatal("no pair set")
	}
	if p := m.Pairs[0]; p.BSendBps != 9e7 || p.BSendAgeSec != 3 || p.BSendSource != planner.LearntFromProbe || p.ASendBps != 0 {
		t.Errorf("pair %+v; want r2's (b's) send rate 9e7 from the probe, 3 s old", p)
	}
	if setProbed(m, CapacityAsk{Sender: "r2", Receiver: "r3"}, packettrain.Answer{SendBps: 1}) {
		t.Error("set a pair the matrix does not have")
	}
	for src, want := range map[string]string{"": planner.LearntFromTunnels, registry.SendFromProbe: planner.LearntFromProbe} {
		if got := sendSourceOf(registry.Pair{SendBps: 1, SendSource: src}); got != want {
			t.Errorf("registry source %q: planner source %q, want %q", src, got, want)
		}
	}
}

// A sender this host did not reach is asked through the relays that reach
// it, the fewest, starting from one this host reached.
func TestCapacityPath(t *testing.T) {
	relays := map[string]registry.Relay{}
	for _, n := range []string{"r1", "r2", "r3", "r4"} {
		relays[n] = registry.Relay{Name: n, Admin: n + ":9090"}
	}
	sr := &Result{Relays: relays, Matrix: &planner.Matrix{Pairs: []planner.Pair{
		{A: ClientNode, B: "r1", RTTMs: 1},
		{A: ClientNode, B: "r4", RTTMs: 1},
		{A: "r1", B: "r2", RTTMs: 1},
		{A: "r2", B: "r3", RTTMs: 1},
		{A: "r4", B: "r3", RTTMs: 1, Loss: 1}, // unreachable
	}}}
	for sender, want := range map[string][]string{"r1": {"r1"}, "r2": {"r1", "r2"}, "r3": {"r1", "r2", "r3"}} {
		ap := capacityPath(sr, sender)
		if got := append([]string{ap.first.Name}, ap.via...); !slices.Equal(got, want) {
			t.Errorf("%s: asked through %v, want %v", sender, got, want)
		}
	}
}
