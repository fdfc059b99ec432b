package route

import (
	"errors"
	"sync"
	"time"
)

// DefaultWindow is how far a request's timestamp may be from the receiver's
// clock. Relays must keep their clocks within it (NTP does far better).
const DefaultWindow = 30 * time.Second

// DefaultMaxNonces bounds the guard's memory (about 64 bytes per entry): a
// relay accepting more than this many headers in two windows refuses the
// excess rather than forgetting nonces it must still recognise.
const DefaultMaxNonces = 1 << 20

var (
	ErrStale  = errors.New("route: timestamp outside the replay window (clock skew or replay)")
	ErrReplay = errors.New("route: nonce already seen (replay)")
	ErrFull   = errors.New("route: replay guard full")
)

// ReplayGuard accepts a request once: its timestamp must be within Window of
// now and its nonce unseen in that window. A nonce is remembered until its
// timestamp leaves the window, after which the timestamp check alone rejects
// it, so memory holds at most the headers of the last two windows.
// The zero value uses DefaultWindow, DefaultMaxNonces and time.Now. Safe for
// concurrent use.
type ReplayGuard struct {
	Window    time.Duration
	MaxNonces int
	Now       func() time.Time // for tests

	mu    sync.Mutex
	seen  map[[NonceBytes]byte]struct{}
	queue []seenNonce // insertion order; expiries are not sorted, see expire
}

type seenNonce struct {
	nonce   [NonceBytes]byte
	expires time.Time
}

// Check records r's nonce and returns nil if r is fresh, ErrStale, ErrReplay
// or ErrFull otherwise. Call it only after the MAC verified: otherwise anyone
// could fill the guard with forged nonces.
func (g *ReplayGuard) Check(r *Request) error { return g.check(r.Time, r.Nonce) }

// CheckJoin is Check for a join: its own nonce, once, within the window.
func (g *ReplayGuard) CheckJoin(j *Join) error { return g.check(j.Time, j.Nonce) }

func (g *ReplayGuard) check(t time.Time, nonce [NonceBytes]byte) error {
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	win := g.Window
	if win <= 0 {
		win = DefaultWindow
	}
	if d := now.Sub(t); d > win || d < -win {
		return ErrStale
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now, win)
	if _, ok := g.seen[nonce]; ok {
		return ErrReplay
	}
	limit := g.MaxNonces
	if limit <= 0 {
		limit = DefaultMaxNonces
	}
	if len(g.seen) >= limit {
		return ErrFull
	}
	if g.seen == nil {
		g.seen = map[[NonceBytes]byte]struct{}{}
	}
	g.seen[nonce] = struct{}{}
	g.queue = append(g.queue, seenNonce{nonce: nonce, expires: t.Add(win)})
	return nil
}

// Len is how many nonces are remembered.
func (g *ReplayGuard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

// expire forgets nonces from the front of the queue whose timestamps left the
// window. Entries behind an unexpired one wait for it; since every entry
// expires at most 2×win after it was added, nothing lives longer than that.
func (g *ReplayGuard) expire(now time.Time, win time.Duration) {
	i := 0
	for ; i < len(g.queue) && now.After(g.queue[i].expires); i++ {
		delete(g.seen, g.queue[i].nonce)
	}
	if i == 0 {
		return
	}
	g.queue = g.queue[i:]
	if cap(g.queue) > 1024 && len(g.queue) < cap(g.queue)/4 {
		// Let the old backing array go after a burst.
		g.queue = append([]seenNonce(nil), g.queue...)
	}
}
