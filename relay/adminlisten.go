package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/fastopen"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

// The admin API on a relay whose links are TLS answers HTTPS and plain
// HTTP on one port, told apart by the first byte a client sends (a TLS
// handshake record starts with 0x16, an HTTP request with a letter):
//
//   - HTTPS, with the relay's certificate from the fleet CA: everything,
//     from anywhere. Peer relays and relayctl use it, verify the
//     certificate, and so send the admin token only to a fleet member.
//   - plain HTTP from loopback: everything (a local operator, Prometheus on
//     the host, `relayd health`).
//   - plain HTTP from another host: /healthz only, which carries no token
//     and no data (Consul's HTTP check, load balancers). Anything else is
//     refused with a 403 that says to use HTTPS: the token such a request
//     carried has already crossed the network in clear text.
//
// A relay with plain links (or no fleet secret) serves plain HTTP only, as
// before.

// tlsRecordHandshake is the first byte of a TLS ClientHello.
const tlsRecordHandshake = 0x16

// adminListener wraps accepted conns in sniffConn.
type adminListener struct {
	net.Listener
	tls *tls.Config
}

func (l *adminListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, tlsConf: l.tls}, nil
}

// sniffConn decides at its first read (in the server's goroutine for the
// conn, under its read deadline) whether the client speaks TLS.
type sniffConn struct {
	net.Conn // as accepted: deadlines and Close act on it
	tlsConf  *tls.Config
	once     sync.Once
	inner    net.Conn // after the first byte: a TLS server conn or the plain conn
	isTLS    bool
	err      error
}

func (c *sniffConn) decide() {
	br := bufio.NewReaderSize(c.Conn, 16)
	first, err := br.Peek(1)
	if err != nil {
		c.err = err
		return
	}
	c.inner = &bufferedConn{Conn: c.Conn, r: br}
	if first[0] == tlsRecordHandshake {
		// The handshake here, under the server's read deadline on the
		// conn: written in small pieces (linktls.HTTPSServer).
		tc, err := linktls.HTTPSServer(context.Background(), c.inner, c.tlsConf)
		if err != nil {
			c.err = err
			return
		}
		c.inner, c.isTLS = tc, true
	}
}

func (c *sniffConn) Read(p []byte) (int, error) {
	c.once.Do(c.decide)
	if c.err != nil {
		return 0, c.err
	}
	return c.inner.Read(p)
}

// Write: the HTTP server writes only after it read a request, so decide
// has run; were it not so, this would wait for the client's first byte.
func (c *sniffConn) Write(p []byte) (int, error) {
	c.once.Do(c.decide)
	if c.err != nil {
		return 0, c.err
	}
	return c.inner.Write(p)
}

// TLS reports whether the client spoke TLS. Call it only after a read
// returned (a request handler may).
func (c *sniffConn) TLS() bool { return c.isTLS }

// Peer is the fleet member whose certificate the client presented over
// TLS (verified in the handshake: linktls.AdminServerConfig); ok is false
// without one. Call it only after a read returned.
func (c *sniffConn) Peer() (linktls.Peer, bool) {
	tc, ok := c.inner.(*tls.Conn)
	if !c.isTLS || !ok {
		return linktls.Peer{}, false
	}
	cs := tc.ConnectionState()
	return linktls.AdminPeer(&cs)
}

// bufferedConn reads through r, which holds the sniffed byte.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type adminConnKey struct{}

// adminConnContext lets handlers find the request's sniffConn and
// gatedConn.
func adminConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc := gatedOf(c); gc != nil {
		ctx = context.WithValue(ctx, gatedConnKey{}, gc)
	}
	if sc, ok := c.(*sniffConn); ok {
		ctx = context.WithValue(ctx, adminConnKey{}, sc)
	}
	return ctx
}

// plainFromAfar guards h: a request that came over plain HTTP from
// another host gets a 403 saying what to do, and is counted
// (denials{reason="admin_plain"}) and logged, sampled.
func (s *Server) plainFromAfar(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, ok := r.Context().Value(adminConnKey{}).(*sniffConn)
		if !ok || sc.TLS() || r.URL.Path == "/healthz" || fromLoopback(r.RemoteAddr) {
			h.ServeHTTP(w, r)
			return
		}
		s.metrics.denials.WithLabelValues("admin_plain").Inc()
		if n, ok := s.refusals.allow("admin_plain"); ok {
			s.log.Warn("admin API: plain HTTP from another host refused (it answers HTTPS; any token in the request crossed the network in clear text)",
				zap.String("client", r.RemoteAddr), zap.String("path", r.URL.Path), zap.Int("not_logged_since_last", n))
		}
		http.Error(w, "this relay's admin API takes HTTPS from other hosts: plain HTTP answers only /healthz, and from loopback. "+
			"Use https://"+r.Host+r.URL.Path+" (the certificate is from the fleet CA, derived from the fleet secret: relayctl and relays verify it).",
			http.StatusForbidden)
	})
}

// fromLoopback reports whether a request's remote address is a loopback
// address (IPv4-mapped IPv6 included).
func fromLoopback(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// adminClient reaches peers' admin APIs as this relay's links do: HTTPS
// verified against the fleet CA when links are TLS, else plain HTTP. Every
// caller shares one client's connections (made once, in New).
func (s *Server) adminClient(timeout time.Duration) *adminapi.Client {
	return s.admin.WithTimeout(timeout)
}

// newAdminClient is the client adminClient shares: its connections go
// only where the relay policy lets a relay hop go (registry addresses are
// the registry writers' to choose).
func (s *Server) newAdminClient() *adminapi.Client {
	var conf *tls.Config
	if s.link != nil {
		conf = s.link.AdminClientConfig()
	}
	return adminapi.NewClientAllowing(0, conf, s.relayPol.Control)
}

// adminListenConfig lets the admin listener accept TCP Fast Open
// connections (pkg/fastopen): a planner that asked this relay before sends
// its ClientHello in the SYN and saves a round trip on each new
// connection. A kernel that refuses the option leaves an ordinary
// listener; *refused says why.
func adminListenConfig(refused *error) *net.ListenConfig {
	return &net.ListenConfig{Control: func(network, address string, rc syscall.RawConn) error {
		*refused = fastopen.Listen(network, address, rc)
		return nil
	}}
}

// logAdminFastOpen says whether the admin API accepts Fast Open (refused:
// the listener's option, adminListenConfig), and what to change where it
// does not.
func (s *Server) logAdminFastOpen(refused error) {
	enabled, setting, err := fastopen.ServerEnabled()
	switch {
	case refused != nil:
		s.log.Info("admin API without TCP Fast Open: the kernel refused it", zap.Error(refused))
	case err != nil:
		s.log.Info("admin API: cannot tell whether TCP Fast Open is on", zap.Error(err))
	case !enabled:
		s.log.Info("admin API without TCP Fast Open: net.ipv4.tcp_fastopen allows clients only; set it to 3 (Docker: --sysctl net.ipv4.tcp_fastopen=3) to save planners a round trip on each new admin connection",
			zap.Int("tcp_fastopen", setting))
	default:
		s.log.Info("admin API accepts TCP Fast Open", zap.Int("tcp_fastopen", setting))
	}
}
