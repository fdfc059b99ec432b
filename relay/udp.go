package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

// udpEntry is the entry's side of an association: the client's control
// connection, the UDP socket it sends its datagrams to, and the way on to
// the exit, chosen when its first datagram comes (as a connection to that
// datagram's destination would be routed), for the association's life.
type udpEntry struct {
	*association
	client *net.UDPConn
	// ctrlIP is the control connection's source: only datagrams from it
	// are taken. wantPort, when not 0, is the source port the client said
	// it sends from (held to only when it named its address as we see it:
	// behind a NAT it names one we never see).
	ctrlIP   netip.Addr
	wantPort uint16
	// peer is the client's UDP address, locked on its first datagram; set
	// by fromClient before anything can be sent to it.
	peer netip.AddrPort
	up   *udpQueue // toward the exit
}

// serveUDPAssociate answers a SOCKS5 UDP ASSOCIATE (RFC 1928 §7) on the
// control connection c and serves the association until c closes, or it
// is idle for limits.udp_idle_timeout. want is the request's address: where
// the client says it will send from. The caller closes c.
func (s *Server) serveUDPAssociate(log *zap.Logger, c *net.TCPConn, want socks5.Addr) {
	lim := s.cfg.Limits
	if lim.UDPMaxAssociations == 0 {
		_, _ = c.Write(socks5.MarshalReply(socks5.ReplyCommandNotSupported, socks5.Addr{}))
		s.handshakeFailed(log, "socks5", "request", errors.New("UDP ASSOCIATE is off (limits.udp_max_associations: 0)"))
		return
	}
	src := remoteHost(c)
	if rule, ok := s.assocs.admitEntry(src, lim.UDPMaxAssociations, lim.UDPMaxPerSource); !ok {
		_, _ = c.Write(socks5.MarshalReply(socks5.ReplyGeneralFailure, socks5.Addr{}))
		s.refused(log, rule, "udp association refused: limit reached",
			zap.Int("udp_max_associations", lim.UDPMaxAssociations), zap.Int("udp_max_per_source", lim.UDPMaxPerSource))
		return
	}
	defer s.assocs.releaseEntry(src)
	// The client reaches the UDP socket where it reached us: the reply's
	// BND.ADDR must be an address it can send to, never 0.0.0.0.
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		_, _ = c.Write(socks5.MarshalReply(socks5.ReplyGeneralFailure, socks5.Addr{}))
		log.Warn("udp associate: no socket", zap.Error(err))
		return
	}
	a := &udpEntry{association: s.newAssociation(log, sideEntry), client: pc, ctrlIP: src,
		up: newUDPQueue(lim.UDPBufferBytes)}
	defer a.finish()
	a.hold(pc)
	a.hold(a.up)
	a.hold(c)
	if want.IP.IsValid() && want.IP.Unmap() == src {
		a.wantPort = want.Port
	}
	bound := socks5.Addr{IP: local, Port: uint16(pc.LocalAddr().(*net.UDPAddr).Port)}
	if _, err := c.Write(socks5.MarshalReply(socks5.ReplySucceeded, bound)); err != nil {
		a.end(endClientClosed)
		return
	}
	log.Debug("udp association", zap.String("bound", bound.String()))
	a.goRun(func() { a.watchIdle(lim.UDPIdleTimeout) })
	a.goRun(a.fromClient)
	a.watchControl(c)
}

// watchControl waits for the control connection to close: the association
// lives as long as it does (RFC 1928 §7). What the client sends on it
// means nothing and is discarded.
func (a *udpEntry) watchControl(c net.Conn) {
	_ = c.SetDeadline(time.Time{})
	_, _ = io.Copy(io.Discard, c)
	if a.s.ctx.Err() != nil {
		a.end(endShutdown)
		return
	}
	a.end(endClientClosed)
}

