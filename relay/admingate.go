package relay

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The admin API's port is public (peers, relayctl and health checks reach
// it), so nothing a stranger can do there may keep the fleet out. A
// stranger cannot authenticate; what it can hold is connections:
//
//   - at most maxAdminConns at once in all, and maxAdminConnsPerHost from
//     one address other than loopback (peers and relayctl need a few each;
//     the local health checks and a fleet run on one host share loopback).
//     A connection over the per-host cap is closed at once rather than left
//     in the kernel's accept queue, where it would hold up the honest ones
//     queued behind it;
//   - when all maxAdminConns places are taken, a new connection takes the
//     place of the oldest one that has carried no authenticated request
//     (strangers from many addresses cannot hold the port against the
//     fleet: a newcomer authenticates within a round trip or two, long
//     before the stranger could open the whole budget again); only when
//     every place is authenticated is a new connection refused;
//   - a connection that has carried no authenticated request is closed
//     once it has been idle adminAnonIdle (a kept-alive /healthz), and one
//     that sends nothing within the server's ReadHeaderTimeout; an
//     authenticated one is kept adminIdleTimeout, as peers' pulls want.
const (
	maxAdminConns        = 1024
	maxAdminConnsPerHost = 32
	adminAnonIdle        = 5 * time.Second
)

// adminGate admits the admin listener's connections under the caps above
// and closes anonymous idle ones (ConnState).
type adminGate struct {
	net.Listener
	refused  func() // counts and logs a refused connection, sampled
	maxTotal int
	maxHost  int
	anonIdle time.Duration

	mu     sync.Mutex
	total  int
	byHost map[netip.Addr]int
	anon   *list.List // of *gatedConn: admitted, no authenticated request yet; oldest first
}

func newAdminGate(ln net.Listener, refused func()) *adminGate {
	return &adminGate{Listener: ln, refused: refused, maxTotal: maxAdminConns, maxHost: maxAdminConnsPerHost,
		anonIdle: adminAnonIdle, byHost: map[netip.Addr]int{}, anon: list.New()}
}

// Accept returns the next connection within the caps, closing the ones
// over them.
func (g *adminGate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc, ok := g.admitEvicting(c); ok {
			return gc, nil
		}
		c.Close()
		g.refused()
	}
}

// admitEvicting is admit, making room when every place is taken by closing
// the oldest anonymous connection.
func (g *adminGate) admitEvicting(c net.Conn) (*gatedConn, bool) {
	gc, full, ok := g.admit(c)
	if ok || !full {
		return gc, ok
	}
	victim := g.oldestAnon()
	if victim == nil {
		return nil, false
	}
	victim.Close() // gives its place back
	gc, _, ok = g.admit(c)
	return gc, ok
}

// admit counts c against the caps; ok false when it is over one, full
// when the one is the total.
func (g *adminGate) admit(c net.Conn) (gc *gatedConn, full, ok bool) {
	host := remoteHost(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !host.IsLoopback() && g.byHost[host] >= g.maxHost {
		return nil, false, false
	}
	if g.total >= g.maxTotal {
		return nil, true, false
	}
	g.total++
	g.byHost[host]++
	gc = &gatedConn{Conn: c, gate: g, host: host}
	gc.anonElem = g.anon.PushBack(gc)
	return gc, false, true
}

// oldestAnon takes the oldest anonymous connection off the list (nil when
// there is none), for the caller to close.
func (g *adminGate) oldestAnon() *gatedConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.anon.Front()
	if e == nil {
		return nil
	}
	c := g.anon.Remove(e).(*gatedConn)
	c.anonElem = nil
	return c
}

// known takes c off the anonymous list: it carried an authenticated request.
func (g *adminGate) known(c *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unlistLocked(c)
}

// unlistLocked takes c off the anonymous list if it is on it; g.mu held.
func (g *adminGate) unlistLocked(c *gatedConn) {
	if c.anonElem != nil {
		g.anon.Remove(c.anonElem)
		c.anonElem = nil
	}
}

func (g *adminGate) release(c *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unlistLocked(c)
	g.total--
	if g.byHost[c.host]--; g.byHost[c.host] <= 0 {
		delete(g.byHost, c.host)
	}
}

// remoteHost is c's remote address, unmapped; the zero Addr when it has
// none (then it counts as one host).
func remoteHost(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// gatedConn is an admitted connection: it gives its place back when
// closed, and knows whether it carried an authenticated request.
type gatedConn struct {
	net.Conn
	gate   *adminGate
	host   netip.Addr
	once   sync.Once
	authed atomic.Bool
	mu     sync.Mutex
	idle   *time.Timer // set while idle and anonymous
	// anonElem is c in the gate's anonymous list, nil once authenticated
	// or taken off it; guarded by the gate's mu.
	anonElem *list.Element
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.stopIdle()
		c.gate.release(c)
	})
	return err
}

func (c *gatedConn) stopIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
}

// connState is the admin server's ConnState hook: an anonymous connection
// going idle is closed after anonIdle unless a request comes first.
func (g *adminGate) connState(nc net.Conn, st http.ConnState) {
	c := gatedOf(nc)
	if c == nil {
		return
	}
	switch st {
	case http.StateIdle:
		if c.authed.Load() {
			return
		}
		c.mu.Lock()
		if c.idle == nil {
			c.idle = time.AfterFunc(g.anonIdle, func() { nc.Close() })
		}
		c.mu.Unlock()
	case http.StateActive, http.StateClosed, http.StateHijacked:
		c.stopIdle()
	}
}

// gatedOf is the gatedConn under a connection the admin server holds
// (itself, or inside the TLS sniffer); nil when there is none.
func gatedOf(c net.Conn) *gatedConn {
	if sc, ok := c.(*sniffConn); ok {
		c = sc.Conn
	}
	gc, _ := c.(*gatedConn)
	return gc
}

type gatedConnKey struct{}

// markAuthed records that the request in ctx came with the admin token:
// its connection is kept adminIdleTimeout when idle, not adminAnonIdle.
func markAuthed(ctx context.Context) {
	if c, ok := ctx.Value(gatedConnKey{}).(*gatedConn); ok {
		if !c.authed.Swap(true) {
			c.gate.known(c)
		}
	}
}
