// Package relay is the relayd daemon: SOCKS5 and HTTP front ends, dialing
// through the configured chain, the admin listener, and graceful shutdown.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/policy"
	"github.com/relaymesh/relaymesh/pkg/pool"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/stripe"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// Server is one relayd. Build it with New, bind with Start, stop with Shutdown.
type Server struct {
	cfg    Config
	log    *zap.Logger
	auth   *credentials
	policy *policy.Policy // clients' destinations
	// relayPol is for relay hops and the registry's addresses
	// (PolicyConfig.RelayAllow).
	relayPol *policy.Policy
	// chain is the static chain (next:), replaced whole by SetNext; a
	// Router, when set, chooses per destination instead.
	chain   atomic.Pointer[chain.Chain]
	router  atomic.Pointer[Router]
	metrics *metrics

	// ctx is cancelled when Shutdown gives up waiting: it aborts dials in flight.
	ctx    context.Context
	cancel context.CancelFunc

	slots chan struct{} // one per allowed concurrent client conn (SOCKS5, HTTP)
	// relaySlots: the relay listener's own (limits.max_relay_conns), so
	// strangers knocking on it cannot take the clients' slots, nor
	// clients the relays'.
	relaySlots chan struct{}
	// connBudget bounds the conns tracked in conns, all pools and the
	// strangers' together, by the file limit (fdlimit.go); 0: none.
	connBudget int
	refusals   *sampler // refusal warnings: at most one per second per rule
	mu         sync.Mutex
	conns      map[net.Conn]chan struct{} // accepted and not yet released -> the pool it holds a slot of (nil: none yet)
	strangers  strangers                  // client-listener conns not yet authenticated (preauth.go)
	// tunnels holds the accepted conns a tunnel took over (handOff):
	// the tunnel's end releases them, not their handler's return.
	tunnels map[net.Conn]struct{}
	// closing is set when shutdown closes the conns left: no tunnel is
	// handed off after it.
	closing bool
	wg      sync.WaitGroup // accept loops, their handlers and handed-off tunnels
	nextID  atomic.Uint64

	measure *measurer // nil without a fleet
	recent  recentTunnels
	// What this server's sockets taught, by remote host (rates, loss,
	// windows), and the loss of its sends to peer relays, by name: read by
	// measure, /v1/info and (relayctl connect) the survey.
	learnt   learnt.Record
	peerLoss learnt.Loss[string]
	// lessonBook is the live tunnels that teach every LessonEvery.
	lessonBook lessonBook

	secret []byte // fleet secret; nil without native relaying
	// link is this relay's TLS identity for relay links; nil with
	// transport: plain or without a fleet secret.
	link   *linktls.Identity
	admin  *adminapi.Client   // peers' admin APIs (adminClient)
	replay *route.ReplayGuard // remembers route header nonces (relay listener)
	// stripes are the striped segments being assembled (relay listener).
	stripes stripeGroups
	// stripeBudget is the memory every striped stream of this server
	// reserves from, those it receives and those it opens
	// (limits.stripe_reorder_bytes).
	stripeBudget *stripe.Budget

	warm *pool.Pool // warm conns to peer relays; nil when pool.max_idle is 0
	// waiting holds relay-listener conns still waiting for their first
	// header byte (a peer's warm pool): shutdown closes them at once.
	waiting  map[net.Conn]struct{}
	draining bool // set by shutdown: no new conn may start waiting

	// local serves the HTTP listener's origin-form requests (GET /path:
	// not a proxy request), before any authentication; nil answers them
	// 400. Set before Start (SetLocalHandler).
	local http.Handler

	socksLn, httpLn, adminLn, relayLn net.Listener
	udp                               *udpAsks // admin_udp's socket; nil when off
	httpSrv, adminSrv                 *http.Server
	shutdownOnce                      sync.Once

	// capacity is the capacity probe's trains socket and state
	// (capacityprobe.go); nil when probe.capacity is off.
	capacity *capacityProbes

	// assocs counts the SOCKS5 UDP associations held (udp.go).
	assocs udpAssociations
}

