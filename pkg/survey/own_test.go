package survey

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// ownSends is what a learnt.Record would say, by host, as of one moment.
type ownSends struct {
	at   time.Time
	sent map[netip.Addr]learnt.Sent
}

func (o ownSends) SentTo(host netip.Addr, now time.Time) learnt.Sent {
	if !now.Equal(o.at) {
		return learnt.Sent{} // the survey asks as of its own clock
	}
	return o.sent[host]
}

// This host's own sends go on its side of each pair with a relay or the
// destination, whichever way round the pair is written: the rate (with
// its age, from tunnels) where the pair has none or an older one, the
// loss raising the pair's, never lowering it, never on an unreachable
// pair; the destination's window where the survey knew none, with a
// note. Relay pairs and relays nothing was sent to keep theirs.
func TestApplyOwn(t *testing.T) {
	now := time.Unix(9000, 0)
	dst := "192.0.2.9:443"
	own := ownSends{at: now, sent: map[netip.Addr]learnt.Sent{
		netip.MustParseAddr("10.0.0.1"):  {RateBps: 40e6, RateAge: 30 * time.Second, Loss: 0.01, LossAge: 20 * time.Second, LossOK: true},
		netip.MustParseAddr("10.0.0.2"):  {RateBps: 50e6, RateAge: time.Minute, LossOK: true}, // a learnt 0
		netip.MustParseAddr("10.0.0.3"):  {RateBps: 60e6, RateAge: time.Minute, Loss: 0.02, LossOK: true},
		netip.MustParseAddr("10.0.0.4"):  {RateBps: 70e6, RateAge: time.Minute},
		netip.MustParseAddr("10.0.0.5"):  {RateBps: 80e6, RateAge: time.Minute},
		netip.MustParseAddr("192.0.2.9"): {RateBps: 9e6, RateAge: 5 * time.Second, Loss: 0.003, LossOK: true, WindowBytes: 256 << 10, WindowAge: 2 * time.Minute},
	}}
	relays := map[string]registry.Relay{}
	for i, name := range []string{"r1", "r2", "r3", "r4", "r5", "r6"} {
		relays[name] = registry.Relay{Name: name, Relay: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 7000).String()}
	}
	relays["r2"] = registry.Relay{Name: "r2", Relay: "[::ffff:10.0.0.2]:7000"}
	res := &Result{Relays: relays, Target: Target{Name: dst, Addr: dst}, Matrix: &planner.Matrix{
		Nodes: []planner.Node{{Name: ClientNode}, {Name: "r1", Relay: true}, {Name: dst}},
		Pairs: []planner.Pair{
			{A: ClientNode, B: "r1", RTTMs: 20},
			{A: "r2", B: ClientNode, RTTMs: 30, Loss: 0.05, ALossSource: planner.LearntFromTunnels},
			{A: ClientNode, B: "r3", RTTMs: 9, Loss: 1},
			{A: ClientNode, B: "r4", RTTMs: 9, ASendBps: 10e6, ASendAgeSec: 10},   // newer than what was learnt
			{A: ClientNode, B: "r5", RTTMs: 9, ASendBps: 10e6, ASendAgeSec: 3600}, // older
			{A: ClientNode, B: "r6", RTTMs: 9},
			{A: "r1", B: "r2", RTTMs: 5},
			{A: dst, B: ClientNode, RTTMs: 60},
		},
	}}
	s := &Survey{Own: own, Now: func() time.Time { return now }}
	s.applyOwn(context.Background(), res)
	tunnels := planner.LearntFromTunnels
	want := []planner.Pair{
		{A: ClientNode, B: "r1", RTTMs: 20, ASendBps: 40e6, ASendAgeSec: 30, ASendSource: tunnels, Loss: 0.01, ALossSource: tunnels},
		{A: "r2", B: ClientNode, RTTMs: 30, BSendBps: 50e6, BSendAgeSec: 60, BSendSource: tunnels, Loss: 0.05, ALossSource: tunnels, BLossSource: tunnels},
		{A: ClientNode, B: "r3", RTTMs: 9, Loss: 1, ASendBps: 60e6, ASendAgeSec: 60, ASendSource: tunnels},
		{A: ClientNode, B: "r4", RTTMs: 9, ASendBps: 10e6, ASendAgeSec: 10},
		{A: ClientNode, B: "r5", RTTMs: 9, ASendBps: 80e6, ASendAgeSec: 60, ASendSource: tunnels},
		{A: ClientNode, B: "r6", RTTMs: 9},
		{A: "r1", B: "r2", RTTMs: 5},
		{A: dst, B: ClientNode, RTTMs: 60, BSendBps: 9e6, BSendAgeSec: 5, BSendSource: tunnels, Loss: 0.003, BLossSource: tunnels},
	}
	for i := range want {
		if res.Matrix.Pairs[i] != want[i] {
			t.Errorf("pair %d: %+v\nwant     %+v", i, res.Matrix.Pairs[i], want[i])
		}
	}
	if n := res.Matrix.Nodes[2]; n.WindowBytes != 256<<10 {
		t.Errorf("destination node %+v: want the 256 KiB window learnt", n)
	}
	if w := res.OwnDstWindow; w == nil || w.Bytes != 256<<10 || w.AgeSec != 120 {
		t.Errorf("OwnDstWindow %+v: want 256 KiB, 120 s", w)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool {
		return strings.Contains(n, "192.0.2.9:443 advertised a 262144-byte window to this host's sends (learnt from relayctl connect's traffic, 2m0s ago)")
	}) {
		t.Errorf("notes %q: want the window's", res.Notes)
	}

	// A window the survey knew (a region's relay's host) stands.
	res.Matrix.Nodes[2].WindowBytes, res.OwnDstWindow, res.Notes = 1<<20, nil, nil
	s.applyOwn(context.Background(), res)
	if res.Matrix.Nodes[2].WindowBytes != 1<<20 || res.OwnDstWindow != nil || len(res.Notes) != 0 {
		t.Errorf("a known window: node %+v, OwnDstWindow %+v, notes %q; want it kept, no note", res.Matrix.Nodes[2], res.OwnDstWindow, res.Notes)
	}
}

