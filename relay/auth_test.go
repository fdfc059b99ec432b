package relay

import (
	"net/netip"
	"testing"
	"time"
)

// A source is blocked at its max-th failure within the block, for the
// block after its last failure; an IPv6 source is its /64; loopback is
// never blocked; the failures of another source do not count.
func TestGuessLimiter(t *testing.T) {
	g := newGuessLimiter(3, time.Minute)
	now := time.Unix(1_000_000, 0)
	a, b := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")
	for i := range 3 {
		if g.blocked(a, now) {
			t.Fatalf("blocked after %d failures", i)
		}
		if got := g.failed(a, now); got != (i == 2) {
			t.Fatalf("failure %d reported blocking %v", i+1, got)
		}
		now = now.Add(10 * time.Second)
	}
	if !g.blocked(a, now) || g.blocked(b, now) {
		t.Fatal("3 failures: a not blocked, or b blocked with it")
	}
	if !g.blocked(netip.MustParseAddr("::ffff:198.51.100.7"), now) {
		t.Fatal("a's IPv4-mapped form not blocked")
	}
	if g.blocked(a, now.Add(51*time.Second)) {
		t.Fatal("still blocked a minute after the last failure")
	}
	// Failures spread wider than the block never add up.
	for range 5 {
		g.failed(b, now)
		now = now.Add(61 * time.Second)
	}
	if g.blocked(b, now.Add(-60*time.Second)) {
		t.Fatal("b blocked for failures a minute apart")
	}
	v6 := netip.MustParseAddr("2001:db8:1:2::1")
	for range 3 {
		g.failed(v6, now)
	}
	if !g.blocked(netip.MustParseAddr("2001:db8:1:2:ffff::9"), now) || g.blocked(netip.MustParseAddr("2001:db8:1:3::1"), now) {
		t.Fatal("an IPv6 source is its /64")
	}
	lo := netip.MustParseAddr("127.0.0.1")
	for range 10 {
		g.failed(lo, now)
	}
	if g.blocked(lo, now) {
		t.Fatal("loopback blocked")
	}
	var off *guessLimiter = newGuessLimiter(0, time.Minute)
	off.failed(a, now)
	if off != nil || off.blocked(a, now) {
		t.Fatal("max 0 must mean no limiter")
	}
}