// New validates cfg and builds a server. It refuses configurations that would
// make an open proxy by accident. Every check it makes before it builds is
// the preflight's (configcheck.go), which relayd check runs too; its error
// names every problem found, not only the first.
func New(cfg Config, log *zap.Logger) (*Server, error) {
	p := runPreflight(&cfg)
	for _, w := range p.warnings {
		log.Warn(w)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return newServer(cfg, p, log)
}

// newServer builds the server on a preflight that found no error.
func newServer(cfg Config, p *preflight, log *zap.Logger) (*Server, error) {
	s := &Server{
		cfg:        cfg,
		log:        log,
		auth:       newCredentials(p.users, newGuessLimiter(cfg.Limits.MaxAuthFailures, cfg.Limits.AuthBlock)),
		policy:     p.dst,
		relayPol:   p.relayPol,
		metrics:    newMetrics(),
		slots:      make(chan struct{}, cfg.Limits.MaxConns),
		relaySlots: make(chan struct{}, cfg.Limits.MaxRelayConns),
		conns:      map[net.Conn]chan struct{}{},
		tunnels:    map[net.Conn]struct{}{},
		secret:     p.secret,
		replay:     &route.ReplayGuard{},
		refusals:   &sampler{interval: time.Second},
		waiting:    map[net.Conn]struct{}{},
		link:       p.link,
		connBudget: p.connBudget,
		// Before any chain: buildChain hands it to them.
		stripeBudget: stripe.NewBudget(cfg.Limits.StripeReorderBytes),
	}
	s.metrics.watchStripeBudget(s.stripeBudget)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.link != nil && s.link.Issued() {
		s.cfg.Name = s.link.Name
		s.metrics.watchCert(certExpiry(s.link))
	}
	s.metrics.watchSlots(s.slots, s.relaySlots)
	s.admin = s.newAdminClient()
	if cfg.Pool.MaxIdle > 0 && (s.secret != nil || s.link != nil) {
		hop := s.relayHopDialer()
		s.warm = &pool.Pool{
			// Through the relay policy: a route header's first hop
			// is pooled too (native.go, relayHopDialer); secured
			// before it waits in the pool.
			Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := hop.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				if s.link == nil {
					return c, nil
				}
				return s.handshakeLink(ctx, c, addr, "")
			},
			MaxIdle:     cfg.Pool.MaxIdle,
			IdleTimeout: cfg.Pool.IdleTimeout,
			DialTimeout: cfg.Limits.DialTimeout,
			Observe:     s.metrics.observePool,
		}
	}
	ch, err := s.buildChain(cfg.Next)
	if err != nil {
		return nil, err
	}
	s.chain.Store(ch)
	return s, nil
}

// buildChain makes the chain for next-hop URLs (validated by Config).
func (s *Server) buildChain(next []string) (*chain.Chain, error) {
	direct := net.Dialer{Timeout: s.cfg.Limits.DialTimeout, KeepAlive: 30 * time.Second}
	c := &chain.Chain{
		Base:         s.relayHopDialer(),
		Direct:       s.policy.Dialer(direct),
		Link:         s.linkFunc(),
		Observe:      s.metrics.observeDial,
		StripeBudget: s.stripeBudget,
	}
	if s.warm != nil {
		c.Warm = s.warm
	}
	for _, raw := range next {
		h, err := nexthop.Parse(raw)
		if err != nil {
			return nil, err
		}
		if h, err = nexthop.Build(h, s.hopOptions()); err != nil {
			if errors.Is(err, nexthop.ErrNoSecret) {
				err = fmt.Errorf("%w (fleet_secret_file)", err)
			}
			return nil, fmt.Errorf("next hop %s: %w", h.Name(), err)
		}
		c.Hops = append(c.Hops, h)
	}
	return c, nil
}