// fromClient reads the client's datagrams and queues each toward the
// exit; the first also chooses the way there.
func (a *udpEntry) fromClient() {
	buf := make([]byte, maxDatagramBytes+1)
	started := false
	for {
		n, from, err := a.client.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				a.end(endLinkError)
			}
			return
		}
		if !a.admit(unmapped(from)) {
			a.drop(sideEntry, "stranger")
			continue
		}
		dst, payload, err := socks5.ParseUDPDatagram(buf[:n])
		switch {
		case errors.Is(err, socks5.ErrFragment):
			a.drop(sideEntry, "fragmented")
			continue
		case err != nil:
			a.drop(sideEntry, "malformed")
			continue
		}
		d := route.Datagram{Host: dst.Host, IP: dst.IP, Port: dst.Port, Payload: payload}
		// What this relay refuses itself is refused here, chained or
		// not, as for a connection: a denied port or literal address,
		// a REJECT rule. The exit checks the rest, resolved.
		if err := a.s.refusedHere(d.Addr()); err != nil {
			a.denied(sideEntry, d.Addr(), err)
			continue
		}
		if !started {
			started = true
			first := d.Addr()
			a.goRun(func() { a.connect(first) })
		}
		full, err := a.up.push(&d)
		switch {
		case err != nil:
			a.drop(sideEntry, "malformed")
		case full:
			a.drop(sideEntry, "queue_full")
		default:
			a.passed(sideEntry, "up", len(payload))
		}
	}
}

// admit says whether a datagram from src is the client's: from the
// control connection's address (and the port it named, if it did), the
// first such source locking the association to it.
func (a *udpEntry) admit(src netip.AddrPort) bool {
	if a.peer.IsValid() {
		return src == a.peer
	}
	if src.Addr() != a.ctrlIP || (a.wantPort != 0 && src.Port() != a.wantPort) {
		return false
	}
	a.peer = src
	return true
}

// connect finds the way to the exit for the association's first
// destination and carries its datagrams: this relay's own exit without
// a chain, else a link through the chain to its last relay.
func (a *udpEntry) connect(first string) {
	link, err := a.s.dialAssociation(a.log, first)
	if err != nil {
		a.end(endChainFailed)
		return
	}
	if link == nil {
		a.exitHere()
		return
	}
	a.hold(link)
	a.goRun(func() {
		if err := writeFrames(a.up, link); err != nil {
			a.end(endLinkError)
		}
	})
	a.fromLink(link)
}

// exitHere sends the datagrams from this relay: it has no chain.
func (a *udpEntry) exitHere() {
	exit, err := a.newUDPExit()
	if err != nil {
		a.log.Warn("udp exit socket", zap.Error(err))
		a.end(endLinkError)
		return
	}
	a.goRun(func() { exit.sendQueued(a.up) })
	out := make([]byte, 0, socks5.UDPHeaderMax+maxDatagramBytes)
	exit.replies(func(src netip.AddrPort, payload []byte) {
		out = a.toClient(out, src, payload)
	})
}

// fromLink hands the replies the exit framed on the link to the client,
// until the link ends.
func (a *udpEntry) fromLink(link net.Conn) {
	buf := make([]byte, route.MaxFrameBytes)
	out := make([]byte, 0, socks5.UDPHeaderMax+maxDatagramBytes)
	for {
		d, err := route.ReadFrame(link, buf)
		if err != nil {
			switch {
			case errors.Is(err, route.ErrMalformed):
				a.log.Info("udp association: malformed frame on the link", zap.Error(err))
				a.end(endLinkError)
			case a.s.ctx.Err() != nil:
				a.end(endShutdown)
			default:
				a.end(endLinkClosed)
			}
			return
		}
		if !d.IP.IsValid() { // a source is always an IP
			a.drop(sideEntry, "malformed")
			continue
		}
		out = a.toClient(out, netip.AddrPortFrom(d.IP, d.Port), d.Payload)
	}
}

// toClient sends the client a datagram from src, built in out (returned
// for reuse).
func (a *udpEntry) toClient(out []byte, src netip.AddrPort, payload []byte) []byte {
	out = socks5.AppendUDPHeader(out[:0], socks5.Addr{IP: src.Addr().Unmap(), Port: src.Port()})
	out = append(out, payload...)
	if _, err := a.client.WriteToUDPAddrPort(out, a.peer); err != nil {
		a.drop(sideEntry, "send_error")
		return out
	}
	a.passed(sideEntry, "down", len(payload))
	return out
}

