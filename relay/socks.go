package relay

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

// handshakeBufBytes sizes the reader used during the handshake. Bytes the
// client sends after its request (early data) may land in it; they are
// forwarded before the tunnel starts.
const handshakeBufBytes = 1024

// serveSOCKS handles one SOCKS5 client. The caller releases c, unless a
// tunnel took it over (handOff).
func (s *Server) serveSOCKS(c *net.TCPConn) {
	log := s.connLogger("socks5", c)
	// The whole handshake, authentication included, within this: until
	// it has authenticated, c is a stranger's (preauth.go).
	_ = c.SetDeadline(time.Now().Add(s.cfg.Limits.HandshakeTimeout))
	br := bufio.NewReaderSize(c, handshakeBufBytes)

	methods, err := socks5.ReadGreeting(br)
	if err != nil {
		s.handshakeFailed(log, "socks5", "greeting", err)
		return
	}
	if s.auth.enabled() {
		if !slices.Contains(methods, socks5.MethodUserPass) {
			_, _ = c.Write(socks5.MarshalMethodChoice(socks5.MethodNoAcceptable))
			s.authDenied(log, "socks5", "client offered no username/password method")
			return
		}
		if _, err := c.Write(socks5.MarshalMethodChoice(socks5.MethodUserPass)); err != nil {
			return
		}
		user, pass, err := socks5.ReadUserPass(br)
		if err != nil {
			s.handshakeFailed(log, "socks5", "auth", err)
			return
		}
		check := func() bool { return s.auth.check(user, pass) }
		if s.authenticate(log, "socks5", "wrong username or password", remoteHost(c), check) != authOK {
			_, _ = c.Write(socks5.MarshalAuthStatus(false))
			return
		}
		if !s.takeSlot(log, c) {
			return
		}
		if _, err := c.Write(socks5.MarshalAuthStatus(true)); err != nil {
			return
		}
	} else {
		if !slices.Contains(methods, socks5.MethodNoAuth) {
			_, _ = c.Write(socks5.MarshalMethodChoice(socks5.MethodNoAcceptable))
			s.handshakeFailed(log, "socks5", "greeting", errors.New("client did not offer no-auth, and this relay has no credentials"))
			return
		}
		if !s.takeSlot(log, c) {
			return
		}
		if _, err := c.Write(socks5.MarshalMethodChoice(socks5.MethodNoAuth)); err != nil {
			return
		}
	}

	req, err := socks5.ReadRequest(br)
	if err != nil {
		switch {
		case errors.Is(err, socks5.ErrAddrType):
			_, _ = c.Write(socks5.MarshalReply(socks5.ReplyAddrNotSupported, socks5.Addr{}))
		case errors.Is(err, socks5.ErrEmptyHost), errors.Is(err, socks5.ErrBadHost), errors.Is(err, socks5.ErrReserved):
			_, _ = c.Write(socks5.MarshalReply(socks5.ReplyGeneralFailure, socks5.Addr{}))
		}
		s.handshakeFailed(log, "socks5", "request", err)
		return
	}
	if req.Cmd == socks5.CmdUDPAssociate {
		s.serveUDPAssociate(log, c, req.Addr)
		return
	}
	if req.Cmd != socks5.CmdConnect {
		_, _ = c.Write(socks5.MarshalReply(socks5.ReplyCommandNotSupported, socks5.Addr{}))
		s.handshakeFailed(log, "socks5", "request", errors.New("only CONNECT and UDP ASSOCIATE are supported"))
		return
	}
	dst := req.Addr.String()
	log = log.WithLazy(zap.String("dst", dst))
	// A destination this relay refuses itself (its policy, a REJECT
	// rule) is refused in the reply (the path below), optimistic or not.
	if s.cfg.OptimisticData && s.refusedHere(dst) == nil {
		s.serveOptimistic(log, c, br, dst)
		return
	}

	up, direct, err := s.dial(withClientConn(s.ctx, c), log, dst, nil)
	if err != nil {
		_, _ = c.Write(socks5.MarshalReply(socks5.ReplyOfKind(chain.Classify(err)), socks5.Addr{}))
		s.metrics.tunnelsOpened.WithLabelValues("socks5", chain.Classify(err).Label()).Inc()
		return
	}
	// Only now, with the whole path up, does the client hear "succeeded".
	s.openTunnel(log, "socks5", c, socks5.MarshalReply(socks5.ReplySucceeded, boundAddr(up, direct)), br, up)
}

// optimisticWait is how long the client may take to send its first bytes
// once told "succeeded" for them to ride with the route header (as many as
// the handshake buffer holds; the rest follows the header at once). A
// client on this host sends within a millisecond; a protocol where the
// server speaks first sends nothing, and its tunnel starts this much later.
const optimisticWait = 5 * time.Millisecond

// serveOptimistic answers the client "succeeded" before the chain is up,
// then reaches dst carrying the client's first bytes with the route
// header, so a request reaches the destination one chain round trip
// sooner. What the client can no longer be told: a chain that fails now
// resets the client's connection, is logged with the hop that failed
// (dialVia), counted, and blamed on that relay as any failed tunnel is.
func (s *Server) serveOptimistic(log *zap.Logger, c *net.TCPConn, br *bufio.Reader, dst string) {
	if _, err := c.Write(socks5.MarshalReply(socks5.ReplySucceeded, socks5.Addr{})); err != nil {
		return
	}
	early := readEarly(c, br, optimisticWait)
	up, _, err := s.dial(withClientConn(s.ctx, c), log, dst, early)
	if err != nil {
		kind := chain.Classify(err)
		s.metrics.tunnelsOpened.WithLabelValues("socks5", kind.Label()).Inc()
		s.metrics.optimisticResets.WithLabelValues(kind.Label()).Inc()
		log.Info("optimistic tunnel failed after the client was told succeeded; resetting it", zap.String("kind", kind.Label()))
		_ = c.SetLinger(0) // the close (the caller's) sends a reset
		return
	}
	_, _ = br.Discard(len(early)) // delivered by the dial
	s.openTunnel(log, "socks5", c, nil, br, up)
}

