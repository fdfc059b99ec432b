package relay

import (
	"context"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/planroute"
	"github.com/relaymesh/relaymesh/pkg/probe"
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
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	_ = rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && info.Rtt > 0 {
			rttMs, windowBytes, ok = float64(info.Rtt)/1000, int64(info.Snd_wnd), true
		}
	})
	return rttMs, windowBytes, ok
}

// The server finds the observers by type assertion: a signature that
// drifted would silently stop marking relays down.
var _ interface {
	Router
	FailureObserver
	SlowObserver
} = (*planroute.PerDestination)(nil)

// newPlanRouter is the relay's Router for routing: plan; its goroutines
// end with s.ctx.
func (s *Server) newPlanRouter() *planroute.PerDestination {
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
