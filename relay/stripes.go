package relay

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
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

// maxPendingStripesPerPeer bounds the pending groups one peer (stripePeer)
// has started, so that one fleet member cannot hold every slot of
// maxPendingStripes with lone joins and stall all striped segments into
// this relay until the handshake timeout: it takes that many peers.
const maxPendingStripesPerPeer = 32

// maxAssembledStripes bounds the assembled groups remembered (an id and a
// time each), whatever the rate segments fill at. Beyond it the oldest is
// forgotten early: a join for it then starts a pending group, as a lone
// join does, given up at the handshake timeout and counted against its
// peer.
const maxAssembledStripes = 4096

// stripeGroups are the striped segments being assembled, by the nonce of
// their request: the request's link and the joins arrive in any order, on
// connections of their own.
type stripeGroups struct {
	mu     sync.Mutex
	groups map[[route.NonceBytes]byte]*stripeGroup
	// perPeer counts the groups in groups each peer started.
	perPeer map[netip.Prefix]int
	// assembled are the groups that filled, until the handshake timeout
	// after, when they are forgotten; assembledOrder holds the same
	// groups in the order they filled, the first to be forgotten first.
	// A group leaves pending when it fills, so without this a join for
	// a group already running (a duplicate, or a member's mischief)
	// would start a pending group of its own.
	assembled      map[[route.NonceBytes]byte]struct{}
	assembledOrder []assembledGroup
}

// assembledGroup is a group that filled, remembered until forget.
type assembledGroup struct {
	id     [route.NonceBytes]byte
	forget time.Time
}

// stripeGroup is one striped segment's links as they arrive.
type stripeGroup struct {
	links  []net.Conn    // by index; [0] the request's
	joined int           // links in
	peer   netip.Prefix  // the peer whose link started the group
	full   chan struct{} // closed when every link is in
	done   chan struct{} // closed when the group ends: its stream is over, or it was given up
	once   sync.Once
	// res is the group's share of the stripe budget, from its assembly
	// until its stream takes it (stream); the header's handler alone
	// touches it.
	res *stripe.Reservation
}

// The sides of a striped stream, for the budget's refusals: a segment into
// this relay, or one it opens.
const (
	stripeIn  = "in"
	stripeOut = "out"
)

var (
	errStripesFull      = errors.New("stripes: too many striped segments being assembled")
	errStripesPeerFull  = errors.New("stripes: too many striped segments being assembled from one peer")
	errStripesCount     = errors.New("stripes: link count differs from the segment's")
	errStripesTwice     = errors.New("stripes: link joined twice")
	errStripesAssembled = errors.New("stripes: link joined a segment already assembled")
)

// stripePeer is whom a pending group is counted against: the remote
// address of the link that started it, an IPv4 address or an IPv6 /64
// (one host's usual allocation; per address, one host would have 2^64
// peers). Not the name in the link's certificate: with the fleet secret
// every member can mint a certificate for any name, and plain links have
// none, so a name would cost a member nothing to change; an address does.
// A link without an IP address (a pipe) counts as one peer with all such.
func stripePeer(c net.Conn) netip.Prefix {
	a := remoteHost(c).WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits) // the zero Prefix for the zero Addr
	return p
}

// add puts link index of a segment of count links, which came from peer,
// into its group, making the group if it is the first to arrive. A group
// that fills is remembered for timeout (the handshake timeout), and a link
// for it refused meanwhile.
func (gs *stripeGroups) add(id [route.NonceBytes]byte, index, count int, c net.Conn, peer netip.Prefix, timeout time.Duration) (*stripeGroup, error) {
	now := time.Now()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.forgetAssembled(now)
	g := gs.groups[id]
	if g == nil {
		if _, ok := gs.assembled[id]; ok {
			return nil, errStripesAssembled
		}
		if len(gs.groups) >= maxPendingStripes {
			return nil, errStripesFull
		}
		if gs.perPeer[peer] >= maxPendingStripesPerPeer {
			return nil, errStripesPeerFull
		}
		if gs.groups == nil {
			gs.groups = map[[route.NonceBytes]byte]*stripeGroup{}
			gs.perPeer = map[netip.Prefix]int{}
			gs.assembled = map[[route.NonceBytes]byte]struct{}{}
		}
		g = &stripeGroup{links: make([]net.Conn, count), peer: peer, full: make(chan struct{}), done: make(chan struct{})}
		gs.groups[id] = g
		gs.perPeer[peer]++
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
		gs.drop(id, g) // assembled: no longer pending
		if len(gs.assembledOrder) >= maxAssembledStripes {
			gs.forgetOldest()
		}
		gs.assembled[id] = struct{}{}
		gs.assembledOrder = append(gs.assembledOrder, assembledGroup{id: id, forget: now.Add(timeout)})
	}
	return g, nil
}