// readEarly returns the client's first bytes: those read ahead with its
// request, else what one read gets within wait (none if the client is
// waiting for the server to speak). They stay in br until discarded.
func readEarly(c net.Conn, br *bufio.Reader, wait time.Duration) []byte {
	if br.Buffered() == 0 {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, _ = br.Peek(1) // one read, whatever it brings
		_ = c.SetReadDeadline(time.Time{})
	}
	b, _ := br.Peek(br.Buffered())
	return b
}

// boundAddr is BND.ADDR for the reply: our local address toward the
// destination when we dialed it ourselves, 0.0.0.0:0 through a chain (the
// first hop's address would only leak our topology).
func boundAddr(up net.Conn, direct bool) socks5.Addr {
	if !direct {
		return socks5.Addr{}
	}
	if ta, ok := up.LocalAddr().(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return socks5.Addr{IP: ap.Addr().Unmap(), Port: ap.Port()}
	}
	return socks5.Addr{IP: netip.IPv4Unspecified()}
}

// openTunnel answers the client with reply (none: answered already) now
// that the whole path is up,
// sends on what the client pipelined behind its request (read ahead during
// the handshake), counts the tunnel and starts it (pipe).
// The handshake deadline goes first: the tunnel has its own idle timeout.
func (s *Server) openTunnel(log *zap.Logger, frontend string, c net.Conn, reply []byte, br *bufio.Reader, up net.Conn) {
	_ = c.SetDeadline(time.Time{})
	if len(reply) > 0 {
		if _, err := c.Write(reply); err != nil {
			up.Close()
			return
		}
	}
	if err := forwardBuffered(br, up); err != nil {
		up.Close()
		return
	}
	s.metrics.tunnelsOpened.WithLabelValues(frontend, "ok").Inc()
	s.pipe(log, frontend, c, up)
}

// forwardBuffered sends bytes the client already sent (read ahead during the
// handshake) upstream, so none are lost when the raw conns take over.
func forwardBuffered(br *bufio.Reader, up net.Conn) error {
	n := br.Buffered()
	if n == 0 {
		return nil
	}
	b, _ := br.Peek(n)
	_, err := up.Write(b)
	return err
}

func (s *Server) handshakeFailed(log *zap.Logger, frontend, stage string, err error) {
	s.metrics.handshakeFailures.WithLabelValues(frontend, stage).Inc()
	log.Debug("handshake failed", zap.String("stage", stage), zap.Error(err))
}

// authDenied counts a failed authentication and logs it sampled: a
// stranger guessing passwords decides how often this runs.
func (s *Server) authDenied(log *zap.Logger, frontend, why string) {
	s.refused(log, "auth", "client denied", zap.String("reason", why))
}

// guessBlocked says whether src may not authenticate now, for having
// failed too often (limits.max_auth_failures); a refusal is counted and
// logged (blockedRefused). For a request that offers no credentials, which
// is not a guess and is not counted.
func (s *Server) guessBlocked(log *zap.Logger, src netip.Addr) bool {
	if !s.auth.guesses.blocked(src, time.Now()) {
		return false
	}
	s.blockedRefused(log)
	return true
}

// authenticate decides one authentication from src (guessLimiter.attempt:
// a blocked source's credentials are not looked at, a right guess must not
// tell) and counts and logs, sampled, what it decided. A wrong answer is
// counted before authenticate returns: the caller answers the client after.
func (s *Server) authenticate(log *zap.Logger, frontend, why string, src netip.Addr, check func() bool) authVerdict {
	v := s.auth.guesses.attempt(src, time.Now(), check)
	switch v {
	case authBlocked:
		s.blockedRefused(log)
	case authWrong, authBlocks:
		s.authDenied(log, frontend, why)
	}
	if v == authBlocks {
		if n, ok := s.refusals.allow("auth_block_start"); ok {
			log.Warn("source blocked: too many failed authentications", zap.Int("max_auth_failures", s.cfg.Limits.MaxAuthFailures),
				zap.Duration("auth_block", s.cfg.Limits.AuthBlock), zap.Int("not_logged_since_last", n))
		}
	}
	return v
}

// blockedRefused counts (reason auth_blocked) and logs, sampled, a client
// refused because its source is blocked.
func (s *Server) blockedRefused(log *zap.Logger) {
	s.refused(log, "auth_blocked", "client refused: too many failed authentications from its source",
		zap.Int("max_auth_failures", s.cfg.Limits.MaxAuthFailures), zap.Duration("auth_block", s.cfg.Limits.AuthBlock))
}

// takeSlot gives c, a client that has just authenticated, its client
// slot; false (counted and logged, sampled) when none is left: the caller
// closes c.
func (s *Server) takeSlot(log *zap.Logger, c net.Conn) bool {
	if s.authenticated(c) {
		return true
	}
	s.refused(log, "max_conns", "connection refused: limit reached", zap.Int("limit", s.cfg.Limits.MaxConns))
	return false
}
