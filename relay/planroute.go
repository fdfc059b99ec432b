package relay

import (
	"context"
	"net"
	"time"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/planroute"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/pkg/survey"
)

// routing: plan (docs/planning.md). An entry relay plans, per destination,
// the chain its plain SOCKS5/HTTP clients go through: this relay surveys
// the destination (its RTT to every relay, every relay's RTT to the
// destination, their windows) once per plan_ttl, and plans every new tunnel
// on that survey plus the client's own segment, read from the accepted
// socket (TCP_INFO RTT and the client's advertised window). The planning,
// marking relays down and re-admitting them are pkg/planroute's; this file
// hands it the relay's registry, policy, dialers and client sockets.

type clientConnKey struct{}

// withClientConn records the accepted client conn for the router.
func withClientConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, clientConnKey{}, c)
}

// clientConn is the accepted client conn recorded by withClientConn, or nil.
func clientConn(ctx context.Context) net.Conn {
	c, _ := ctx.Value(clientConnKey{}).(net.Conn)
	return c
}

// clientSegment reads the client's RTT and advertised receive window from
// the accepted socket. The window is what the client advertises now: early
// in a connection, before its autotuning grows it, a lower bound.
func clientSegment(ctx context.Context) (rttMs float64, windowBytes int64, ok bool) {
	c, _ := clientConn(ctx).(*net.TCPConn)
	if c == nil {
		return 0, 0, false
	}
	if info, err := hostnet.TCPInfo(c); err == nil && info.Rtt > 0 {
		return float64(info.Rtt) / 1000, int64(info.Snd_wnd), true
	}
	return 0, 0, false
}

// The server finds the observers (and a rule router's refusals) by type
// assertion: a signature that drifted would silently stop marking relays
// down, or answer a rejected client "succeeded".
var (
	_ interface {
		Router
		FailureObserver
		SlowObserver
	} = (*planroute.PerDestination)(nil)
	_ interface {
		Router
		FailureObserver
		SlowObserver
		Refuser
	} = (*rules.Router)(nil)
)

// Refuser is implemented by Routers that refuse some destinations
// outright (a REJECT rule): Refuses is the error a tunnel to dst would be
// refused with, nil when it would be routed.
type Refuser interface {
	Refuses(dst string) error
}

// refusedHere is why this relay refuses dst itself, before any hop: its
// policy (a denied port, a literal address it denies), then its Router's
// rules. A front end that answers before it routes (optimistic data)
// asks it first, so that these refusals still get their reply.
func (s *Server) refusedHere(dst string) error {
	if err := s.policy.CheckHostPort(dst); err != nil {
		return err
	}
	if r := s.router.Load(); r != nil {
		if rf, ok := (*r).(Refuser); ok {
			return rf.Refuses(dst)
		}
	}
	return nil
}

// newPlanRouter is the relay's Router for routing: plan, under
// planning.rules when set; its goroutines end with s.ctx.
func (s *Server) newPlanRouter() Router {
	plan := s.newPerDestination()
	set := s.cfg.Planning.set
	if set == nil {
		return plan
	}
	direct, _ := s.buildChain(nil) // no hop URLs: nothing to refuse
	// The policy comes first (Server.dial routes only what it passes, and
	// dialVia checks again): a DIRECT rule dials through the policy's
	// dialer, a CHAIN's last relay applies its own, and no rule can allow
	// what the policy denies.
	return rules.NewRouter(rules.RouterConfig{
		Rules: set, Plan: plan, Direct: direct, Chain: rules.RegistryChains(s.measure.reg, s.buildChain),
		Rejected: func(string, rules.Decision) { s.metrics.denials.WithLabelValues(rules.DenyReason).Inc() },
		Log:      s.log.Named("rules"),
	})
}

// newPerDestination is the plan router of routing: plan.
func (s *Server) newPerDestination() *planroute.PerDestination {
	// A destination's surveys again start from the last one's (on a
	// fleet that publishes coordinates), afresh every
	// survey.DefaultFreshEvery.
	sv := survey.Survey{Reg: s.measure.reg, AdminToken: s.peerToken(), Admin: s.adminClient(10 * time.Second),
		Coordinates: survey.CoordinatesOf(s.measure.reg), Replans: &survey.Replans{}, AskKey: s.askKey()}
	// The survey connects to the destination only where a tunnel could,
	// and to relays (their registered admin addresses) only where a relay
	// hop could.
	dialer := s.policy.Dialer(net.Dialer{})
	sv.MeasureDst = func(ctx context.Context, addr string) (time.Duration, error) {
		return probe.TimedConnect(ctx, dialer, addr)
	}
	sv.Measure = s.relayProbe
	return planroute.NewPerDestination(s.ctx, planroute.PerDestinationConfig{
		Config: planroute.Config{Build: s.buildChain, Check: sv.CheckRelay, CheckEvery: s.cfg.Planning.CheckEvery,
			SlowDial: SlowDial, Log: s.log.Named("plan")},
		// A relay's clients set it as their proxy and expect its plan from
		// the first connection: worth a wait of seconds, once per key.
		Survey: sv.Run, TTL: s.cfg.Planning.TTL, SurveyWait: planroute.SurveyWait, MaxHops: s.cfg.Planning.MaxHops, Self: s.cfg.Name,
		CheckHost: s.policy.CheckHost, Fallback: s.chain.Load, ClientSegment: clientSegment,
	})
}
