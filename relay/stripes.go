package relay

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// maxPendingStripes bounds the striped segments a relay assembles at once:
// each holds its links until the last one joins or the handshake timeout.
// Only fleet members can start one (joins and headers are MAC'd).
const maxPendingStripes = 256

// stripeGroups are the striped segments being assembled, by the nonce of
// their request: the request's link and the joins arrive in any order, on
// connections of their own.
type stripeGroups struct {
	mu     sync.Mutex
	groups map[[route.NonceBytes]byte]*stripeGroup
}

// stripeGroup is one striped segment's links as they arrive.
type stripeGroup struct {
	links  []net.Conn    // by index; [0] the request's
	joined int           // links in
	full   chan struct{} // closed when every link is in
	done   chan struct{} // closed when the group ends: its stream is over, or it was given up
	once   sync.Once
}

var (
	errStripesFull  = errors.New("stripes: too many striped segments being assembled")
	errStripesCount = errors.New("stripes: link count differs from the segment's")
	errStripesTwice = errors.New("stripes: link joined twice")
)

// add puts link index of a segment of count links into its group, making
// the group if it is the first to arrive.
func (gs *stripeGroups) add(id [route.NonceBytes]byte, index, count int, c net.Conn) (*stripeGroup, error) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.groups[id]
	if g == nil {
		if len(gs.groups) >= maxPendingStripes {
			return nil, errStripesFull
		}
		if gs.groups == nil {
			gs.groups = map[[route.NonceBytes]byte]*stripeGroup{}
		}
		g = &stripeGroup{links: make([]net.Conn, count), full: make(chan struct{}), done: make(chan struct{})}
		gs.groups[id] = g
	}
	switch {
	case len(g.links) != count:
		return nil, errStripesCount
	case g.links[index] != nil:
		return nil, errStripesTwice
	}
	g.links[index] = c
	g.joined++
	if g.joined == count {
		close(g.full)
		delete(gs.groups, id) // assembled: no longer pending
	}
	return g, nil
}

// wait waits up to timeout for every link of g. On timeout the group is
// given up (its other links' handlers return and close them), unless the
// last link came in meanwhile; joined is how many links had come.
func (gs *stripeGroups) wait(id [route.NonceBytes]byte, g *stripeGroup, timeout time.Duration) (joined int, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-g.full:
		return len(g.links), true
	case <-g.done: // another of its links gave it up
	case <-t.C:
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.joined == len(g.links) {
		return g.joined, true
	}
	if gs.groups[id] == g {
		delete(gs.groups, id)
	}
	g.end()
	return g.joined, false
}

// end releases the joined links' handlers: the stream over them is over.
func (g *stripeGroup) end() { g.once.Do(func() { close(g.done) }) }

// serveJoin handles a link joining a striped segment (route.Join): once
// verified, its handler holds the link for the segment's stream, which the
// request's handler runs, and returns when that ends (closing the link).
func (s *Server) serveJoin(log *zap.Logger, c net.Conn, br *bufio.Reader, key, bind []byte) {
	j, err := route.ReadJoin(br, key, bind)
	if err != nil {
		if errors.Is(err, route.ErrAuth) {
			s.routeDenied(log, "route_auth", err)
			return
		}
		s.handshakeFailed(log, "relay", "join", err)
		return
	}
	if err := s.replay.CheckJoin(j); err != nil {
		s.routeDenied(log, "route_replay", err)
		return
	}
	if br.Buffered() > 0 { // the stream starts only after the status
		s.handshakeFailed(log, "relay", "join", errors.New("bytes behind a join"))
		return
	}
	g, err := s.stripes.add(j.Group, j.Index, j.Count, c)
	if err != nil {
		s.handshakeFailed(log, "relay", "join", err)
		return
	}
	if _, ok := s.stripes.wait(j.Group, g, s.cfg.Limits.HandshakeTimeout); ok {
		<-g.done
	}
}

// awaitStripes gathers the other links of the striped segment req came in
// on (link c, read through br), within the handshake timeout. The caller
// answers on c, then reads the stream from stripeConn, and calls end when
// the stream is over.
func (s *Server) awaitStripes(c net.Conn, br *bufio.Reader, req *route.Request) (g *stripeGroup, err error) {
	if br.Buffered() > 0 {
		return nil, errors.New("stripes: early data on a striped segment")
	}
	g, err = s.stripes.add(req.Nonce, 0, req.InStripes, c)
	if err != nil {
		return nil, err
	}
	if joined, ok := s.stripes.wait(req.Nonce, g, s.cfg.Limits.HandshakeTimeout); !ok {
		return nil, fmt.Errorf("stripes: %d of %d links joined within %s", joined, req.InStripes, s.cfg.Limits.HandshakeTimeout)
	}
	return g, nil
}

// stream is the striped stream over g's links, their deadlines cleared.
func (g *stripeGroup) stream() (*stripe.Conn, error) {
	for _, l := range g.links {
		_ = l.SetDeadline(time.Time{})
	}
	return stripe.New(g.links, 0)
}
