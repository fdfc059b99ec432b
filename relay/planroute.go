package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/health"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// routing: plan (docs/planning.md). An entry relay plans, per destination,
// the chain its plain SOCKS5/HTTP clients go through: this relay surveys
// the destination (its RTT to every relay, every relay's RTT to the
// destination, their windows) once per plan_ttl, and plans every new tunnel
// on that survey plus the client's own segment, read from the accepted
// socket (TCP_INFO RTT and the client's advertised window).

// userNode is the client's node in a relay's plans; the survey's client
// node is this relay.
const userNode = "user"

// surveyWait bounds how long the first tunnel to a new destination waits
// for its survey; after that it takes the static chain (and the survey
// goes on for the next tunnels).
const surveyWait = 5 * time.Second

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

type surveyEntry struct {
	done chan struct{} // closed when res/err are set
	res  *survey.Result
	err  error
	at   time.Time
}

// planRouter is the relay's Router for routing: plan.
type planRouter struct {
	s   *Server
	ttl time.Duration
	log *zap.Logger

	// watch marks relays down on failed or stalled tunnels and re-admits
	// them after passing checks; route leaves out the relays that are down.
	watch *health.Watch

	mu      sync.Mutex
	surveys map[string]*surveyEntry // by destination host:port
	last    map[string]string       // destination -> chain last logged
}

func newPlanRouter(s *Server) *planRouter {
	r := &planRouter{s: s, ttl: s.cfg.Planning.TTL, log: s.log.Named("plan"),
		surveys: map[string]*surveyEntry{}, last: map[string]string{}}
	sv := survey.Survey{Reg: s.measure.reg, AdminToken: s.cfg.AdminToken, Admin: s.adminClient(10 * time.Second)}
	r.watch = &health.Watch{Every: s.cfg.Planning.CheckEvery, Check: sv.CheckRelay, Log: r.log,
		OnChange: r.resurvey}
	go r.watch.Run(s.ctx)
	return r
}

// resurvey makes every destination's survey due (a relay went down or came
// back): the next tunnel to each starts a new one, and the old one serves
// until it is done.
func (r *planRouter) resurvey() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.surveys {
		if isDone(e) { // run writes at only before it closes done
			e.at = time.Time{}
		}
	}
}

// Failed marks down a relay a tunnel could not reach (relay.FailureObserver):
// the next tunnels are planned without it.
func (r *planRouter) Failed(ch *chain.Chain, err error) { r.watch.Failed(ch, err) }

// Slow checks the relays of a chain whose tunnel is still not up after
// SlowDial (relay.SlowObserver), and marks down the first that fails.
func (r *planRouter) Slow(ch *chain.Chain) {
	if len(ch.Hops) > 0 {
		go r.watch.Slow(ch, SlowDial)
	}
}

// survey returns the destination's survey, starting one when there is none
// or it is older than the TTL. A stale survey keeps serving while the new
// one runs.
func (r *planRouter) survey(ctx context.Context, dst string) (*survey.Result, error) {
	r.mu.Lock()
	e := r.surveys[dst]
	if e == nil || (isDone(e) && time.Since(e.at) > r.ttl) {
		next := &surveyEntry{done: make(chan struct{})}
		r.surveys[dst] = next
		go r.run(dst, next, e)
		if e == nil || e.res == nil {
			e = next
		}
	}
	r.mu.Unlock()
	select {
	case <-e.done:
		return e.res, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(surveyWait):
		return nil, fmt.Errorf("survey of %s still running after %v", dst, surveyWait)
	}
}

