package learnt

import (
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// interval is one reading dt after the previous: sentBytes more sent,
// busyMs of it with data in flight, heldMs held by the receiver's window.
type interval struct {
	sentBytes    uint64
	busyMs, held uint64
	appLimited   bool
	rttMs        float64 // 0: 20, the least
	resentBytes  uint64  // sent again in the interval
	peerWindow   uint32  // snd_wnd read
}

// feed runs readings 500 ms apart through a fresh Socket of a
// loss-tolerant sender (BBR: loss and queues do not change what counts)
// and returns its best sustained rate, bits/s.
func feed(steps []interval) float64 { return feedCC(steps, false).bestBps }

// feedCC is feed for a loss-based sender or not, returning the socket.
func feedCC(steps []interval, lossBased bool) *Socket {
	t0 := time.Unix(1000, 0)
	w := &Socket{links: []*sendLink{{prev: tunnel.SocketStats{Valid: true}, lossBased: lossBased}}, prevAt: t0}
	st := tunnel.SocketStats{Valid: true}
	for i, s := range steps {
		st.SentBytes += s.sentBytes
		st.RetransmittedBytes += s.resentBytes
		st.BusyMs += s.busyMs
		st.RwndLimitedMs += s.held
		st.AppLimited = s.appLimited
		st.MinRTTMs, st.RTTMs = 20, max(s.rttMs, 20)
		st.PeerWindowBytes = s.peerWindow
		w.add([]tunnel.SocketStats{st}, t0.Add(time.Duration(i+1)*rateSampleEvery))
	}
	return w
}

// 1 MB in 500 ms is 16 Mbit/s.
func full(mb float64) interval { return interval{sentBytes: uint64(mb * 1e6), busyMs: 500} }

func TestSustainedRate(t *testing.T) {
	cases := []struct {
		name  string
		steps []interval
		want  float64
	}{
		{"three in a row: the least of them", []interval{full(1), full(1.1), full(1.2)}, 16e6},
		{"slow start then steady: the steady run", []interval{full(0.1), full(0.5), full(1), full(1), full(1)}, 16e6},
		{"two are not a run", []interval{full(1), full(1)}, 0},
		{"one fast interval counts for nothing", []interval{full(1), full(1), full(5), full(1), full(1), full(1)}, 16e6},
		{"a rate that swings is not the path's", []interval{full(1), full(0.7), full(1), full(0.75), full(1)}, 0},
		{"within a quarter it is steady", []interval{full(1), full(0.8), full(0.9)}, 12.8e6},
		{"app-limited breaks the run", []interval{full(1), {sentBytes: 1e6, busyMs: 500, appLimited: true}, full(1), full(1)}, 0},
		{"held by the receiver's window breaks it", []interval{full(1), {sentBytes: 1e6, busyMs: 500, held: 100}, full(1), full(1)}, 0},
		{"held by the window over a standing queue: the path's rate", []interval{full(1), {sentBytes: 1e6, busyMs: 500, held: 300, rttMs: 90}, full(1)}, 16e6},
		{"idle half the time breaks it", []interval{full(1), {sentBytes: 1e6, busyMs: 250}, full(1), full(1)}, 0},
		{"nothing sent breaks it", []interval{full(1), {busyMs: 500}, full(1), full(1)}, 0},
		{"random loss does not hold a loss-tolerant sender", []interval{full(1), {sentBytes: 1e6, busyMs: 500, resentBytes: 1448}, full(1)}, 16e6},
	}
	for _, c := range cases {
		if got := feed(c.steps); got != c.want {
			t.Errorf("%s: best %v bits/s, want %v", c.name, got, c.want)
		}
	}
}

// A loss-based sender's rate is the path's only held by the window over a
// standing queue: without one the bottleneck had room, and however steady
// its intervals, losing or not, they are its window's climb.
func TestSustainedRateOfALossBasedSender(t *testing.T) {
	queued := func(resentBytes uint64) interval {
		return interval{sentBytes: 1e6, busyMs: 500, held: 300, resentBytes: resentBytes, rttMs: 90}
	}
	cases := []struct {
		name  string
		steps []interval
		want  float64
	}{
		{"no queue, no loss: its climb", []interval{full(1), full(1), full(1), full(1), full(1), full(1)}, 0},
		{"no queue, random loss: its climb back", []interval{full(1), {sentBytes: 1e6, busyMs: 500, resentBytes: 1448}, full(1), full(1), full(1)}, 0},
		{"over a queue: the path's rate", []interval{queued(0), queued(0), queued(0)}, 16e6},
		{"a queue's overflow does not break it", []interval{queued(0), queued(1448), queued(0)}, 16e6},
		{"a run needs the queue throughout", []interval{queued(0), full(1), queued(0), queued(0)}, 0},
	}
	for _, c := range cases {
		if got := feedCC(c.steps, true).bestBps; got != c.want {
			t.Errorf("%s: best %v bits/s, want %v", c.name, got, c.want)
		}
	}
}

// What a loss-based relay link read in the lab plan-lossy-all (a 30 ms,
// 100 Mbit/s link losing 0.3 %, carrying ~8 Mbit/s): a smoothed RTT of
// 46-61 ms with the window open, and, while the next relay fell behind,
// held by a window shrunk to a fraction of the largest it advertised.
// Counted, such runs taught rates the chain then beat by up to 2.9×. Held
// by the receiver's whole window over a queue, a loss-based sender still
// teaches the path's rate. (The lab's RTTs here are scaled to feed's least,
// 20 ms, from the link's 30.)
func TestAQueueIsTheWindowsStopOverTheReceiversWholeWindow(t *testing.T) {
	read := func(held uint64, rttMs float64, peerWindow uint32) interval {
		return interval{sentBytes: 1e6, busyMs: 500, held: held, rttMs: rttMs, peerWindow: peerWindow}
	}
	cases := []struct {
		name  string
		steps []interval
		want  float64
	}{
		{"RTT 1.5-2x its least, the window open (the lab's)", []interval{read(0, 31.7, 253e3), read(0, 30.7, 301e3), read(36, 33.1, 309e3), read(0, 40.8, 346e3)}, 0},
		{"held by a shrunk window (the lab's)", []interval{read(0, 35.2, 361e3), read(160, 32.3, 111e3), read(336, 38.7, 0), read(176, 37, 35e3), read(144, 33, 94e3)}, 0},
		{"held by the receiver's whole window over a queue", []interval{read(300, 92, 384e3), read(300, 90, 384e3), read(300, 95, 380e3)}, 16e6},
		{"held by a window at half the largest", []interval{read(300, 92, 384e3), read(300, 90, 192e3), read(300, 95, 200e3)}, 16e6},
	}
	for _, c := range cases {
		if got := feedCC(c.steps, true).bestBps; got != c.want {
			t.Errorf("%s: best %v bits/s, want %v", c.name, got, c.want)
		}
	}
}

// A watched socket keeps the largest window its peer advertised in any
// reading, whatever the reading's interval counted for.
func TestSocketKeepsTheLargestPeerWindow(t *testing.T) {
	w := feedCC([]interval{{peerWindow: 64 << 10}, {sentBytes: 1e6, busyMs: 500, appLimited: true, peerWindow: 3 << 20}, {peerWindow: 1 << 20}}, true)
	if got := w.PeerWindowBytes(); got != 3<<20 {
		t.Fatalf("largest peer window %d, want %d", got, 3<<20)
	}
	if got := (*Socket)(nil).PeerWindowBytes(); got != 0 {
		t.Fatalf("an unwatched socket's window %d, want 0", got)
	}
}

func TestLearntPerHost(t *testing.T) {
	var r Rates
	now := time.Unix(5000, 0)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	done := func(h netip.Addr, bps float64, at time.Time) {
		w := &Socket{host: h, bestBps: bps}
		r.live = map[*Socket]struct{}{w: {}}
		r.Done(w, at)
	}
	done(a, 20e6, now.Add(-time.Minute))
	done(a, 30e6, now.Add(-2*time.Minute))
	done(a, 0, now) // a tunnel that taught nothing
	done(b, 50e6, now.Add(-rateWindow-time.Second))
	if bps, age, ok := r.Learnt(a, now); !ok || bps != 30e6 || age != time.Minute {
		t.Errorf("a: %v, %v, %v; want the best in the window, 30 Mbit/s, the newest a minute old", bps, age, ok)
	}
	if _, _, ok := r.Learnt(b, now); ok {
		t.Errorf("b: a rate older than the window still counts")
	}
	// IPv4 in IPv6 is the same host.
	if _, _, ok := r.Learnt(netip.AddrFrom16(a.As16()), now); !ok {
		t.Errorf("a as ::ffff:10.0.0.1: not found")
	}
	if len(r.live) != 0 {
		t.Errorf("Done left %d sockets watched", len(r.live))
	}
}

func TestLearntHostsBounded(t *testing.T) {
	var r Rates
	now := time.Unix(5000, 0)
	for i := range rateHostsKept + 10 {
		h := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		w := &Socket{host: h, bestBps: 1e6}
		r.Done(w, now.Add(time.Duration(i)*time.Millisecond))
	}
	if n := r.hosts.len(); n > rateHostsKept {
		t.Fatalf("%d hosts kept, want at most %d", n, rateHostsKept)
	}
	if _, _, ok := r.Learnt(netip.AddrFrom4([4]byte{10, 0, 0, 0}), now); ok {
		t.Errorf("the oldest host was kept over newer ones")
	}
}

// A striped stream's rate is its links' together, in the intervals every
// link's path set its pace; a link app-limited (the stream had less to
// send) ends the run however busy the others were.
func TestSustainedRateOverLinks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	feedLinks := func(appLimitedLink int) float64 {
		w := &Socket{links: []*sendLink{{prev: tunnel.SocketStats{Valid: true}}, {prev: tunnel.SocketStats{Valid: true}}}, prevAt: t0}
		sts := make([]tunnel.SocketStats, 2)
		for i := range 4 {
			for l := range sts {
				st := &sts[l]
				st.Valid, st.SentBytes, st.BusyMs = true, st.SentBytes+500_000, st.BusyMs+500
				st.AppLimited = l == appLimitedLink && i == 2
			}
			w.add(sts, t0.Add(time.Duration(i+1)*rateSampleEvery))
		}
		return w.bestBps
	}
	// 2 × 500 kB in 500 ms is 16 Mbit/s; one link alone 8.
	if got := feedLinks(-1); got != 16e6 {
		t.Errorf("two links at 8 Mbit/s each: best %v bits/s, want 16e6", got)
	}
	if got := feedLinks(1); got != 0 {
		t.Errorf("one link app-limited in one interval of four: best %v bits/s, want none", got)
	}
}
