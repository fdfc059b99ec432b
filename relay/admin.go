package relay

import (
	"cmp"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/buildinfo"
	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/traffic"
)

// newAdmin serves /healthz (always open: load balancers and Docker probe it),
// and behind admin_token when one is set: /metrics, /v1/info (identity,
// chain, socket limits), /v1/measurements (RTTs to peer relays) and
// /v1/probe (RTT to a destination, on demand), /v1/tunnels (the last
// ended tunnels' socket statistics) and /v1/traffic/ (the benchmark source
// and sink).
func (s *Server) newAdmin() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+adminapi.PathHealthz, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET "+adminapi.PathMetrics, s.adminAuth(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	mux.Handle("GET "+adminapi.PathInfo, s.adminAuth(s.viaPeer(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.info(askerHost(r)))
	})))
	mux.Handle("GET "+adminapi.PathMeasurements, s.adminAuth(http.HandlerFunc(s.serveMeasurements)))
	mux.Handle("GET "+adminapi.PathProbe, s.adminAuth(s.viaPeer(s.serveProbe)))
	mux.Handle("GET "+adminapi.PathTunnels, s.adminAuth(s.viaPeer(s.serveTunnels)))
	s.capacityRoutes(mux)
	// The traffic source and sink `relayctl bench` measures against
	// (GET /v1/traffic/bytes/N, POST /v1/traffic/upload; no /sha256/N:
	// the bench hashes what it got itself). Transfers may outlive the
	// admin server's read and write timeouts, not a stall.
	mux.Handle(adminapi.PathTraffic+"/", s.adminAuth(s.oneOfFew(http.StripPrefix(adminapi.PathTraffic, s.stallDeadlines(traffic.TransferHandler())))))
	return &http.Server{
		Handler:           s.plainFromAfar(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		// An idle connection is kept two minutes (unset, ReadTimeout's
		// 10 s would stand in): relayctl connect surveys its
		// destinations again every minute, asking the same relays, and
		// a new connection costs it two round trips (TCP and TLS) to
		// each; its admin client keeps them 90 s.
		IdleTimeout: adminIdleTimeout,
		ErrorLog:    zap.NewStdLog(s.log.Named("admin")),
	}
}

// adminIdleTimeout is how long the admin API keeps an idle connection.
const adminIdleTimeout = 2 * time.Minute

// forwardedHeader marks a request viaPeer forwarded: its remote address is
// the forwarding relay's, not the asker's.
const forwardedHeader = "X-Relaymesh-Forwarded-By"