func isDone(e *surveyEntry) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (r *planRouter) run(dst string, e, prev *surveyEntry) {
	ctx, cancel := context.WithTimeout(r.s.ctx, 30*time.Second)
	defer cancel()
	sv := survey.Survey{Reg: r.s.measure.reg, AdminToken: r.s.cfg.AdminToken, Admin: r.s.adminClient(10 * time.Second)}
	dialer := r.s.policy.Dialer(net.Dialer{})
	sv.MeasureDst = func(ctx context.Context, addr string) (time.Duration, error) {
		return probe.TimedConnect(ctx, dialer, addr)
	}
	res, err := sv.Run(ctx, dst)
	if err != nil && prev != nil && prev.res != nil {
		// Keep planning on the last good survey rather than on nothing.
		r.log.Warn("survey failed; keeping the previous one", zap.String("dst", dst), zap.Error(err))
		res, err = prev.res, nil
	}
	if err == nil {
		r.watch.SetFleet(res.Relays, res.FromHere())
	}
	e.res, e.err, e.at = res, err, time.Now()
	close(e.done)
	r.mu.Lock()
	// Bound the cache: destinations not asked for within a TTL go.
	for k, v := range r.surveys {
		if isDone(v) && time.Since(v.at) > 2*r.ttl {
			delete(r.surveys, k)
			delete(r.last, k)
		}
	}
	r.mu.Unlock()
}

// Route plans the tunnel to dst. On any failure to plan it falls back to
// the static chain (by default: dial directly) and says why once.
func (r *planRouter) Route(ctx context.Context, dst string) (*chain.Chain, error) {
	ch, names, err := r.route(ctx, dst)
	if err != nil {
		r.log.Info("no plan; using the static chain", zap.String("dst", dst), zap.Error(err))
		return r.s.chain.Load(), nil
	}
	key := fmt.Sprint(names)
	r.mu.Lock()
	changed := r.last[dst] != key
	r.last[dst] = key
	r.mu.Unlock()
	if changed {
		r.log.Info("plan", zap.String("dst", dst), zap.Strings("chain", names))
	}
	return ch, nil
}

func (r *planRouter) route(ctx context.Context, dst string) (*chain.Chain, []string, error) {
	// A destination the policy refuses is not surveyed: the dial refuses it.
	if host, _, err := net.SplitHostPort(dst); err != nil {
		return nil, nil, err
	} else if err := r.s.policy.CheckHost(host); err != nil {
		return nil, nil, err
	}
	sr, err := r.survey(ctx, dst)
	if err != nil {
		return nil, nil, err
	}
	// This relay is the survey's client node; make it a hop the user's one
	// edge leads to, so every chain starts here.
	m := &planner.Matrix{Nodes: slices.Clone(sr.Matrix.Nodes), Pairs: slices.Clone(sr.Matrix.Pairs)}
	for i := range m.Nodes {
		if m.Nodes[i].Name == survey.ClientNode {
			m.Nodes[i].Relay = true
		}
	}
	rtt, window, ok := clientSegment(ctx)
	if !ok {
		rtt = 0.001 // unknown: the user's segment costs nothing and limits nothing
	}
	m.Nodes = append(m.Nodes, planner.Node{Name: userNode, WindowBytes: window})
	m.Pairs = append(m.Pairs, planner.Pair{A: userNode, B: survey.ClientNode, RTTMs: max(rtt, 0.001)})
	req := planner.Request{Client: userNode, Destination: sr.Target.Name,
		Constraints: planner.Constraints{MaxHops: r.s.cfg.Planning.MaxHops + 1, MinGain: -1}}
	if self := r.s.cfg.Name; self != "" && slices.ContainsFunc(m.Nodes, func(n planner.Node) bool { return n.Name == self }) {
		req.Constraints.Exclude = []string{self} // this relay is the client node already
	}
	req.Constraints.Exclude = append(req.Constraints.Exclude, m.RelaysAmong(r.watch.DownNames())...)
	res, err := planner.Search(m, req)
	if err != nil {
		return nil, nil, err
	}
	names := res.Best.Chain
	if len(names) == 0 || names[0] != survey.ClientNode {
		return nil, nil, errors.New("no chain from this relay to " + dst)
	}
	names = names[1:]
	var next []string
	for _, n := range names {
		next = append(next, "relaymesh://"+sr.Relays[n].Relay)
	}
	ch, err := r.s.buildChain(next)
	return ch, names, err
}
