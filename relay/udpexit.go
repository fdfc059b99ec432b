package relay

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/route"
)

// udpExit is an association's face to its destinations: one UDP socket of
// its own, from which each datagram goes to the address its destination
// resolves to, if the destination policy allows that address (checked per
// datagram, on the resolved IP: a name may resolve anywhere, and resolve
// differently later). Only the addresses it has sent to may answer
// (address- and port-restricted, as a NAT): whoever learns the socket's port
// cannot send to the client through it.
type udpExit struct {
	a    *association
	conn *net.UDPConn
	// names are the association's resolved destination names (sender
	// goroutine only).
	names map[string]resolvedName
	mu    sync.Mutex
	peers map[netip.AddrPort]time.Time // sent to, and when last
}

type resolvedName struct {
	ip    netip.Addr
	err   error
	until time.Time
}

// Bounds of what one association remembers: names a client resolves
// through it (a DNS answer is cached for resolveTTL, a failure for
// resolveFailTTL) and destinations that may answer (the least recently
// sent to is forgotten first).
const (
	maxResolvedNames = 64
	resolveTTL       = 30 * time.Second
	resolveFailTTL   = 5 * time.Second
	resolveTimeout   = 5 * time.Second
	maxExitPeers     = 1024
)

// maxDatagramBytes is the largest UDP payload (IPv6's; IPv4's is 65,507).
const maxDatagramBytes = 65527

// newUDPExit opens the exit socket: unbound (every address, a port the
// kernel picks), IPv6 and IPv4 alike.
func (a *association) newUDPExit() (*udpExit, error) {
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	a.hold(conn)
	return &udpExit{a: a, conn: conn, names: map[string]resolvedName{}, peers: map[netip.AddrPort]time.Time{}}, nil
}

// send sends d to its destination, or drops it (counted, a denial logged
// sampled).
func (e *udpExit) send(d *route.Datagram) {
	a := e.a
	ip := d.IP
	if !ip.IsValid() {
		var err error
		if ip, err = e.resolve(d.Host); err != nil {
			a.drop(sideExit, "resolve")
			a.log.Debug("udp destination not resolved", zap.String("dst", d.Addr()), zap.Error(err))
			return
		}
	}
	pol := a.s.policy
	err := pol.CheckPort(d.Port)
	if err == nil {
		err = pol.Check(ip)
	}
	if err != nil {
		a.denied(sideExit, d.Addr(), err, zap.String("ip", ip.String()))
		return
	}
	to := netip.AddrPortFrom(ip.Unmap(), d.Port)
	e.remember(to)
	if _, err := e.conn.WriteToUDPAddrPort(d.Payload, to); err != nil {
		a.drop(sideExit, "send_error")
		return
	}
	a.passed(sideExit, "up", len(d.Payload))
}

// resolve is host's address, from the association's cache or the
// resolver (the first address it gives).
func (e *udpExit) resolve(host string) (netip.Addr, error) {
	now := time.Now()
	if r, ok := e.names[host]; ok && now.Before(r.until) {
		return r.ip, r.err
	}
	ctx, cancel := context.WithTimeout(e.a.s.ctx, resolveTimeout)
	defer cancel()
	r := resolvedName{until: now.Add(resolveTTL)}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	switch {
	case err != nil:
		r.err, r.until = err, now.Add(resolveFailTTL)
	case len(ips) == 0:
		r.err, r.until = &net.DNSError{Err: "no address", Name: host, IsNotFound: true}, now.Add(resolveFailTTL)
	default:
		r.ip = ips[0].Unmap()
	}
	if len(e.names) >= maxResolvedNames {
		clear(e.names)
	}
	e.names[host] = r
	return r.ip, r.err
}

// remember lets to answer.
func (e *udpExit) remember(to netip.AddrPort) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.peers[to]; !ok && len(e.peers) >= maxExitPeers {
		var oldest netip.AddrPort
		var at time.Time
		for p, t := range e.peers {
			if at.IsZero() || t.Before(at) {
				oldest, at = p, t
			}
		}
		delete(e.peers, oldest)
	}
	e.peers[to] = now
}

func (e *udpExit) knows(from netip.AddrPort) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.peers[from]
	return ok
}

// replies reads the destinations' datagrams and hands each to deliver
// (its payload valid until deliver returns) until the socket closes.
func (e *udpExit) replies(deliver func(src netip.AddrPort, payload []byte)) {
	buf := make([]byte, maxDatagramBytes+1)
	for {
		n, from, err := e.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				e.a.end(endLinkError)
			}
			return
		}
		from = unmapped(from)
		if !e.knows(from) {
			e.a.drop(sideExit, "unsolicited")
			continue
		}
		e.a.passed(sideExit, "down", n)
		deliver(from, buf[:n])
	}
}

// sendQueued sends what q holds, a batch at a time, until q closes: the
// entry's own exit when it has no chain.
func (e *udpExit) sendQueued(q *udpQueue) {
	var spare []byte
	for {
		frames, ok := q.take(spare)
		if !ok {
			return
		}
		for rest := frames; len(rest) > 0; {
			var d route.Datagram
			var err error
			if d, rest, err = route.SplitFrame(rest); err != nil {
				// Cannot happen: push framed them.
				e.a.drop(sideExit, "malformed")
				break
			}
			e.send(&d)
		}
		spare = frames
	}
}

