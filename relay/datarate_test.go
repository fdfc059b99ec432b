package relay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
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
}

// feed runs readings 500 ms apart through a fresh watchedSocket of a
// loss-based sender and returns its best sustained rate, bits/s.
func feed(steps []interval) float64 { return feedCC(steps, true) }

// feedCC is feed for a loss-based sender or not.
func feedCC(steps []interval, lossBased bool) float64 {
	t0 := time.Unix(1000, 0)
	w := &watchedSocket{prev: tunnel.SocketStats{Valid: true}, prevAt: t0, lossBased: lossBased}
	st := tunnel.SocketStats{Valid: true}
	for i, s := range steps {
		st.SentBytes += s.sentBytes
		st.RetransmittedBytes += s.resentBytes
		st.BusyMs += s.busyMs
		st.RwndLimitedMs += s.held
		st.AppLimited = s.appLimited
		st.MinRTTMs, st.RTTMs = 20, max(s.rttMs, 20)
		w.add(st, t0.Add(time.Duration(i+1)*rateSampleEvery))
	}
	return w.bestBps
}

func TestSustainedRate(t *testing.T) {
	// 1 MB in 500 ms is 16 Mbit/s.
	full := func(mb float64) interval { return interval{sentBytes: uint64(mb * 1e6), busyMs: 500} }
	lost := interval{sentBytes: 1e6, busyMs: 500, resentBytes: 1448}
	queued := func(resentBytes uint64) interval {
		return interval{sentBytes: 1e6, busyMs: 500, resentBytes: resentBytes, rttMs: 90}
	}
	cases := []struct {
		name  string
		steps []interval
		want  float64
	}{
		{"three in a row: the least of them", []interval{full(1), full(1.1), full(1.2)}, 16e6},
		{"slow start then steady: the steady run", []interval{full(0.1), full(0.5), full(1), full(1), full(1)}, 16e6},
		{"two are not a run", []interval{full(1), full(1)}, 0},
		{"one fast interval counts for nothing", []interval{full(1), full(1), full(5), full(1)}, 16e6},
		{"app-limited breaks the run", []interval{full(1), {sentBytes: 1e6, busyMs: 500, appLimited: true}, full(1), full(1)}, 0},
		{"held by the receiver's window breaks it", []interval{full(1), {sentBytes: 1e6, busyMs: 500, held: 100}, full(1), full(1)}, 0},
		{"held by the window over a standing queue: the path's rate", []interval{full(1), {sentBytes: 1e6, busyMs: 500, held: 300, rttMs: 90}, full(1)}, 16e6},
		{"idle half the time breaks it", []interval{full(1), {sentBytes: 1e6, busyMs: 250}, full(1), full(1)}, 0},
		{"nothing sent breaks it", []interval{full(1), {busyMs: 500}, full(1), full(1)}, 0},
		{"random loss without a queue breaks it", []interval{full(1), {sentBytes: 1e6, busyMs: 500, resentBytes: 1448}, full(1), full(1)}, 0},
		{"and the 2 s of recovery after it", []interval{lost, full(1), full(1), full(1), full(1)}, 0},
		{"a run starts after them", []interval{lost, full(1), full(1), full(1), full(1), full(1), full(1)}, 16e6},
		{"a queue's overflow does not", []interval{queued(0), queued(1448), queued(0)}, 16e6},
	}
	for _, c := range cases {
		if got := feed(c.steps); got != c.want {
			t.Errorf("%s: best %v bits/s, want %v", c.name, got, c.want)
		}
	}
	// Random loss does not hold a BBR sender: its rate is the path's.
	if got := feedCC([]interval{full(1), {sentBytes: 1e6, busyMs: 500, resentBytes: 1448}, full(1)}, false); got != 16e6 {
		t.Errorf("a loss-tolerant sender that resent: best %v bits/s, want 16e6", got)
	}
}

func TestLearntPerHost(t *testing.T) {
	var r sendRates
	now := time.Unix(5000, 0)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	done := func(h netip.Addr, bps float64, at time.Time) {
		w := &watchedSocket{host: h, bestBps: bps}
		r.live = map[*watchedSocket]struct{}{w: {}}
		r.done(w, at)
	}
	done(a, 20e6, now.Add(-time.Minute))
	done(a, 30e6, now.Add(-2*time.Minute))
	done(a, 0, now) // a tunnel that taught nothing
	done(b, 50e6, now.Add(-rateWindow-time.Second))
	if bps, age, ok := r.learnt(a, now); !ok || bps != 30e6 || age != time.Minute {
		t.Errorf("a: %v, %v, %v; want the best in the window, 30 Mbit/s, the newest a minute old", bps, age, ok)
	}
	if _, _, ok := r.learnt(b, now); ok {
		t.Errorf("b: a rate older than the window still counts")
	}
	// IPv4 in IPv6 is the same host.
	if _, _, ok := r.learnt(netip.AddrFrom16(a.As16()), now); !ok {
		t.Errorf("a as ::ffff:10.0.0.1: not found")
	}
	if len(r.live) != 0 {
		t.Errorf("done left %d sockets watched", len(r.live))
	}

	pairs := r.withSendRates([]registry.Pair{{From: "self", To: "ra"}, {From: "self", To: "rb"}, {From: "self", To: "gone"}},
		[]registry.Relay{{Name: "ra", Relay: "10.0.0.1:7000"}, {Name: "rb", Relay: "10.0.0.2:7000"}}, now)
	if pairs[0].SendBps != 30e6 || !pairs[0].SendAt.Equal(now.Add(-time.Minute)) || pairs[1].SendBps != 0 || pairs[2].SendBps != 0 {
		t.Errorf("pairs %+v: want 30 Mbit/s to ra only", pairs)
	}
}

func TestLearntHostsBounded(t *testing.T) {
	var r sendRates
	now := time.Unix(5000, 0)
	for i := range rateHostsKept + 10 {
		h := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		w := &watchedSocket{host: h, bestBps: 1e6}
		r.done(w, now.Add(time.Duration(i)*time.Millisecond))
	}
	if len(r.hosts) > rateHostsKept {
		t.Fatalf("%d hosts kept, want at most %d", len(r.hosts), rateHostsKept)
	}
	if _, _, ok := r.learnt(netip.AddrFrom4([4]byte{10, 0, 0, 0}), now); ok {
		t.Errorf("the oldest host was kept over newer ones")
	}
}