// Without Own the matrix is the survey's.
func TestApplyOwnNone(t *testing.T) {
	m := &planner.Matrix{Pairs: []planner.Pair{{A: ClientNode, B: "r1", RTTMs: 20}}}
	(&Survey{}).applyOwn(context.Background(), &Result{Matrix: m, Relays: map[string]registry.Relay{"r1": {Relay: "10.0.0.1:7000"}}})
	if m.Pairs[0] != (planner.Pair{A: ClientNode, B: "r1", RTTMs: 20}) {
		t.Fatalf("pair %+v", m.Pairs[0])
	}
}

// What this host's sends taught shows in the plan as the relays' does:
// an upload's direct segment is limited by the rate learnt (the table's
// "learnt (client, …)"), its loss is from tunnels (a learnt 0), and the
// destination's window is the one learnt, not assumed.
func TestApplyOwnReachesThePlan(t *testing.T) {
	now := time.Unix(9000, 0)
	dst := "192.0.2.9:443"
	res := &Result{Relays: map[string]registry.Relay{}, Target: Target{Name: dst, Addr: dst}, Matrix: &planner.Matrix{
		Nodes: []planner.Node{{Name: ClientNode, WindowBytes: 4 << 20}, {Name: dst}},
		Pairs: []planner.Pair{{A: ClientNode, B: dst, RTTMs: 50}},
	}}
	s := &Survey{Now: func() time.Time { return now }, Own: ownSends{at: now, sent: map[netip.Addr]learnt.Sent{
		netip.MustParseAddr("192.0.2.9"): {RateBps: 18e6, RateAge: 40 * time.Second, LossOK: true, WindowBytes: 512 << 10, WindowAge: time.Minute},
	}}}
	s.applyOwn(context.Background(), res)
	r, err := planner.Search(res.Matrix, planner.Request{Client: ClientNode, Destination: dst, Direction: planner.Up})
	if err != nil {
		t.Fatal(err)
	}
	seg := r.Direct.Segments[0]
	if seg.Sender != ClientNode || seg.LearntBps != 18e6 || seg.LearntSource != planner.LearntFromTunnels || seg.LimitedBy != "learnt" ||
		seg.LossSource != planner.LearntFromTunnels || seg.WindowBytes != 512<<10 || seg.WindowAssumed {
		t.Fatalf("direct upload segment %+v: want held by this host's learnt 18 Mbit/s, loss from tunnels, the 512 KiB window learnt", seg)
	}
	table := planner.Explain(r)
	for _, want := range []string{"18.0 Mbit/s learnt (client, 40 s ago)", "(tunnels)"} {
		if !strings.Contains(table, want) {
			t.Errorf("the plan's table lacks %q:\n%s", want, table)
		}
	}
}
