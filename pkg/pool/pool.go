// Package pool keeps warm connections to peer relays so that an inter-relay
// segment costs no TCP (nor TLS) handshake on a tunnel's critical path
// (docs/protocol.md, "Warm pools").
//
// A pooled connection is a TCP connection, secured by the caller's Dial or
// plain, on which no route header has been sent yet: the peer's relay
// listener waits for the first header byte for longer than IdleTimeout, so
// a connection handed out by Take is still open on the other side. Connections are never reused after carrying a tunnel.
package pool

import (
	"cmp"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// Defaults. IdleTimeout must stay below the peers' relay header wait
// (relay.DefaultRelayHeaderWait, 60 s), so that a peer never closes a
// connection this side still considers warm.
const (
	DefaultMaxIdle = 4
	// DefaultMaxPeers bounds how many addresses have a pool at once: the
	// peers a relay talks to are the fleet's relays; past this, a new
	// address gets no warm connections (its tunnels dial cold).
	DefaultMaxPeers    = 256
	DefaultIdleTimeout = 30 * time.Second
	// DefaultUseWindow: a peer not used for this long gets no new warm
	// connections (its existing ones expire after IdleTimeout).
	DefaultUseWindow = 2 * time.Minute
)

// Event names passed to Pool.Observe (metric labels).
const (
	EventHit       = "hit"        // Take returned a warm connection
	EventMiss      = "miss"       // Take found none: the caller dials cold
	EventExpired   = "expired"    // an idle connection reached IdleTimeout, or was replaced when due for renewal
	EventBroken    = "broken"     // the peer had closed (or written to) an idle connection
	EventDialError = "dial_error" // a refill dial failed
)

// Pool holds idle connections per address. Set the fields before first use.
type Pool struct {
	// Dial opens a new connection (the caller's tuned dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdle caps idle connections per address; 0 is DefaultMaxIdle.
	MaxIdle int
	// MaxPeers caps the addresses pooled at once; 0 is DefaultMaxPeers.
	MaxPeers int
	// IdleTimeout closes idle connections older than this; 0 is DefaultIdleTimeout.
	IdleTimeout time.Duration
	// UseWindow: addresses unused for this long are not refilled; 0 is DefaultUseWindow.
	UseWindow time.Duration
	// DialTimeout bounds one refill dial; 0 is 10 s.
	DialTimeout time.Duration
	// Observe, when set, counts events (Event* constants). It must not block.
	Observe func(event string)

	mu     sync.Mutex
	peers  map[string]*peer
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
	now    func() time.Time // tests
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

type peer struct {
	idle      []idleConn // oldest first; Take hands out the newest
	dialing   int        // refill dials in flight
	lastUse   time.Time
	useSecond int64 // unix second of useCount
	useCount  int   // Takes during useSecond
	prevCount int   // Takes during the second before
}

// target is how many idle connections to hold: the recent demand per second
// (one warm connection covers one tunnel per refill time, which is one RTT,
// well under a second), at least 1 while the peer is in use, at most max.
func (p *peer) target(now time.Time, useWindow time.Duration, maxIdle int) int {
	if p.lastUse.IsZero() || now.Sub(p.lastUse) > useWindow {
		return 0
	}
	cur, prev := p.useCount, p.prevCount
	switch sec := now.Unix(); {
	case sec == p.useSecond:
	case sec == p.useSecond+1:
		prev, cur = cur, 0
	default:
		prev, cur = 0, 0
	}
	return min(max(cur, prev, 1), maxIdle)
}

func (p *peer) recordUse(now time.Time) {
	sec := now.Unix()
	switch {
	case sec == p.useSecond:
	case sec == p.useSecond+1:
		p.prevCount, p.useCount = p.useCount, 0
	default:
		p.prevCount, p.useCount = 0, 0
	}
	p.useSecond = sec
	p.useCount++
	p.lastUse = now
}

func (pl *Pool) init() {
	if pl.peers == nil {
		pl.peers = map[string]*peer{}
		pl.stop = make(chan struct{})
		if pl.now == nil {
			pl.now = time.Now
		}
		pl.wg.Add(1)
		go pl.janitor()
	}
}

func (pl *Pool) maxIdle() int {
	if pl.MaxIdle > 0 {
		return pl.MaxIdle
	}
	return DefaultMaxIdle
}

func (pl *Pool) idleTimeout() time.Duration {
	if pl.IdleTimeout > 0 {
		return pl.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (pl *Pool) useWindow() time.Duration {
	if pl.UseWindow > 0 {
		return pl.UseWindow
	}
	return DefaultUseWindow
}

func (pl *Pool) observe(ev string) {
	if pl.Observe != nil {
		pl.Observe(ev)
	}
}

// Take returns a warm connection to addr, or nil when there is none (the
// caller then dials cold). Either way it records the use, which sizes the
// pool, and starts refilling it in the background.
func (pl *Pool) Take(addr string) net.Conn {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return nil
	}
	pl.init()
	p := pl.peers[addr]
	if p == nil {
		if len(pl.peers) >= cmp.Or(pl.MaxPeers, DefaultMaxPeers) {
			pl.mu.Unlock()
			pl.observe(EventMiss)
			return nil
		}
		p = &peer{}
		pl.peers[addr] = p
	}
	now := pl.now()
	p.recordUse(now)
	var got net.Conn
	var broken []net.Conn
	for len(p.idle) > 0 {
		ic := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(ic.since) >= pl.idleTimeout() {
			broken = append(broken, ic.c) // counted as expired below
			continue
		}
		if !alive(ic.c) {
			pl.observe(EventBroken)
			ic.c.Close()
			continue
		}
		got = ic.c
		break
	}
	pl.refillLocked(addr, p, now)
	pl.mu.Unlock()
	for _, c := range broken {
		pl.observe(EventExpired)
		c.Close()
	}
	if got == nil {
		pl.observe(EventMiss)
		return nil
	}
	pl.observe(EventHit)
	return got
}

// Warm marks addr as in use so the pool fills before the first tunnel (for
// statically configured next hops). It does not block.
func (pl *Pool) Warm(addr string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return
	}
	pl.init()
	p := pl.peers[addr]
	if p == nil {
		if len(pl.peers) >= cmp.Or(pl.MaxPeers, DefaultMaxPeers) {
			return
		}
		p = &peer{}
		pl.peers[addr] = p
	}
	now := pl.now()
	p.lastUse = now
	pl.refillLocked(addr, p, now)
}

// Idle reports how many warm connections addr has (tests, metrics).
func (pl *Pool) Idle(addr string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.peers[addr]; p != nil {
		return len(p.idle)
	}
	return 0
}

// sweepEvery is the janitor's period.
func (pl *Pool) sweepEvery() time.Duration { return max(pl.idleTimeout()/4, 100*time.Millisecond) }

// renewAge is the age at which an idle connection is renewed: a
// replacement is dialed while it stays usable, one sweep before it would
// expire. Without it a connection expired between two sweeps, and a
// Take in that gap, or during the refill the expiry started, dialed cold:
// a tunnel every IdleTimeout or so to a peer used less often than that
// paid the TCP (and TLS) handshakes the pool is there to save.
func (pl *Pool) renewAge() time.Duration {
	return max(pl.idleTimeout()-pl.sweepEvery(), pl.idleTimeout()/2)
}

// fresh counts p's idle connections younger than renewAge: those that
// count towards the target. The older ones are handed out only when no
// fresh one is left, and closed once replaced.
func (pl *Pool) fresh(p *peer, now time.Time) int {
	n := 0
	for _, ic := range p.idle {
		if now.Sub(ic.since) < pl.renewAge() {
			n++
		}
	}
	return n
}

// refillLocked starts dials until fresh idle connections plus in-flight
// dials reach the target.
func (pl *Pool) refillLocked(addr string, p *peer, now time.Time) {
	want := p.target(now, pl.useWindow(), pl.maxIdle()) - pl.fresh(p, now) - p.dialing
	for ; want > 0; want-- {
		p.dialing++
		pl.wg.Add(1)
		go pl.refill(addr, p)
	}
}

func (pl *Pool) refill(addr string, p *peer) {
	defer pl.wg.Done()
	timeout := pl.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-pl.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := pl.Dial(ctx, "tcp", addr)
	cancel()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p.dialing--
	if err != nil {
		// No retry loop: the next Take tries again, so a dead peer costs
		// one failed dial per tunnel that wanted it, not a dial storm.
		pl.observe(EventDialError)
		return
	}
	now := pl.now()
	if !pl.closed && len(p.idle) >= pl.maxIdle() && now.Sub(p.idle[0].since) >= pl.renewAge() {
		// A renewal: the new connection replaces the oldest.
		p.idle[0].c.Close()
		p.idle = append(p.idle[:0], p.idle[1:]...)
	}
	if pl.closed || len(p.idle) >= pl.maxIdle() {
		c.Close()
		return
	}
	p.idle = append(p.idle, idleConn{c: c, since: now})
}

// janitor closes expired connections and forgets unused peers.
func (pl *Pool) janitor() {
	defer pl.wg.Done()
	t := time.NewTicker(pl.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-pl.stop:
			return
		case <-t.C:
			pl.sweep()
		}
	}
}

// sweep closes the expired connections, and those due for renewal that
// fresh ones have replaced; it forgets unused peers and refills the rest,
// which renews the connections past renewAge.
func (pl *Pool) sweep() {
	pl.mu.Lock()
	now := pl.now()
	var expired []net.Conn
	for addr, p := range pl.peers {
		replaced := pl.fresh(p, now) >= p.target(now, pl.useWindow(), pl.maxIdle())
		keep := p.idle[:0]
		for _, ic := range p.idle {
			age := now.Sub(ic.since)
			if age >= pl.idleTimeout() || (replaced && age >= pl.renewAge()) {
				expired = append(expired, ic.c)
				continue
			}
			keep = append(keep, ic)
		}
		clear(p.idle[len(keep):])
		p.idle = keep
		if len(p.idle) == 0 && p.dialing == 0 && now.Sub(p.lastUse) > pl.useWindow() {
			delete(pl.peers, addr)
			continue
		}
		pl.refillLocked(addr, p, now)
	}
	pl.mu.Unlock()
	for _, c := range expired {
		pl.observe(EventExpired)
		c.Close()
	}
}

// Close closes every idle connection and stops refilling. Connections
// already handed out are the caller's.
func (pl *Pool) Close() {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return
	}
	pl.closed = true
	var all []net.Conn
	for _, p := range pl.peers {
		for _, ic := range p.idle {
			all = append(all, ic.c)
		}
		p.idle = nil
	}
	if pl.stop != nil {
		close(pl.stop)
	}
	pl.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	pl.wg.Wait()
}

// alive reports whether an idle connection is still usable: the peer has
// neither closed it nor sent anything (a relay listener never speaks first).
// It peeks without blocking, so it costs one syscall and no data. A TLS
// link (pkg/linktls) is peeked under its record layer: after the handshake
// a relay listener sends nothing (no session tickets), so any byte there is
// an alert or a close.
func alive(c net.Conn) bool {
	for { // a TLS link over a wrapper over the socket
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	cerr := rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the connection is quiet and open.
		// No error is EOF (0 bytes) or unexpected data: unusable.
		ok = errors.Is(err, syscall.EAGAIN)
		return true // never wait for readability
	})
	return cerr == nil && ok
}