// askerHost is r's remote host, whose paths from this relay /v1/info tells
// of; invalid for a forwarded request (its remote host is the forwarding
// relay's).
func askerHost(r *http.Request) netip.Addr {
	if r.Header.Get(forwardedHeader) != "" {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// learntTo is what this relay's tunnels to host taught: the best rate they
// sustained while the path held them back (pkg/learnt), bits/s (0: none),
// and how long ago; the share of their bytes sent again (pkg/learnt) and
// how long ago, lossOK false when too little went to host to tell.
type learntTo struct {
	sendBps float64
	sendAge time.Duration
	loss    float64
	lossAge time.Duration
	lossOK  bool
}

// learntOf is what this relay learnt of its paths to host.
func (s *Server) learntOf(host netip.Addr) learntTo {
	sent := s.learnt.SentTo(host, time.Now())
	return learntTo{sendBps: sent.RateBps, sendAge: sent.RateAge, loss: sent.Loss, lossAge: sent.LossAge, lossOK: sent.LossOK}
}

// capacityBps is the declared capacity, bits/s; 0: not declared.
func (s *Server) capacityBps() float64 { return s.cfg.CapacityMbit * 1e6 }

// congestion is what this relay sends with on relay links (and to the
// clients of its relay listener): relay_socket.congestion, else the
// system default in limits.
func (s *Server) congestion(limits adminapi.Limits) string {
	return cmp.Or(s.cfg.RelaySocket.Congestion, limits.CongestionControl)
}

// info is what /v1/info answers an asker on host (and /v1/probe with
// info=1, and a UDP ask with udpask.FlagInfo): identity, chain, socket
// limits, and what this relay learnt of its paths to host; nothing learnt
// for an invalid host (a forwarded request: its asker is a relay).
func (s *Server) info(host netip.Addr) adminapi.Info {
	var learnt learntTo
	if host.IsValid() {
		learnt = s.learntOf(host)
	}
	limits := hostnet.ReadLimits() // sysctl files: read once an answer
	info := adminapi.Info{
		Name:               s.cfg.Name,
		Region:             s.cfg.Region,
		Version:            buildinfo.Version(),
		SOCKS:              s.SOCKSAddr(),
		HTTP:               s.HTTPAddr(),
		Relay:              s.RelayAddr(),
		Next:               s.chain.Load().Names(),
		Active:             s.active(),
		Fleet:              s.cfg.Fleet,
		Limits:             limits,
		CapacityBps:        s.capacityBps(),
		CongestionControl:  s.congestion(limits),
		LearntSendBpsToYou: learnt.sendBps,
		LearntSendAgeSec:   learnt.sendAge.Seconds(),
	}
	if s.RelayAddr() != "" {
		info.MaxStripes = s.cfg.Limits.MaxStripes
	}
	if learnt.lossOK {
		info.SetLearntLoss(learnt.loss, learnt.lossAge.Seconds())
	}
	return info
}

// maxVia bounds ?via= paths.
const maxVia = 8

// viaPeer serves a request with ?via=r2,r3 by asking r2's admin API for the
// same path with ?via=r3 (with this relay's admin token, the fleet's), and
// so on: a client that cannot reach a relay (a linear lab, a relay only its
// peers see) can still read its info and have it probe, through relays that
// reach each other. Without via, h serves.
func (s *Server) viaPeer(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		path := strings.Split(q.Get("via"), ",")
		if path[0] == s.cfg.Name {
			path = path[1:]
		}
		if len(path) == 0 || path[0] == "" {
			h(w, r)
			return
		}
		if len(path) > maxVia {
			http.Error(w, fmt.Sprintf("via: at most %d relays", maxVia), http.StatusBadRequest)
			return
		}
		via := path[0]
		if s.measure == nil {
			http.Error(w, "via: this relay has no registry (fleet or consul) to find "+via+" in", http.StatusNotFound)
			return
		}
		relays, err := s.measure.reg.Relays(r.Context())
		if err != nil {
			http.Error(w, "via: registry: "+err.Error(), http.StatusBadGateway)
			return
		}
		var next registry.Relay
		if i := slices.IndexFunc(relays, func(p registry.Relay) bool { return p.Name == via }); i >= 0 {
			next = relays[i]
		} else if rr, ok := s.measure.reg.(registry.RelayReader); ok {
			// This relay's list may lag (it reads the fleet seldom): a
			// relay that joined since is read alone.
			fresh, found, err := rr.RelayOf(r.Context(), via)
			if err != nil {
				http.Error(w, "via: registry: "+err.Error(), http.StatusBadGateway)
				return
			}
			if found {
				next = fresh
			}
		}
		if next.Admin == "" {
			http.Error(w, "via: no relay "+via+" with an admin address in the registry", http.StatusNotFound)
			return
		}
		q.Del("via")
		if len(path) > 1 {
			q.Set("via", strings.Join(path[1:], ","))
		}
		admin := s.adminClient(20 * time.Second)
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, admin.URL(next.Admin, r.URL.Path+"?"+q.Encode()), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if token := s.peerToken(); token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set(forwardedHeader, s.cfg.Name)
		resp, err := admin.Do(req, via)
		if err != nil {
			http.Error(w, "via "+via+": "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
	})
}

// peerToken is what this relay sends other relays' admin APIs as a bearer
// token: its own admin token in a fleet that shares one (the fleet
// secret's), none with identities from an operator's CA (its certificate
// speaks for it, and its token opens only itself).
func (s *Server) peerToken() string {
	if s.link != nil && s.link.Issued() {
		return ""
	}
	return s.cfg.AdminToken
}

// transferStall bounds a traffic transfer's stall when the relay's
// limits set none (drain_timeout and idle_timeout both 0).
const transferStall = 30 * time.Second

// stallDeadlines replaces the server's read and write deadlines for h by
// ones moved on before every read of the body and every write of the
// answer: a benchmark transfer takes as long as the path makes it take,
// but one that stops moving for the stall bound (the relay's
// stallBound) fails, and its place among maxTrafficTransfers frees. A
// token holder that uploads nothing or reads nothing used to keep a place
// for good.
func (s *Server) stallDeadlines(h http.Handler) http.Handler {
	bound := cmp.Or(s.stallBound(), transferStall)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(bound))
		bw := &boundedWriter{ResponseWriter: w, rc: rc, bound: bound}
		bw.extend()
		r.Body = &boundedBody{ReadCloser: r.Body, rc: rc, bound: bound}
		h.ServeHTTP(bw, r)
	})
}

