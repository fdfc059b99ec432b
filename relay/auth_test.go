package relay

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wrongGuess is one failed authentication from a at now.
func wrongGuess(g *guessLimiter, a netip.Addr, now time.Time) authVerdict {
	return g.attempt(a, now, func() bool { return false })
}

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
		if got := wrongGuess(g, a, now); got != authWrong && !(i == 2 && got == authBlocks) {
			t.Fatalf("failure %d: verdict %d", i+1, got)
		}
		now = now.Add(10 * time.Second)
	}
	if !g.blocked(a, now) || g.blocked(b, now) {
		t.Fatal("3 failures: a not blocked, or b blocked with it")
	}
	if !g.blocked(netip.MustParseAddr("::ffff:198.51.100.7"), now) {
		t.Fatal("a's IPv4-mapped form not blocked")
	}
	if g.attempt(a, now, func() bool { t.Fatal("a blocked source's credentials were looked at"); return true }) != authBlocked {
		t.Fatal("a blocked source's right guess was not refused")
	}
	if g.blocked(a, now.Add(51*time.Second)) {
		t.Fatal("still blocked a minute after the last failure")
	}
	// Failures spread wider than the block never add up.
	for range 5 {
		wrongGuess(g, b, now)
		now = now.Add(61 * time.Second)
	}
	if g.blocked(b, now.Add(-60*time.Second)) {
		t.Fatal("b blocked for failures a minute apart")
	}
	v6 := netip.MustParseAddr("2001:db8:1:2::1")
	for range 3 {
		wrongGuess(g, v6, now)
	}
	if !g.blocked(netip.MustParseAddr("2001:db8:1:2:ffff::9"), now) || g.blocked(netip.MustParseAddr("2001:db8:1:3::1"), now) {
		t.Fatal("an IPv6 source is its /64")
	}
	lo := netip.MustParseAddr("127.0.0.1")
	for range 10 {
		wrongGuess(g, lo, now)
	}
	if g.blocked(lo, now) || wrongGuess(g, lo, now) != authWrong {
		t.Fatal("loopback blocked")
	}
	var off *guessLimiter = newGuessLimiter(0, time.Minute)
	if wrongGuess(off, a, now) != authWrong || off.attempt(a, now, func() bool { return true }) != authOK {
		t.Fatal("no limiter: the credentials decide")
	}
	if off != nil || off.blocked(a, now) {
		t.Fatal("max 0 must mean no limiter")
	}
}

// Guesses sent in parallel from one source are looked at no more than
// max times per block: each wrong one is counted before the next is
// looked at (and before the client is answered). Checked apart and then
// counted, forty guesses arriving together would all be looked at.
func TestParallelGuessesAreCountedInTurn(t *testing.T) {
	const max, guessers = 3, 40
	g := newGuessLimiter(max, time.Minute)
	a := netip.MustParseAddr("198.51.100.7")
	now := time.Unix(1_000_000, 0)
	var lookedAt, refused atomic.Int32
	var start, done sync.WaitGroup
	start.Add(1)
	for range guessers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			v := g.attempt(a, now, func() bool {
				lookedAt.Add(1)
				time.Sleep(time.Millisecond) // the others arrive meanwhile
				return false
			})
			if v == authBlocked {
				refused.Add(1)
			}
		}()
	}
	start.Done()
	done.Wait()
	if lookedAt.Load() != max || refused.Load() != guessers-max {
		t.Fatalf("%d parallel guesses, limit %d: %d looked at, %d refused unlooked", guessers, max, lookedAt.Load(), refused.Load())
	}
}
