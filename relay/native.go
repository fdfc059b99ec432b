package relay

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/route"
)

// serveRelay handles one route header on the relay listener (docs/protocol.md):
// verify it, pop ourselves, reach the next relay or the destination, send the
// status back, then tunnel. The caller releases tc,
// unless a tunnel took it over (handOff).
func (s *Server) serveRelay(tc *net.TCPConn) {
	log := s.connLogger("relay", tc)
	c, ok := s.acceptLink(log, tc)
	if !ok {
		return
	}
	if p, ok := linktls.PeerOf(c); ok {
		log = log.WithLazy(zap.String("peer", p.Name), zap.String("peer_role", p.Role))
	}
	bind, err := linktls.Binding(c)
	if err != nil {
		s.handshakeFailed(log, "relay", "link", err)
		return
	}
	br := bufio.NewReaderSize(c, route.MaxHeaderBytes)
	if !s.awaitHeader(c, br) {
		return
	}
	_ = c.SetDeadline(time.Now().Add(s.cfg.Limits.HandshakeTimeout))
	key := route.LinkKey(s.secret, bind)
	if p, _ := br.Peek(6); route.IsJoin(p) {
		s.serveJoin(log, c, br, key, bind)
		return
	}
	req, err := route.ReadRequest(br, key, bind)
	if err != nil {
		if errors.Is(err, route.ErrAuth) {
			// No response: a stranger learns nothing, not even that this
			// is a relay listener. Over TLS the sender is a fleet member
			// and the header was made for another link (a copy).
			s.routeDenied(log, "route_auth", err)
			return
		}
		s.handshakeFailed(log, "relay", "header", err)
		return
	}
	if err := s.replay.Check(req); err != nil {
		s.routeDenied(log, "route_replay", err)
		return
	}
	if req.UDP {
		s.serveRelayUDP(log, c, br, key, req)
		return
	}
	log = log.WithLazy(zap.String("dst", req.Dst), zap.Strings("via", req.Hops))
	var striped *stripeGroup
	if req.InStripes > 1 {
		if req.InStripes > s.cfg.Limits.MaxStripes {
			err = fmt.Errorf("stripes: this relay takes at most %d links a segment (limits.max_stripes), asked %d", s.cfg.Limits.MaxStripes, req.InStripes)
		} else {
			striped, err = s.awaitStripes(log, c, br, req)
		}
		if err != nil {
			s.handshakeFailed(log, "relay", "stripes", err)
			// The wait may have used up the header's deadline.
			_ = c.SetWriteDeadline(time.Now().Add(s.cfg.Limits.HandshakeTimeout))
			s.answerRoute(log, c, key, req, err)
			if striped != nil { // assembled, then refused: let its joins go
				striped.finish()
			}
			return
		}
		defer striped.finish()
		s.metrics.stripedSegments.WithLabelValues(strconv.Itoa(req.InStripes)).Inc()
		log = log.WithLazy(zap.Int("stripes", req.InStripes))
	}
	ch, err := s.routeChain(log, req)
	if err != nil {
		return
	}
	// Cover the dial and the status write; the dial has its own timeout.
	_ = c.SetDeadline(time.Now().Add(s.cfg.Limits.DialTimeout + s.cfg.Limits.HandshakeTimeout))
	// Early data: what the sender wrote right behind the header (it does
	// not wait for our status) goes on with our header, or to the
	// destination as soon as it is connected. Later bytes follow the
	// status, through the tunnel, in order.
	early, _ := br.Peek(br.Buffered())
	up, err := s.dialVia(s.ctx, log, ch, req.Dst, early)
	if err == nil {
		_, _ = br.Discard(len(early)) // delivered by the dial
	}
	if err != nil {
		s.metrics.tunnelsOpened.WithLabelValues("relay", chain.Classify(err).Label()).Inc()
	}
	if !s.answerRoute(log, c, key, req, err) {
		if up != nil {
			up.Close()
		}
		return
	}
	if striped == nil {
		s.openTunnel(log, "relay", c, nil, br, up)
		return
	}
	sc, err := striped.stream()
	if err != nil { // cannot happen: the header's count was checked
		log.Error("striped segment", zap.Error(err))
		up.Close()
		return
	}
	s.openTunnel(log, "relay", sc, nil, br, up)
}

// answerRoute sends the status for the outcome err of req on c; false when
// it failed or the tunnel must not start (err not nil).
func (s *Server) answerRoute(log *zap.Logger, c net.Conn, key []byte, req *route.Request, err error) bool {
	resp := routeResponse(err)
	msg, merr := resp.Marshal(key, req.Nonce)
	if merr != nil { // cannot happen: reason is truncated, status is ours
		log.Error("route response", zap.Error(merr))
		return false
	}
	_, werr := c.Write(msg)
	return err == nil && werr == nil
}