// linkIdentity is how this process proves itself on relay links and its
// admin API: an identity an operator's CA issued (identity), else one
// derived from the fleet secret, else none (transport plain, or no relay
// links at all).
func linkIdentity(cfg Config, secret []byte) (*linktls.Identity, error) {
	if cfg.Identity.Set() {
		return linktls.Load(cfg.Identity)
	}
	if secret == nil {
		return nil, nil
	}
	if cfg.Transport == TransportPlain {
		return nil, nil // warned about by the preflight
	}
	// A relay listener makes a relay; without one this is an entry only
	// (relayctl connect), which relays accept but never take for a relay.
	name, role := cfg.Name, linktls.RoleRelay
	if cfg.Relay == "" {
		role = linktls.RoleClient
	}
	if name == "" {
		name = "unnamed"
	}
	return linktls.New(secret, name, role)
}

// hopOptions builds relaymesh:// hops: with the fleet secret, or keyed by
// their TLS links in a fleet of per-relay identities.
func (s *Server) hopOptions() nexthop.Options {
	return nexthop.Options{Secret: s.secret, LinkKeyed: s.link != nil && s.link.Issued()}
}

// linkFunc is the chain.Link of this relay's chains: nil on plain links.
func (s *Server) linkFunc() func(context.Context, net.Conn, chain.Hop) (net.Conn, error) {
	if s.link == nil {
		return nil
	}
	return s.secureLink
}

// secureLink runs the TLS handshake toward the relay listener of hop over c
// (plain transport: c as is), and checks that the peer is hop.Relay when
// the hop names one, before anything is sent. With identities from an
// operator's CA every hop must name its relay: a relay is trusted as
// itself only. A conn from the warm pool is already secured: only whom it
// reaches is checked. A peer that fails is a relay of another fleet, another
// relay than the one planned, or not a relay listener: an authentication
// failure, not a network one, unless the handshake timed out or the peer
// went away.
func (s *Server) secureLink(ctx context.Context, c net.Conn, hop chain.Hop) (net.Conn, error) {
	if s.link == nil {
		return c, nil
	}
	if s.link.Issued() && hop.Relay == "" {
		c.Close()
		return nil, &chain.HopAuthError{Msg: fmt.Sprintf("relay link to %s: the hop names no relay, and with per-relay identities a relay link is made only to the relay it names (%s)",
			hop.Addr, nexthop.RelayURL("NAME", hop.Addr))}
	}
	if _, ok := c.(*linktls.Conn); ok {
		if err := s.link.CheckPeer(c, hop.Relay); err != nil {
			c.Close()
			return nil, &chain.HopAuthError{Msg: fmt.Sprintf("relay link to %s: %v", hop.Addr, err), Err: err}
		}
		return c, nil
	}
	return s.handshakeLink(ctx, c, hop.Addr, hop.Relay)
}

// handshakeLink is secureLink's handshake: want is the relay expected at
// addr ("" takes any relay of the fleet: the warm pool's, whose conns are
// checked by name when taken).
func (s *Server) handshakeLink(ctx context.Context, c net.Conn, addr, want string) (net.Conn, error) {
	sc, err := s.link.Client(ctx, c, want)
	if err == nil {
		return sc, nil
	}
	if k := chain.Classify(err); k == chain.KindTimeout || ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return nil, fmt.Errorf("relay link to %s: %w", addr, err)
	}
	return nil, &chain.HopAuthError{Msg: fmt.Sprintf("relay link to %s: %v", addr, err), Err: err}
}

// Router chooses the chain for one destination (host:port). It is asked for
// every new tunnel from the SOCKS5 and HTTP front ends; tunnels already up
// keep the chain they were built on. It must be safe for concurrent use and
// answer fast (cache what it computes).
type Router interface {
	Route(ctx context.Context, dst string) (*chain.Chain, error)
}