// dialAssociation opens the link to the exit of an association whose
// first datagram goes to first: through the chain a connection to first
// would take. nil without a chain: this relay is the exit.
func (s *Server) dialAssociation(log *zap.Logger, first string) (net.Conn, error) {
	ch := s.chain.Load()
	if s.policy.CheckHostPort(first) == nil {
		var err error
		if ch, err = s.chainFor(s.ctx, first); err != nil {
			log.Info("udp association: no route", zap.String("dst", first), zap.Error(err))
			return nil, err
		}
	}
	if len(ch.Hops) == 0 {
		return nil, nil
	}
	ach, err := associateChain(ch)
	if err != nil {
		log.Warn("udp association: no way to carry it", zap.Error(err))
		return nil, err
	}
	link, err := s.dialAssociationVia(log, ach)
	if err != nil {
		if r := s.router.Load(); r != nil {
			if fo, ok := (*r).(FailureObserver); ok {
				fo.Failed(ch, err)
			}
		}
	}
	return link, err
}

// dialAssociationVia reaches the exit of ch, an associateChain, within
// limits.dial_timeout; a failure is logged with the hop that failed.
func (s *Server) dialAssociationVia(log *zap.Logger, ch *chain.Chain) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Limits.DialTimeout)
	defer cancel()
	link, err := ch.DialEarly(ctx, "udp", nil)
	if err == nil {
		return link, nil
	}
	fields := []zap.Field{zap.String("kind", chain.Classify(err).Label()), zap.Error(err)}
	var he *chain.HopError
	if errors.As(err, &he) {
		fields = append(fields, zap.Int("hop", he.Hop), zap.String("hop_name", he.HopName))
	}
	log.Info("udp association: chain failed", fields...)
	return nil, err
}

// associateChain is ch with its header made a UDP association's. Only
// relays carry datagrams: a chain with a SOCKS5 or HTTP hop cannot.
func associateChain(ch *chain.Chain) (*chain.Chain, error) {
	for _, h := range ch.Hops {
		if h.Scheme != nexthop.Relaymesh {
			return nil, fmt.Errorf("UDP travels only through relaymesh:// hops, and the chain has %s", h.Name())
		}
	}
	rc, ok := ch.Hops[0].Client.(route.Client)
	if !ok {
		return nil, fmt.Errorf("hop %s has no route client", ch.Hops[0].Name())
	}
	rc.UDP = true
	c := *ch
	c.Hops = slices.Clone(ch.Hops)
	c.Hops[0].Client = rc
	return &c, nil
}

// udpAssociations counts the associations this relay holds, to bound
// them: as the entry in all and per client address
// (limits.udp_max_associations, limits.udp_max_per_source), and apart as
// the exit of others' chains.
type udpAssociations struct {
	mu        sync.Mutex
	entry     int
	exit      int
	perSource map[netip.Addr]int
}

// admitEntry takes an entry association for src, or says which limit
// refuses it. Loopback is exempt from the per-source limit: every
// application of this host shares it.
func (u *udpAssociations) admitEntry(src netip.Addr, limit, perSource int) (rule string, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entry >= limit {
		return "udp_max_associations", false
	}
	if !src.IsLoopback() && u.perSource[src] >= perSource {
		return "udp_max_per_source", false
	}
	if u.perSource == nil {
		u.perSource = map[netip.Addr]int{}
	}
	u.entry++
	u.perSource[src]++
	return "", true
}

func (u *udpAssociations) releaseEntry(src netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.entry--
	if u.perSource[src]--; u.perSource[src] <= 0 {
		delete(u.perSource, src)
	}
}

func (u *udpAssociations) admitExit(limit int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.exit >= limit {
		return false
	}
	u.exit++
	return true
}

func (u *udpAssociations) releaseExit() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.exit--
}
