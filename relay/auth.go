package relay

import (
	"crypto/subtle"
	"net/netip"
	"sync"
	"time"
)

// credentials checks client usernames and passwords in constant time with
// respect to the password (and does the same work for unknown users).
type credentials struct {
	users map[string]string
	// guesses refuses the sources that failed too often; nil: no limit.
	guesses *guessLimiter
}

func newCredentials(users map[string]string, guesses *guessLimiter) *credentials {
	return &credentials{users: users, guesses: guesses}
}

func (c *credentials) enabled() bool { return len(c.users) > 0 }

func (c *credentials) check(user, pass string) bool {
	want, ok := c.users[user]
	if !ok {
		// Compare against something anyway so timing does not tell which
		// usernames exist.
		want = "\x00relaymesh-no-such-user"
	}
	eq := subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1
	return ok && eq
}

func (c *credentials) checkProxyAuthorization(header string) bool {
	user, pass, ok := parseBasic(header)
	return ok && c.check(user, pass)
}

// guessLimiter stops online password guessing: a source that failed
// to authenticate max times within block is refused, without its
// credentials being looked at (a right guess would tell), until block
// has passed since its last failure. A source is an IPv4 address or an
// IPv6 /64 (one host's usual allocation: per address, a stranger would
// have 2^64 sources). A success does not clear a source's failures: one
// valid account must not buy guesses at the others. Loopback is exempt,
// as from the pre-authentication caps: this host's applications share it.
type guessLimiter struct {
	max   int
	block time.Duration

	mu      sync.Mutex
	sources map[netip.Prefix]*guesses
}

// guesses is one source's failures.
type guesses struct {
	failed int
	last   time.Time // the latest failure
}

// maxGuessSources bounds the sources remembered (about 100 bytes each):
// beyond, after the expired are dropped, new sources go uncounted rather
// than the memory growing with a stranger's address space.
const maxGuessSources = 1 << 16

// newGuessLimiter limits to max failures per block; nil (no limit)
// when max is 0.
func newGuessLimiter(max int, block time.Duration) *guessLimiter {
	if max <= 0 {
		return nil
	}
	return &guessLimiter{max: max, block: block, sources: map[netip.Prefix]*guesses{}}
}

// guessSource is a's source: itself (IPv4) or its /64 (IPv6); ok false
// for loopback and an unknown address, which are not limited.
func guessSource(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() {
		return netip.Prefix{}, false
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

// blocked says whether a's source is refused now.
func (g *guessLimiter) blocked(a netip.Addr, now time.Time) bool {
	src, ok := guessSource(a)
	if g == nil || !ok {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blockedLocked(src, now)
}

// authVerdict is the outcome of one authentication from a source.
type authVerdict int

const (
	authOK      authVerdict = iota // the credentials are right
	authWrong                      // wrong, counted
	authBlocks                     // wrong, counted, and the failure that blocks the source
	authBlocked                    // the source is blocked: the credentials were not looked at
)

// attempt decides one authentication from a: authBlocked without check
// running while a's source is blocked; otherwise check runs and a wrong
// answer is counted before attempt returns. The lock is held over check
// (a constant-time comparison, well under a microsecond), so the count
// always precedes the answer the caller then writes, and guesses sent in
// parallel cannot all pass the block before any of them is counted: a
// source is answered on at most max wrong guesses per block.
func (g *guessLimiter) attempt(a netip.Addr, now time.Time, check func() bool) authVerdict {
	src, limited := guessSource(a)
	if g == nil || !limited {
		if check() {
			return authOK
		}
		return authWrong
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.blockedLocked(src, now) {
		return authBlocked
	}
	if check() {
		return authOK
	}
	if g.failedLocked(src, now) {
		return authBlocks
	}
	return authWrong
}

// blockedLocked says whether src is refused now; g.mu is held.
func (g *guessLimiter) blockedLocked(src netip.Prefix, now time.Time) bool {
	x := g.sources[src]
	return x != nil && x.failed >= g.max && now.Sub(x.last) < g.block
}

// failedLocked counts a failure from src; true when it is the one that
// blocks the source. g.mu is held.
func (g *guessLimiter) failedLocked(src netip.Prefix, now time.Time) bool {
	x := g.sources[src]
	if x == nil {
		if len(g.sources) >= maxGuessSources {
			for k, v := range g.sources {
				if now.Sub(v.last) >= g.block {
					delete(g.sources, k)
				}
			}
			if len(g.sources) >= maxGuessSources {
				return false
			}
		}
		x = &guesses{}
		g.sources[src] = x
	}
	if now.Sub(x.last) >= g.block {
		x.failed = 0 // the last failure is forgotten
	}
	x.failed++
	x.last = now
	return x.failed == g.max
}