// FailureObserver is implemented by Routers that want to hear about
// tunnels that failed on the chain they chose (to re-plan).
type FailureObserver interface {
	Failed(ch *chain.Chain, err error)
}

// SlowObserver is implemented by Routers that want to hear about a tunnel
// still not up after SlowDial on the chain they chose: a relay that
// vanished without a FIN or RST (host down, path cut) shows up as silence,
// and the dial's own timeout is long.
type SlowObserver interface {
	Slow(ch *chain.Chain)
}

// SlowDial is when a dial counts as slow for a SlowObserver.
const SlowDial = 2 * time.Second

// SetRouter makes r choose the chain of every new tunnel (nil: back to the
// static chain).
func (s *Server) SetRouter(r Router) {
	if r == nil {
		s.router.Store(nil)
		return
	}
	s.router.Store(&r)
}

// SetLocalHandler makes h serve the requests to the HTTP listener that are
// not proxy requests (origin-form: GET /path), such as relayctl connect's
// PAC file. They are served before authentication (a browser fetching its
// proxy's PAC file sends no proxy credentials): h must serve nothing
// secret. Call it before Start.
func (s *Server) SetLocalHandler(h http.Handler) { s.local = h }

// SetNext replaces the static chain with next-hop URLs; new tunnels take
// it, live ones keep theirs. The first relaymesh:// hop is warmed.
func (s *Server) SetNext(next []string) error {
	ch, err := s.buildChain(next)
	if err != nil {
		return err
	}
	s.chain.Store(ch)
	s.warmFirstHop(ch)
	return nil
}

// Chain builds (without installing) the chain for next-hop URLs, with this
// relay's dialers, pools and secret: what a Router returns.
func (s *Server) Chain(next []string) (*chain.Chain, error) { return s.buildChain(next) }

// warmFirstHop starts filling the pool toward ch's first relay.
func (s *Server) warmFirstHop(ch *chain.Chain) {
	if s.warm != nil && len(ch.Hops) > 0 && ch.Hops[0].Routed() {
		s.warm.Warm(ch.Hops[0].Addr)
	}
}

// chainFor is the chain a new tunnel to dst takes.
func (s *Server) chainFor(ctx context.Context, dst string) (*chain.Chain, error) {
	if r := s.router.Load(); r != nil {
		return (*r).Route(ctx, dst)
	}
	return s.chain.Load(), nil
}