// boundedBody moves the connection's read deadline one stall bound ahead
// before every read of a request body.
type boundedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	bound time.Duration
}

func (b *boundedBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.bound))
	return b.ReadCloser.Read(p)
}

// adminAuth serves next to a request with this relay's admin token, or,
// in a fleet of identities from an operator's CA, over a connection whose
// client certificate (relay or relayctl user, verified in the handshake
// and not revoked) is the fleet's: relays call each other without a
// shared token, and this relay's token opens this relay alone.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(strings.TrimSpace(r.Header.Get("Authorization")))
		if s.cfg.AdminToken != "" && subtle.ConstantTimeCompare(got, want) != 1 && !s.fleetMember(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="relaymesh-admin"`)
			http.Error(w, "admin token required: Authorization: Bearer <admin_token>", http.StatusUnauthorized)
			return
		}
		// The connection is a fleet member's (or, with no token set,
		// anyone's: the API is open): kept alive like one (admingate.go).
		markAuthed(r.Context())
		next.ServeHTTP(w, r)
	})
}

// fleetMember reports whether r came over TLS with a client certificate
// from this fleet's operator CA.
func (s *Server) fleetMember(r *http.Request) bool {
	if s.link == nil || !s.link.Issued() {
		return false
	}
	sc, ok := r.Context().Value(adminConnKey{}).(*sniffConn)
	if !ok {
		return false
	}
	_, ok = sc.Peer()
	return ok
}

// refuseAdminConn counts and logs, sampled, an admin connection closed
// over the gate's caps (admingate.go).
func (s *Server) refuseAdminConn() {
	s.metrics.denials.WithLabelValues("admin_conns").Inc()
	if n, ok := s.refusals.allow("admin_conns"); ok {
		s.log.Warn("admin API: connection closed: over the caps on open connections, in all or from one address other than loopback",
			zap.Int("max_conns", maxAdminConns), zap.Int("max_conns_per_host", maxAdminConnsPerHost), zap.Int("not_logged_since_last", n))
	}
}

// maxTrafficTransfers bounds the traffic source's concurrent transfers: a
// benchmark runs a few; more would be a token holder using the relay's
// bandwidth as a weapon.
const maxTrafficTransfers = 8

// oneOfFew serves h to at most maxTrafficTransfers requests at a time and
// answers 503 beyond.
func (s *Server) oneOfFew(h http.Handler) http.Handler {
	sem := make(chan struct{}, maxTrafficTransfers)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, fmt.Sprintf("at most %d traffic transfers at a time", maxTrafficTransfers), http.StatusServiceUnavailable)
		}
	})
}
