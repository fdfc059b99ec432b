package probesched

import (
	"testing"
	"time"
)

// A relay's request goes over UDP while the plan has no HTTPS connection
// to it: beside the connection it opens until an ask is acknowledged,
// alone after. A relay with a connection is asked over it, a second
// request beside the first over another.
func TestRoute(t *testing.T) {
	cases := []struct {
		name          string
		udp, proven   bool
		link          Link
		second        bool
		want          Route
		wantUDP, open bool
	}{
		{"udp, not proven, first ask", true, false, LinkNone, false, UDPOpening, true, true},
		{"udp, not proven, second request", true, false, LinkNone, true, HTTPSSecond, false, false},
		{"udp, not proven, read opening", true, false, LinkReading, true, UDPBesideRead, true, false},
		{"udp, not proven, connection up", true, false, LinkUp, false, HTTPSKept, false, false},
		{"udp, proven, no connection", true, true, LinkNone, false, UDPAlone, true, false},
		{"udp, proven, no connection, second", true, true, LinkNone, true, UDPAlone, true, false},
		{"udp, proven, connection up", true, true, LinkUp, false, HTTPSKept, false, false},
		{"udp, proven, read opening", true, true, LinkReading, false, HTTPSKept, false, false},
		{"https only, first", false, false, LinkNone, false, HTTPSNew, false, true},
		{"https only, second", false, false, LinkUp, true, HTTPSSecond, false, false},
		{"https only, kept", false, false, LinkUp, false, HTTPSKept, false, false},
	}
	for _, c := range cases {
		s := New(c.udp)
		if c.proven {
			s.Acked(10 * time.Millisecond)
		}
		got := s.route(c.link, c.second)
		if got != c.want || got.UDP() != c.wantUDP || got.Opens() != c.open {
			t.Errorf("%s: %v (udp %v, opens %v), want %v (udp %v, opens %v)", c.name, got, got.UDP(), got.Opens(), c.want, c.wantUDP, c.open)
		}
	}
}

// An ask beside a read waits for the read; one alone for AckWait. Not
// acknowledged, only an ask alone is asked again over UDP; a reply
// overdue always is.
func TestRouteResends(t *testing.T) {
	for _, r := range []Route{UDPOpening, UDPBesideRead} {
		if !r.AckAwaitsRead() || r.AgainOverUDP(false) || !r.AgainOverUDP(true) {
			t.Errorf("route %v: awaits read %v, again unacked %v, acked %v; want true, false, true", r, r.AckAwaitsRead(), r.AgainOverUDP(false), r.AgainOverUDP(true))
		}
	}
	if UDPAlone.AckAwaitsRead() || !UDPAlone.AgainOverUDP(false) || !UDPAlone.AgainOverUDP(true) {
		t.Error("an ask alone waits for no read and is asked again over UDP either way")
	}
}

// A round routes a relay's second request by its first; this host's
// probe opens the connection to a relay only while nothing else will, and
// is answered by the round's ask only for one handshake of a relay whose
// first request went over UDP.
func TestRound(t *testing.T) {
	s := New(true)
	rd := s.Round([]string{"a", "a", "b"}, 3)
	if got := rd.Route("a", LinkNone); got != UDPOpening {
		t.Errorf("a's first request: %v, want UDPOpening", got)
	}
	// The survey's prober has a read opening a's connection now; the
	// model has nothing yet.
	if got := rd.Route("a", LinkReading); got != UDPBesideRead {
		t.Errorf("a's second request, its read opening: %v, want UDPBesideRead", got)
	}
	if got := rd.Route("a", LinkNone); got != HTTPSSecond {
		t.Errorf("a's third request, no link yet: %v, want HTTPSSecond", got)
	}
	if got := rd.Route("b", LinkUp); got != HTTPSKept {
		t.Errorf("b's request over its connection: %v, want HTTPSKept", got)
	}
	if !rd.ByAck("a", 1, false) || rd.ByAck("a", 3, false) || rd.ByAck("b", 1, false) || rd.ByAck("c", 1, false) {
		t.Error("ByAck: want only a one-handshake probe of a relay whose first request went over UDP")
	}
	if !rd.OpensBeside("c", LinkNone, false) {
		t.Error("a probe of a relay nothing has gone to does not open its connection")
	}
	if rd.OpensBeside("c", LinkNone, true) || rd.OpensBeside("a", LinkNone, false) || rd.OpensBeside("c", LinkUp, false) {
		t.Error("a probe opens a connection to the destination, to a relay asked in the round, or to one with a connection")
	}
	s.Acked(time.Millisecond)
	if s.Round(nil, 0).OpensBeside("c", LinkNone, false) {
		t.Error("a probe opens a connection once UDP is proven")
	}
	if got := s.Round(nil, 0).Route("c", LinkNone); got != UDPAlone {
		t.Errorf("once UDP is proven, a relay without a connection: %v, want UDPAlone", got)
	}
}