// Start binds every configured listener and serves in the background.
func (s *Server) Start() error {
	var err error
	if s.cfg.SOCKS != "" {
		if s.socksLn, err = net.Listen("tcp", s.cfg.SOCKS); err != nil {
			return s.startFailed(fmt.Errorf("socks: listen %s: %w", s.cfg.SOCKS, err))
		}
	}
	if s.cfg.HTTP != "" {
		if s.httpLn, err = net.Listen("tcp", s.cfg.HTTP); err != nil {
			return s.startFailed(fmt.Errorf("http: listen %s: %w", s.cfg.HTTP, err))
		}
	}
	var noFastOpen error // why the admin listener takes no Fast Open
	if s.cfg.Admin != "" {
		if s.adminLn, err = adminListenConfig(&noFastOpen).Listen(context.Background(), "tcp", s.cfg.Admin); err != nil {
			return s.startFailed(fmt.Errorf("admin: listen %s: %w", s.cfg.Admin, err))
		}
	}
	if s.cfg.Relay != "" {
		if s.relayLn, err = s.relayListenConfig().Listen(context.Background(), "tcp", s.cfg.Relay); err != nil {
			return s.startFailed(fmt.Errorf("relay: listen %s: %w", s.cfg.Relay, err))
		}
	}
	if s.socksLn != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.socksLn, "socks5", s.serveSOCKS)
	}
	if s.httpLn != nil {
		s.httpSrv = s.newHTTPFrontend()
		go s.httpSrv.Serve(&capListener{Listener: s.httpLn, s: s})
	}
	if s.relayLn != nil {
		s.wg.Add(1)
		go s.acceptLoop(s.relayLn, "relay", s.serveRelay)
	}
	var adminLn net.Listener // the admin listener as served: gated, TLS-sniffing
	if s.adminLn != nil {
		s.adminSrv = s.newAdmin()
		// Caps no stranger can fill for long (admingate.go).
		gate := newAdminGate(s.adminLn, s.refuseAdminConn)
		var ln net.Listener = gate
		if s.link != nil {
			// HTTPS with the relay's certificate (adminlisten.go).
			ln = &adminListener{Listener: ln, tls: s.link.AdminServerConfig()}
		}
		s.adminSrv.ConnContext, s.adminSrv.ConnState = adminConnContext, gate.connState
		adminLn = ln
		s.udp = s.listenUDPAsks()
	}
	s.capacity = s.listenCapacity()
	if err := s.startMeasuring(); err != nil {
		s.capacity.close()
		if s.adminSrv != nil {
			s.adminSrv.Close()
		}
		if s.udp != nil {
			s.udp.conn.Close()
		}
		if s.httpSrv != nil {
			s.httpSrv.Close()
		}
		return s.startFailed(err)
	}
	// The admin API and the UDP asks answer from the measurer: served only
	// once it is set (their listeners are bound, and queue what comes).
	if s.adminSrv != nil {
		go s.adminSrv.Serve(adminLn)
	}
	if s.udp != nil {
		go s.udp.serve()
	}
	if s.capacity != nil {
		s.capacity.start()
	}
	go s.learnt.Rates.Run(s.ctx)
	go s.learnt.Received.Run(s.ctx)
	go s.runLessons(s.ctx)
	if s.watchesCRL() {
		go s.watchCRL(s.ctx)
	}
	// A static chain's first relay is known: warm up before the first
	// client instead of after it.
	s.warmFirstHop(s.chain.Load())
	if s.cfg.Routing == "plan" {
		s.SetRouter(s.newPlanRouter())
	}
	s.log.Info("relayd listening",
		zap.String("name", s.cfg.Name), zap.String("region", s.cfg.Region),
		zap.String("socks", addrOf(s.socksLn)), zap.String("http", addrOf(s.httpLn)), zap.String("admin", addrOf(s.adminLn)),
		zap.String("relay", addrOf(s.relayLn)), zap.Strings("next", s.chain.Load().Names()), zap.Bool("auth", s.auth.enabled()),
		zap.Bool("admin_https", s.adminLn != nil && s.link != nil), zap.Bool("admin_udp", s.udp != nil))
	if s.adminLn != nil {
		s.logAdminFastOpen(noFastOpen)
	}
	return nil
}

func (s *Server) startFailed(err error) error {
	for _, l := range []net.Listener{s.socksLn, s.httpLn, s.adminLn, s.relayLn} {
		if l != nil {
			l.Close()
		}
	}
	return err
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// SOCKSAddr, HTTPAddr and AdminAddr return the bound addresses ("" if off).
func (s *Server) SOCKSAddr() string { return addrOf(s.socksLn) }
func (s *Server) HTTPAddr() string  { return addrOf(s.httpLn) }
func (s *Server) AdminAddr() string { return addrOf(s.adminLn) }
func (s *Server) RelayAddr() string { return addrOf(s.relayLn) }

// admit takes a connection slot of frontend's pool and tracks c; false
// means the pool is full. Client-listener conns take theirs only once
// authenticated (preauth.go).
func (s *Server) admit(c net.Conn, frontend string) bool {
	slots := s.slots
	if frontend == "relay" {
		slots = s.relaySlots
	}
	select {
	case slots <- struct{}{}:
	default:
		return false
	}
	s.mu.Lock()
	s.conns[c] = slots
	s.mu.Unlock()
	return true
}

// release closes c and frees its slot, or its place among the strangers'
// conns; safe to call more than once.
func (s *Server) release(c net.Conn) {
	c.Close()
	s.mu.Lock()
	slots := s.conns[c]
	delete(s.conns, c)
	delete(s.tunnels, c)
	s.strangers.forget(c)
	s.mu.Unlock()
	if slots != nil {
		<-slots
	}
}

func (s *Server) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// acceptLoop accepts until the listener closes. Temporary errors (out of fds)
// back off from 5 ms to 1 s instead of spinning or exiting.
func (s *Server) acceptLoop(ln net.Listener, frontend string, handle func(*net.TCPConn)) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if backoff == 5*time.Millisecond || backoff == time.Second {
				s.log.Warn("accept failed; backing off", zap.String("frontend", frontend), zap.Error(err), zap.Duration("backoff", backoff))
			}
			s.metrics.acceptErrors.WithLabelValues(frontend).Inc()
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if rule, ok := s.admitConn(c, frontend); !ok {
			s.refuseConn(c, frontend, rule)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.handlerDone(c)
			defer s.recoverConn(frontend, c)
			handle(c.(*net.TCPConn))
		}()
	}
}

