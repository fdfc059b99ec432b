package main

import (
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
	"github.com/relaymesh/relaymesh/planner"
)

// Each segment takes its sender's socket: downloads the relay's socket
// towards the client (the relay after the segment sends), uploads its
// socket towards the next hop; only the bench's own tunnels count (the
// biggest, ended since it started), not the 1-byte ones nor older ones.
func TestSegmentLimitsTakeTheSendersSocket(t *testing.T) {
	since := time.Now()
	stats := func(id uint32) *tunnel.SocketStats {
		return &tunnel.SocketStats{Valid: true, RTTMs: float64(id), BusyMs: 100, RwndLimitedMs: 50, PeerWindowBytes: id * 1000, SendBufferBytes: int(id) * 1000}
	}
	rec := func(client, next uint32, bytes int64, ended time.Time) adminapi.TunnelRecord {
		return adminapi.TunnelRecord{Frontend: "relay", EndedAt: ended, UpBytes: bytes, DownBytes: bytes, Client: stats(client), Next: stats(next)}
	}
	tunnels := [][]adminapi.TunnelRecord{
		// r1: the bench's tunnel, a time-to-first-byte one, and an older big one.
		{rec(11, 12, 1, since.Add(time.Second)), rec(1, 2, 8<<20, since.Add(2*time.Second)), rec(13, 14, 64<<20, since.Add(-time.Second))},
		// r2.
		{rec(3, 4, 8<<20, since.Add(2*time.Second))},
	}
	chain := []string{"r1", "r2"}
	// r2's tunnel of the transfer had not ended when asked; a smaller one had.
	if got := segmentLimits(true, 1, 4<<20, since, chain, [][]adminapi.TunnelRecord{tunnels[0], {rec(5, 6, 1<<20, since.Add(time.Second))}}); got[1].Seen {
		t.Errorf("a tunnel below the transfer's bytes taken for it: %+v", got[1])
	}
	down := segmentLimits(true, 1, 4<<20, since, chain, tunnels)
	up := segmentLimits(false, 1, 4<<20, since, chain, tunnels)
	want := []struct {
		seg      segmentLimit
		from, to string
		window   uint32 // 0: not seen
	}{
		{down[0], "r1", "client", 1000}, {down[1], "r2", "r1", 3000}, {down[2], "destination", "r2", 0},
		{up[0], "client", "r1", 0}, {up[1], "r1", "r2", 2000}, {up[2], "r2", "destination", 4000},
	}
	if len(down) != 3 || len(up) != 3 {
		t.Fatalf("%d down and %d up segments, want 3 each", len(down), len(up))
	}
	for _, w := range want {
		s := w.seg
		if s.From != w.from || s.To != w.to || s.Seen != (w.window > 0) || s.PeerWindowBytes != w.window {
			t.Errorf("segment %+v, want %s→%s with the window of socket %d", s, w.from, w.to, w.window/1000)
		}
		if s.Seen && (s.RwndLimited != 0.5 || s.Tunnels != 1 || s.SendBufferBytes != int(w.window)) {
			t.Errorf("segment %s→%s: %+v", s.From, s.To, s)
		}
	}
}

// A measured window lands on this host's pair with the relay, on the
// client's end whichever way round the pair is, and the plan made with it
// uses it on that segment only.
func TestSetPairWindow(t *testing.T) {
	m := &planner.Matrix{
		Nodes: []planner.Node{{Name: "client", WindowBytes: 150_000}, {Name: "r1", Relay: true, WindowBytes: 4 << 20}, {Name: "srv", WindowBytes: 4 << 20}},
		Pairs: []planner.Pair{{A: "r1", B: "client", RTTMs: 5}, {A: "r1", B: "srv", RTTMs: 20}, {A: "client", B: "srv", RTTMs: 25}},
	}
	p := &planned{Matrix: m, Request: planner.Request{Client: "client", Destination: "srv"}}
	if p.setPairWindow("r9", 1) {
		t.Fatal("set a window on a pair that does not exist")
	}
	if !p.setPairWindow("r1", 100_000) || m.Pairs[0].BWindowBytes != 100_000 || m.Pairs[0].AWindowBytes != 0 {
		t.Fatalf("pair %+v", m.Pairs[0])
	}
	res, err := planner.Search(m, p.Request)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Best.Chain) != 1 || res.Best.Segments[0].WindowBytes != 100_000 || res.Direct.Segments[0].WindowBytes != 150_000 {
		t.Fatalf("best %+v, direct %+v", res.Best.Segments, res.Direct.Segments)
	}
}