// serveRelayUDP serves a route header that opens a UDP association
// (docs/protocol.md): with hops left, pass it on and tunnel the link's
// frames through; as the last relay, be its exit. The caller releases the
// conn under c, unless a tunnel took it over (handOff).
func (s *Server) serveRelayUDP(log *zap.Logger, c net.Conn, br *bufio.Reader, key []byte, req *route.Request) {
	log = log.WithLazy(zap.Bool("udp", true), zap.Strings("via", req.Hops))
	_ = c.SetDeadline(time.Now().Add(s.cfg.Limits.DialTimeout + s.cfg.Limits.HandshakeTimeout))
	if len(req.Hops) > 0 {
		s.forwardAssociation(log, c, br, key, req)
		return
	}
	s.exitAssociation(log, c, br, key, req)
}

// forwardAssociation reaches the next relays with the association's
// header and, once the exit answered, carries the link's bytes both ways
// as a tunnel: a middle relay does not look into the frames.
func (s *Server) forwardAssociation(log *zap.Logger, c net.Conn, br *bufio.Reader, key []byte, req *route.Request) {
	ch, err := s.routeChain(log, req)
	if err != nil {
		return
	}
	var up net.Conn
	if ach, err2 := associateChain(ch); err2 != nil {
		err = err2
	} else {
		up, err = s.dialAssociationVia(log, ach)
	}
	resp := routeResponse(err)
	if err != nil {
		s.metrics.tunnelsOpened.WithLabelValues("relay", chain.Classify(err).Label()).Inc()
	}
	msg, merr := resp.Marshal(key, req.Nonce)
	if merr != nil || err != nil {
		if merr == nil {
			_, _ = c.Write(msg)
		}
		if up != nil {
			up.Close()
		}
		return
	}
	s.openTunnel(log, "relay", c, msg, br, up)
}

// exitAssociation is the last relay's part: a UDP socket toward the
// destinations, datagrams from the link's frames out through it, replies
// framed back on the link, until the link closes or the association is
// idle for twice limits.udp_idle_timeout.
func (s *Server) exitAssociation(log *zap.Logger, c net.Conn, br *bufio.Reader, key []byte, req *route.Request) {
	resp := route.Response{Status: route.StatusOK}
	admitted := s.assocs.admitExit(s.cfg.Limits.UDPMaxAssociations)
	if admitted {
		defer s.assocs.releaseExit()
	} else {
		s.refused(log, "udp_max_associations", "udp association refused: limit reached", zap.Int("limit", s.cfg.Limits.UDPMaxAssociations))
		resp = route.Response{Status: route.StatusGeneral, Reason: "UDP associations at this relay's limit"}
	}
	var a *association
	var exit *udpExit
	if admitted {
		a = s.newAssociation(log, sideExit)
		defer a.finish()
		a.hold(c)
		var err error
		if exit, err = a.newUDPExit(); err != nil {
			log.Warn("udp exit socket", zap.Error(err))
			resp = route.Response{Status: route.StatusGeneral, Reason: "no UDP socket: " + err.Error()}
			defer a.end(endLinkError)
		}
	}
	msg, err := resp.Marshal(key, req.Nonce)
	if err != nil { // cannot happen: the reason is short, the status ours
		log.Error("route response", zap.Error(err))
		if a != nil {
			a.end(endLinkError)
		}
		return
	}
	if _, err := c.Write(msg); err != nil || resp.Status != route.StatusOK {
		if a != nil {
			a.end(endLinkError)
		}
		return
	}
	_ = c.SetDeadline(time.Time{})
	s.runExit(a, exit, c, br)
}

// runExit pumps an exit's datagrams between its link and its socket.
func (s *Server) runExit(a *association, exit *udpExit, c net.Conn, br *bufio.Reader) {
	down := newUDPQueue(s.cfg.Limits.UDPBufferBytes)
	a.hold(down)
	// The entry ends an idle association and closes its link; the exit's
	// own bound, later, only catches an entry that vanished without a FIN.
	a.goRun(func() { a.watchIdle(2 * s.cfg.Limits.UDPIdleTimeout) })
	a.goRun(func() {
		if err := writeFrames(down, c); err != nil {
			a.end(endLinkError)
		}
	})
	a.goRun(func() {
		exit.replies(func(src netip.AddrPort, payload []byte) {
			d := route.Datagram{IP: src.Addr(), Port: src.Port(), Payload: payload}
			if full, err := down.push(&d); err != nil {
				a.drop(sideExit, "malformed")
			} else if full {
				a.drop(sideExit, "queue_full")
			}
		})
	})
	buf := make([]byte, route.MaxFrameBytes)
	for {
		d, err := route.ReadFrame(br, buf)
		if err != nil {
			switch {
			case s.ctx.Err() != nil:
				a.end(endShutdown)
			case errors.Is(err, route.ErrMalformed):
				a.log.Info("udp association: malformed frame on the link", zap.Error(err))
				a.end(endLinkError)
			default: // the entry closed it (EOF), or our end closed c
				a.end(endLinkClosed)
			}
			return
		}
		exit.send(&d)
	}
}