// recoverConn keeps a panic in one connection from killing the process.
func (s *Server) recoverConn(frontend string, c net.Conn) {
	if r := recover(); r != nil {
		s.metrics.panics.Inc()
		s.log.Error("panic in connection handler", zap.String("frontend", frontend),
			zap.String("src", c.RemoteAddr().String()), zap.Any("panic", r), zap.Stack("stack"))
	}
}

// capListener applies the strangers' caps to the HTTP front end
// (http.Server owns its accept loop); a conn takes its client slot with
// its first authenticated request. Both are freed by ConnState (closed)
// or after a hijacked conn's handler returns.
type capListener struct {
	net.Listener
	s *Server
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		rule, ok := l.s.admitConn(c, "http")
		if ok {
			return c, nil
		}
		l.s.refuseConn(c, "http", rule)
	}
}

// dial reaches dst through its chain (static, or the Router's), logging and
// counting failures. Denials are logged once here, with the rule and the
// hop. direct says the tunnel has no hops. early, when not empty, is the
// client's first bytes, delivered with the route header (chain.DialEarly).
func (s *Server) dial(ctx context.Context, log *zap.Logger, dst string, early []byte) (up net.Conn, direct bool, err error) {
	ch := s.chain.Load()
	// A destination on a denied port is neither planned nor surveyed:
	// dialVia refuses it, before any hop.
	if s.policy.CheckHostPort(dst) == nil {
		if ch, err = s.chainFor(ctx, dst); err != nil {
			log.Info("no route", zap.Error(err))
			return nil, false, err
		}
	}
	if r := s.router.Load(); r != nil {
		if so, ok := (*r).(SlowObserver); ok {
			t := time.AfterFunc(SlowDial, func() { so.Slow(ch) })
			defer t.Stop()
		}
	}
	up, err = s.dialVia(ctx, log, ch, dst, early)
	if err != nil {
		if r := s.router.Load(); r != nil {
			if fo, ok := (*r).(FailureObserver); ok {
				fo.Failed(ch, err)
			}
		}
	}
	return up, len(ch.Hops) == 0, err
}