// routeChain is the chain to the rest of req's route, from this relay.
// An error (logged) cannot happen: the relay listener runs only with a
// fleet secret or an identity.
func (s *Server) routeChain(log *zap.Logger, req *route.Request) (*chain.Chain, error) {
	// The remaining hops are relays the (authenticated) entry chose. The
	// first is ours to dial, through the relay policy (literal addresses
	// refused here, names at connect): the fleet secret must not be a key
	// to this relay's own network. Each later relay checks its own next
	// hop, and the last applies its destination policy to the destination.
	base := s.chain.Load()
	ch := &chain.Chain{
		Base:         s.relayHopDialer(),
		Direct:       base.Direct,
		Warm:         base.Warm,
		Link:         s.linkFunc(),
		Observe:      s.metrics.observeDial,
		StripeBudget: s.stripeBudget,
	}
	if len(req.Hops) > 0 {
		if host, _, err := net.SplitHostPort(req.Hops[0]); err != nil || s.relayPol.CheckHost(host) != nil {
			ch.Warm = nil // refused at connect, never pooled
		}
	}
	for i, a := range req.Hops {
		hop := chain.Hop{Scheme: nexthop.Relaymesh, Addr: a}
		if req.Names != nil {
			hop.Relay = req.Names[i] // checked on the link (secureLink)
		}
		if req.Stripes != nil {
			hop.Stripes = req.Stripes[i]
		}
		h, err := nexthop.Build(hop, s.hopOptions())
		if err != nil {
			log.Error("route hop", zap.Error(err))
			return nil, err
		}
		ch.Hops = append(ch.Hops, h)
	}
	return ch, nil
}

// acceptLink secures a relay-listener conn: the TLS handshake, within
// limits.handshake_timeout from accept (the pre-authentication deadline:
// who cannot prove fleet membership by then is gone). With transport:
// plain, tc as is. The caller closes tc.
func (s *Server) acceptLink(log *zap.Logger, tc *net.TCPConn) (net.Conn, bool) {
	if s.link == nil {
		return tc, true
	}
	_ = tc.SetDeadline(time.Now().Add(s.cfg.Limits.HandshakeTimeout))
	c, err := s.link.Server(s.ctx, tc)
	_ = tc.SetDeadline(time.Time{})
	switch {
	case err == nil:
		return c, true
	case errors.Is(err, io.EOF):
		// Closed before a word: a probe measuring the RTT, or a peer's
		// pooled conn going away. Not a refusal.
		return nil, false
	}
	s.routeDenied(log, "link_auth", err)
	return nil, false
}

// awaitHeader waits up to limits.relay_header_wait for the first byte of a
// route header. A peer's warm pool opens connections before it has a header
// to send; its pool expires them before this wait runs out (pool.idle_timeout
// < relay_header_wait). A close or timeout before any byte is not an error.
// Shutdown closes waiting conns at once: they carry nothing to drain.
func (s *Server) awaitHeader(c net.Conn, br *bufio.Reader) bool {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return false
	}
	s.waiting[c] = struct{}{}
	s.mu.Unlock()
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.Limits.RelayHeaderWait))
	_, err := br.Peek(1)
	s.mu.Lock()
	delete(s.waiting, c)
	s.mu.Unlock()
	return err == nil
}

// reasonOf is the short reason sent back: the reporting relay's own words
// when the failure came from further down, else our error, cut to fit.
func reasonOf(err error) string {
	var se *route.StatusError
	r := err.Error()
	if errors.As(err, &se) {
		r = se.Reason
	}
	if len(r) > route.MaxReason {
		r = r[:route.MaxReason]
	}
	return r
}

// routeResponse is the status a relay sends back for the outcome of its
// dial (err nil: OK). A failure names the relay to blame: ch's hop n is
// the relay n places after this one, exactly the offset the previous
// relay expects (0 is this relay).
func routeResponse(err error) route.Response {
	if err == nil {
		return route.Response{Status: route.StatusOK}
	}
	resp := route.Response{Status: route.StatusOf(chain.Classify(err)), Reason: reasonOf(err)}
	var he *chain.HopError
	if errors.As(err, &he) {
		resp.Hop = uint8(he.Hop)
	}
	return resp
}

// routeDenied logs a refused route header once, with its source and why,
// and counts it. The header's content is not logged: it is unauthenticated.
func (s *Server) routeDenied(log *zap.Logger, rule string, err error) {
	s.metrics.denials.WithLabelValues(rule).Inc()
	if n, ok := s.refusals.allow(rule); ok {
		log.Warn("route header refused", zap.String("rule", rule), zap.String("reason", err.Error()), zap.Int("not_logged_since_last", n))
	}
}
