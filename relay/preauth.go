package relay

import (
	"container/list"
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// The client listeners (SOCKS5, HTTP) are public: strangers reach them as
// easily as clients. What a stranger cannot do is authenticate, so until a
// connection has, it is counted as a stranger's and holds no client slot
// (limits.max_conns):
//
//   - at most limits.max_preauth_conns such connections per listener, and
//     limits.max_preauth_per_source from one address other than loopback
//     (both listeners together). One over the per-source cap is closed at
//     once rather than left in the kernel's accept queue, in front of
//     honest ones; one that finds its listener's budget full takes the
//     place of the listener's oldest unauthenticated connection, so that
//     strangers from many addresses holding the budget (each connection
//     for the handshake timeout) do not shut clients out: to push a client
//     out before it authenticates, a stranger must open the whole budget
//     anew within the client's handshake, not once per handshake timeout;
//   - it must authenticate within limits.handshake_timeout of accept
//     (SOCKS5: the whole handshake; HTTP: the first request's header,
//     and a 407 closes the connection, so a new unauthenticated request
//     never renews it);
//   - once it has authenticated it takes a client slot, or is closed when
//     none is left.
//
// The relay listener has its own pool (limits.max_relay_conns) and its own
// pre-authentication deadline (the TLS handshake).

// strangers counts the client listeners' connections that have not
// authenticated yet. Guarded by Server.mu; the zero value is empty.
type strangers struct {
	conns       map[net.Conn]stranger
	perListener map[string]int
	perSource   map[netip.Addr]int
	oldest      map[string]*list.List // per listener, its strangers' conns, oldest first
}

// stranger is where an unauthenticated connection is counted.
type stranger struct {
	frontend string
	source   netip.Addr
	elem     *list.Element // in oldest[frontend]
}

func (st *strangers) add(c net.Conn, frontend string, source netip.Addr) {
	if st.conns == nil {
		st.conns, st.perListener, st.perSource = map[net.Conn]stranger{}, map[string]int{}, map[netip.Addr]int{}
		st.oldest = map[string]*list.List{}
	}
	if st.oldest[frontend] == nil {
		st.oldest[frontend] = list.New()
	}
	st.conns[c] = stranger{frontend: frontend, source: source, elem: st.oldest[frontend].PushBack(c)}
	st.perListener[frontend]++
	st.perSource[source]++
}

// forget stops counting c; a no-op for a conn not counted.
func (st *strangers) forget(c net.Conn) {
	x, ok := st.conns[c]
	if !ok {
		return
	}
	delete(st.conns, c)
	st.oldest[x.frontend].Remove(x.elem)
	if st.perListener[x.frontend]--; st.perListener[x.frontend] <= 0 {
		delete(st.perListener, x.frontend)
	}
	if st.perSource[x.source]--; st.perSource[x.source] <= 0 {
		delete(st.perSource, x.source)
	}
}

// evictOldest stops counting frontend's oldest unauthenticated conn and
// returns it for the caller to close (nil: none).
func (st *strangers) evictOldest(frontend string) net.Conn {
	l := st.oldest[frontend]
	if l == nil || l.Len() == 0 {
		return nil
	}
	c := l.Front().Value.(net.Conn)
	st.forget(c)
	return c
}

// admitConn admits c, just accepted on frontend's listener: a relay-listener
// conn takes a slot of its pool, a client-listener conn is counted as a
// stranger's. On refusal it names the rule c is over.
func (s *Server) admitConn(c net.Conn, frontend string) (rule string, ok bool) {
	if s.connBudget > 0 && s.active() >= s.connBudget {
		return "max_fds", false
	}
	if frontend == "relay" {
		return "max_relay_conns", s.admit(c, frontend)
	}
	return s.admitStranger(c, frontend)
}

// admitStranger tracks c as a stranger's until it authenticates, within
// the caps on those.
func (s *Server) admitStranger(c net.Conn, frontend string) (rule string, ok bool) {
	source := remoteHost(c)
	var evicted net.Conn
	defer func() {
		if evicted != nil {
			// Its handler's read fails and releases it; counted as a
			// refusal under the budget it made room in.
			evicted.Close()
			s.refused(s.log, "max_preauth_conns", "unauthenticated connection closed to make room: the listener's budget is full",
				zap.String("frontend", frontend), zap.String("src", evicted.RemoteAddr().String()), zap.Int("limit", s.cfg.Limits.MaxPreauthConns))
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !source.IsLoopback() && s.strangers.perSource[source] >= s.cfg.Limits.MaxPreauthPerSource {
		return "max_preauth_per_source", false
	}
	if s.strangers.perListener[frontend] >= s.cfg.Limits.MaxPreauthConns {
		if evicted = s.strangers.evictOldest(frontend); evicted == nil {
			return "max_preauth_conns", false
		}
	}
	s.strangers.add(c, frontend, source)
	s.conns[c] = nil // tracked (shutdown closes it), no slot yet
	return "", true
}

// authenticated moves c, a client-listener conn that has just
// authenticated, from the strangers' count to a client slot. False when
// every slot is taken (c is still counted as a stranger's until released)
// or c was released already (shutdown). A conn that holds its slot
// already (an HTTP keep-alive's next request) keeps it.
func (s *Server) authenticated(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	slots, tracked := s.conns[c]
	if !tracked {
		return false
	}
	if slots != nil {
		return true
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return false
	}
	s.conns[c] = s.slots
	s.strangers.forget(c)
	return true
}

// limitOf is the configured value of a connection-count rule.
func (s *Server) limitOf(rule string) int {
	switch rule {
	case "max_relay_conns":
		return s.cfg.Limits.MaxRelayConns
	case "max_preauth_conns":
		return s.cfg.Limits.MaxPreauthConns
	case "max_preauth_per_source":
		return s.cfg.Limits.MaxPreauthPerSource
	case "max_fds":
		return s.connBudget
	default:
		return s.cfg.Limits.MaxConns
	}
}

// refuseConn closes c, accepted on frontend's listener, for being over
// rule. An HTTP client is told so first, within a second.
func (s *Server) refuseConn(c net.Conn, frontend, rule string) {
	s.refused(s.log, rule, "connection refused: limit reached", zap.String("frontend", frontend),
		zap.String("src", c.RemoteAddr().String()), zap.Int("limit", s.limitOf(rule)))
	if frontend == "http" {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
	}
	c.Close()
}

// refused counts a refusal under rule (relaymesh_denials_total) and logs it
// on log at most once a second per rule, with how many were held back:
// strangers decide how often this runs, and must not decide how much the
// relay logs.
func (s *Server) refused(log *zap.Logger, rule, msg string, fields ...zap.Field) {
	s.metrics.denials.WithLabelValues(rule).Inc()
	if n, ok := s.refusals.allow(rule); ok {
		log.Warn(msg, append(fields, zap.String("rule", rule), zap.Int("not_logged_since_last", n))...)
	}
}