// dialVia is dial through any chain (the relay listener builds one per
// route header), delivering early on the way (chain.DialEarly).
func (s *Server) dialVia(ctx context.Context, log *zap.Logger, ch *chain.Chain, dst string, early []byte) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Limits.DialTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	var up net.Conn
	var err error
	if perr := s.policy.CheckHostPort(dst); perr != nil {
		// A denied port, a literal IP or a malformed name is refused
		// here, before any hop sees it (direct, the dialer's Control
		// would refuse the port and the IP too; chained, the last hop
		// resolves names, and its policy may differ).
		err = perr
		if len(ch.Hops) > 0 {
			err = &chain.HopError{Hop: 0, Target: dst, Kind: chain.KindDenied, Err: perr}
		}
	} else {
		up, err = ch.DialEarly(ctx, dst, early)
	}
	if err == nil {
		return up, nil
	}
	if errors.Is(err, stripe.ErrBudget) {
		s.stripeBudgetRefused(log, stripeOut, err)
	}
	kind := chain.Classify(err)
	fields := []zap.Field{zap.String("kind", kind.Label()), zap.Error(err)}
	var he *chain.HopError
	if errors.As(err, &he) {
		fields = append(fields, zap.Int("hop", he.Hop), zap.String("hop_name", he.HopName))
	}
	var de *chain.DeniedError
	if errors.As(err, &de) {
		s.metrics.denials.WithLabelValues(de.Reason).Inc()
		log.Warn("destination denied", append(fields, zap.String("rule", de.Reason))...)
	} else if kind == chain.KindDenied {
		s.metrics.denials.WithLabelValues("upstream").Inc()
		log.Warn("destination denied by a next hop", append(fields, zap.String("rule", "upstream"))...)
	} else {
		log.Info("dial failed", fields...)
	}
	return nil, err
}

// pipe runs the tunnel client↔up and accounts for it when it ends. The
// tunnel is handed off to goroutines of its own (tunnel.Start) when it can
// take over the conns its frontend accepted (handOff: one, or a striped
// segment's links), so the handler
// returns and its stack, grown by the handshake and the dial, is freed;
// otherwise it runs in the handler's goroutine until it ends.
func (s *Server) pipe(log *zap.Logger, frontend string, client, up net.Conn) {
	t := &tunnelRun{s: s, log: log, frontend: frontend, client: client, up: up, start: time.Now()}
	s.metrics.active.WithLabelValues(frontend).Inc()
	// Both sockets send: towards the client (a download) and on (an upload).
	t.wc, t.wu = s.learnt.Rates.Watch(client, t.start), s.learnt.Rates.Watch(up, t.start)
	// What comes back from up (the destination, at the last relay) is
	// forwarded on client.
	t.wr = s.learnt.Received.Watch(up, client, t.start)
	t.startLessons()
	o := tunnel.Options{IdleTimeout: s.cfg.Limits.IdleTimeout, DrainTimeout: s.cfg.Limits.DrainTimeout}
	if accepted, ok := s.handOff(client); ok {
		tunnel.Start(client, up, o, func(res tunnel.Result) {
			defer s.tunnelDone(accepted)
			defer s.recoverConn(frontend, accepted[0])
			t.ended(res)
		})
		return
	}
	t.ended(tunnel.Pipe(client, up, o))
}

// tunnelRun is one tunnel's accounting, from its start to its end.
type tunnelRun struct {
	s          *Server
	log        *zap.Logger
	frontend   string
	client, up net.Conn
	start      time.Time
	wc, wu     *learnt.Socket
	wr         *learnt.Inflow
	lessons    lessons
}

// ended counts what the tunnel moved and how it ended, and learns from its
// sockets.
func (t *tunnelRun) ended(res tunnel.Result) {
	s := t.s
	s.metrics.active.WithLabelValues(t.frontend).Dec()
	s.learnt.Rates.Done(t.wc, time.Now())
	s.learnt.Rates.Done(t.wu, time.Now())
	s.learnt.Received.Done(t.wr, time.Now())
	s.metrics.bytes.WithLabelValues("up").Add(float64(res.AToB))
	s.metrics.bytes.WithLabelValues("down").Add(float64(res.BToA))
	result := "ok"
	switch {
	case errors.Is(res.Err, tunnel.ErrIdle):
		result = "idle_timeout"
	case errors.Is(res.Err, tunnel.ErrDrain):
		result = "drain_timeout"
	case res.Err != nil:
		result = "error"
	}
	s.metrics.tunnelsClosed.WithLabelValues(t.frontend, result).Inc()
	s.recent.add(tunnelRecord(t.frontend, result, t.start, res))
	t.lastLesson(res)
	s.learnWindows(t.client, t.wc, res.A, res.ALinks)
	s.learnWindows(t.up, t.wu, res.B, res.BLinks)
	t.log.Debug("tunnel closed", zap.Int64("bytes_up", res.AToB), zap.Int64("bytes_down", res.BToA),
		zap.Duration("duration", time.Since(t.start)), zap.String("result", result), zap.NamedError("cause", res.Err))
}

