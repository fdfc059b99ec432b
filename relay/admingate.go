package relay

import (
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
//     A connection over either cap is closed at once rather than left in
//     the kernel's accept queue, where it would hold up the honest ones
//     queued behind it;
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
}

func newAdminGate(ln net.Listener, refused func()) *adminGate {
	return &adminGate{Listener: ln, refused: refused, maxTotal: maxAdminConns, maxHost: maxAdminConnsPerHost,
		anonIdle: adminAnonIdle, byHost: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps, closing the ones
// over them.
func (g *adminGate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc, ok := g.admit(c); ok {
			return gc, nil
		}
		c.Close()
		g.refused()
	}
}

// admit counts c against the caps; false when it is over one.
func (g *adminGate) admit(c net.Conn) (*gatedConn, bool) {
	host := remoteHost(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.total >= g.maxTotal || (!host.IsLoopback() && g.byHost[host] >= g.maxHost) {
		return nil, false
	}
	g.total++
	g.byHost[host]++
	return &gatedConn{Conn: c, gate: g, host: host}, true
}

func (g *adminGate) release(host netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.total--
	if g.byHost[host]--; g.byHost[host] <= 0 {
		delete(g.byHost, host)
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
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.stopIdle()
		c.gate.release(c.host)
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
		c.authed.Store(true)
	}
}