// drop takes the pending group g, of id, out of gs. gs.mu held.
func (gs *stripeGroups) drop(id [route.NonceBytes]byte, g *stripeGroup) {
	delete(gs.groups, id)
	if gs.perPeer[g.peer]--; gs.perPeer[g.peer] <= 0 {
		delete(gs.perPeer, g.peer)
	}
}

// forgetAssembled forgets the assembled groups whose time is up. They are
// in the order they filled, each remembered for the relay's handshake
// timeout (fixed at start), so those are at the front. gs.mu held.
func (gs *stripeGroups) forgetAssembled(now time.Time) {
	for len(gs.assembledOrder) > 0 && !now.Before(gs.assembledOrder[0].forget) {
		gs.forgetOldest()
	}
}

// forgetOldest forgets the group that filled first. gs.mu held.
func (gs *stripeGroups) forgetOldest() {
	delete(gs.assembled, gs.assembledOrder[0].id)
	gs.assembledOrder = gs.assembledOrder[1:]
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
		gs.drop(id, g)
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
	g, err := s.stripes.add(j.Group, j.Index, j.Count, c, stripePeer(c), s.cfg.Limits.HandshakeTimeout)
	if err != nil {
		s.handshakeFailed(log, "relay", "join", err)
		return
	}
	if _, ok := s.stripes.wait(j.Group, g, s.cfg.Limits.HandshakeTimeout); ok {
		<-g.done
	}
}

// awaitStripes gathers the other links of the striped segment req came in
// on (link c, read through br), within the handshake timeout, and reserves
// its stream's memory. The caller answers on c, then reads the stream from
// stream, and calls finish when its handler is done with the group. A group
// that assembled but was refused its memory comes back with the error: the
// caller finishes it too.
func (s *Server) awaitStripes(log *zap.Logger, c net.Conn, br *bufio.Reader, req *route.Request) (g *stripeGroup, err error) {
	if br.Buffered() > 0 {
		return nil, errors.New("stripes: early data on a striped segment")
	}
	g, err = s.stripes.add(req.Nonce, 0, req.InStripes, c, stripePeer(c), s.cfg.Limits.HandshakeTimeout)
	if err != nil {
		return nil, err
	}
	if joined, ok := s.stripes.wait(req.Nonce, g, s.cfg.Limits.HandshakeTimeout); !ok {
		return nil, fmt.Errorf("stripes: %d of %d links joined within %s", joined, req.InStripes, s.cfg.Limits.HandshakeTimeout)
	}
	// The stream's memory is reserved whole, now that the group is
	// complete (a pending group holds none), and before the route goes
	// on. A stream the budget cannot cover is refused rather than given
	// a smaller window: a window shrunk to what is left would cap the
	// segment at window/RTT across the very crossing it was striped for,
	// silently, so the plan that asked for it would predict a rate that
	// never comes and nobody would be told; and those that came first
	// would keep their full windows anyway. Refused, the sender hears
	// why, and the operator sees it counted. The budget covers the
	// chunks a stream can hold at most (stripe.HeldBytes), so what all
	// streams hold together can never pass it.
	if g.res, err = s.stripeBudget.Reserve(req.InStripes, 0); err != nil {
		s.stripeBudgetRefused(log, stripeIn, err, zap.Int("links", req.InStripes))
		return g, fmt.Errorf("stripes: refused: this relay's memory for striped streams (limits.stripe_reorder_bytes) is in use: %w", err)
	}
	return g, nil
}

// stripeBudgetRefused counts a striped stream refused for want of budget
// (err, a *stripe.BudgetError) on side (stripeIn, stripeOut), and logs it,
// sampled: a fleet member decides how often this runs.
func (s *Server) stripeBudgetRefused(log *zap.Logger, side string, err error, fields ...zap.Field) {
	s.metrics.stripeBudgetRefusals.WithLabelValues(side).Inc()
	n, ok := s.refusals.allow("stripe_budget_" + side)
	if !ok {
		return
	}
	fields = append(fields, zap.String("side", side), zap.Int("not_logged_since_last", n))
	var be *stripe.BudgetError
	if errors.As(err, &be) {
		fields = append(fields, zap.Int64("need_bytes", be.NeedBytes), zap.Int64("free_bytes", be.FreeBytes), zap.Int64("limit_bytes", be.LimitBytes))
	}
	log.Warn("striped stream refused: limits.stripe_reorder_bytes in use", fields...)
}

// stream is the striped stream over g's links, their deadlines cleared,
// made on g's reservation, which it then owns (Close releases it).
func (g *stripeGroup) stream() (*stripe.Conn, error) {
	for _, l := range g.links {
		_ = l.SetDeadline(time.Time{})
	}
	sc, err := stripe.NewReserved(g.links, g.res)
	if err == nil {
		g.res = nil
	}
	return sc, err
}

// finish is the header's handler done with g: the reservation goes back
// unless a stream took it, and the joins' handlers are released (end).
func (g *stripeGroup) finish() {
	g.res.Release()
	g.res = nil
	g.end()
}