// handOff lets a tunnel take over the conns its frontend accepted, the TCP
// conn under client (client itself, or a TLS link over it), or under each
// of its links (a striped segment, each link accepted by a handler of its
// own): from now on the tunnel's end releases them (tunnelDone), not their
// handlers' return (handlerDone), and Shutdown waits for the tunnel. False
// when some conn is not one this server tracks, or shutdown is closing
// the conns.
func (s *Server) handOff(client net.Conn) ([]net.Conn, bool) {
	tcs, ok := tunnel.TCPsUnder(client)
	if !ok {
		return nil, false
	}
	accepted := make([]net.Conn, len(tcs))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, false
	}
	for i, tc := range tcs {
		if _, tracked := s.conns[tc]; !tracked {
			return nil, false
		}
		accepted[i] = tc
	}
	for _, c := range accepted {
		s.tunnels[c] = struct{}{}
	}
	s.wg.Add(1)
	return accepted, true
}

// tunnelDone is a handed-off tunnel's end: it releases the accepted conns.
func (s *Server) tunnelDone(accepted []net.Conn) {
	for _, c := range accepted {
		s.release(c)
	}
	s.wg.Done()
}

// handlerDone is a handler's return: it releases c unless a tunnel took
// it over.
func (s *Server) handlerDone(c net.Conn) {
	s.mu.Lock()
	_, tunnel := s.tunnels[c]
	s.mu.Unlock()
	if !tunnel {
		s.release(c)
	}
}

// connLogger is the per-connection logger.
func (s *Server) connLogger(frontend string, c net.Conn) *zap.Logger {
	return s.log.WithLazy(zap.Uint64("conn", s.nextID.Add(1)), zap.String("frontend", frontend), zap.String("src", c.RemoteAddr().String()))
}

// Shutdown stops accepting, lets tunnels finish for up to grace, then closes
// what is left. It returns when every handler has returned.
func (s *Server) Shutdown(grace time.Duration) {
	s.shutdownOnce.Do(func() { s.shutdown(grace) })
}

func (s *Server) shutdown(grace time.Duration) {
	s.log.Info("shutting down: no new connections", zap.Int("active", s.active()), zap.Duration("grace", grace))
	s.measure.stop()
	if s.udp != nil {
		s.udp.conn.Close() // asks in flight go unanswered: their askers fall back to HTTPS
	}
	s.capacity.close()
	if s.socksLn != nil {
		s.socksLn.Close()
	}
	if s.relayLn != nil {
		s.relayLn.Close()
	}
	if s.warm != nil {
		s.warm.Close()
	}
	s.mu.Lock()
	s.draining = true
	for c := range s.waiting {
		// A peer's warm conn that never carried a header: nothing to
		// drain. The peer sees the close and does not use it.
		c.Close()
	}
	s.mu.Unlock()
	deadline := time.Now().Add(grace)
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if s.httpSrv != nil {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			_ = s.httpSrv.Shutdown(ctx) // closes listener and idle keep-alive conns
		}
	}()
	for s.active() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := s.active(); n > 0 {
		s.log.Warn("grace period over: closing remaining connections", zap.Int("active", n))
	}
	s.cancel()
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if s.httpSrv != nil {
		_ = s.httpSrv.Close()
	}
	<-httpDone
	s.wg.Wait()
	if s.adminSrv != nil {
		_ = s.adminSrv.Close()
	}
	s.log.Info("shutdown complete")
}