// An ask's waits follow what the plan knows: the acknowledgement's this
// host's RTT to the relay, the reply's its probes' expected time.
func TestWaits(t *testing.T) {
	s := New(true)
	const timeout = 2 * time.Second
	s.Acked(300 * time.Millisecond)
	s.Measured("near", 20*time.Millisecond)
	if got, want := s.AckWait("near", timeout), 100*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay 20 ms away: %v, want %v (the floor)", got, want)
	}
	s.Measured("mid", 80*time.Millisecond)
	if got, want := s.AckWait("mid", timeout), 210*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay 80 ms away: %v, want %v", got, want)
	}
	if got, want := s.AckWait("unknown", timeout), 650*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay not measured: %v, want %v (the plan's slowest's)", got, want)
	}
	bound := 4 * time.Second
	if got := s.ReplyWait(3, 0, bound); got != bound {
		t.Errorf("reply wait with nothing known: %v, want the bound %v", got, bound)
	}
	if got, want := s.ReplyWait(0, 0, bound), 100*time.Millisecond; got != want {
		t.Errorf("reply wait of an ask for windows alone: %v, want %v", got, want)
	}
	if got, want := s.ReplyWait(3, Expected(60, 2), bound), 290*time.Millisecond; got != want {
		t.Errorf("reply wait of two handshakes expected at 60 ms: %v, want %v", got, want)
	}
	s.Replied(400 * time.Millisecond)
	s.Replied(100 * time.Millisecond)
	if got, want := s.ReplyWait(3, 0, bound), 850*time.Millisecond; got != want {
		t.Errorf("reply wait with no expectation, the plan's slowest reply 400 ms: %v, want %v", got, want)
	}
	if got := OverdueAfter(time.Second, 300*time.Millisecond); got != 300*time.Millisecond {
		t.Errorf("OverdueAfter past its bound: %v, want the bound", got)
	}
}

// A request's bound is the ask and each of its handshakes up to the
// timeout, gap apart: a re-probe of three handshakes is waited for longer
// than a probe of one, by either prober.
func TestProbesTimeout(t *testing.T) {
	for _, c := range []struct {
		handshakes int
		gap, want  time.Duration
	}{
		{0, 0, 2 * time.Second},
		{1, 0, 2 * time.Second},
		{3, 0, 4 * time.Second},
		{3, 50 * time.Millisecond, 4*time.Second + 100*time.Millisecond},
	} {
		if got := ProbesTimeout(time.Second, c.handshakes, c.gap); got != c.want {
			t.Errorf("ProbesTimeout(1s, %d, %v) = %v, want %v", c.handshakes, c.gap, got, c.want)
		}
	}
}

// A round's index counts the plan's rounds that made requests: one of
// none (a read routed alone, say) waits for nothing and is not one, so
// the next round with requests is still the landmarks' or the ends'.
func TestRoundIndexCountsRoundsWithRequests(t *testing.T) {
	s := New(true)
	for i, c := range []struct{ requests, want int }{{0, 0}, {5, 0}, {0, 1}, {3, 1}, {1, 2}} {
		if got := s.Round(nil, c.requests).Index(); got != c.want {
			t.Errorf("call %d, a round of %d requests: index %d, want %d", i, c.requests, got, c.want)
		}
	}
}
