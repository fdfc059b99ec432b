package planroute

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// userNode is the client's node in a relay's plans; the survey's client
// node (survey.ClientNode) is the relay itself.
const userNode = "user"

// SurveyWait bounds how long the first tunnel to a new destination waits
// for its survey; after that it takes the fallback chain (and the survey
// goes on for the next tunnels).
const SurveyWait = 5 * time.Second

// surveyTimeout bounds one survey of a destination.
const surveyTimeout = 30 * time.Second

// PerDestinationConfig is what a PerDestination takes from its relay.
type PerDestinationConfig struct {
	Config
	// Survey measures one destination from this relay (survey.Survey.Run,
	// with the relay's destination policy applied to its own probes).
	Survey func(ctx context.Context, dst string) (*survey.Result, error)
	// TTL is how long a destination's survey serves before the next
	// tunnel to it starts a new one.
	TTL time.Duration
	// MaxHops is the most relays after this one in a chain.
	MaxHops int
	// Self is this relay's name in the registry: left out of plans, as it
	// is the survey's client node already.
	Self string
	// CheckHost applies the destination policy to a host: a destination
	// it refuses is not surveyed (the dial refuses it). nil: all pass.
	CheckHost func(host string) error
	// Fallback is the chain a tunnel takes when there is no plan (the
	// relay's static chain). Required.
	Fallback func() *chain.Chain
	// ClientSegment is the client's RTT (ms) and advertised receive
	// window (bytes) read from the tunnel's accepted connection; ok false
	// when unknown. nil: always unknown.
	ClientSegment func(ctx context.Context) (rttMs float64, windowBytes int64, ok bool)
}

// PerDestination plans every new tunnel on its destination's survey plus
// the client's own segment, with this relay as the chain's first hop. A
// destination is surveyed when first asked for, and again by the first
// tunnel after TTL or after a relay went down or came back; a stale
// survey serves while the next one runs.
type PerDestination struct {
	core
	pc  PerDestinationConfig
	ctx context.Context // bounds the surveys and the health watch

	mu      sync.Mutex
	surveys map[string]*surveyEntry // by destination host:port
}

type surveyEntry struct {
	done chan struct{} // closed when res, err and at are set
	res  *survey.Result
	err  error
	at   time.Time
}

func isDone(e *surveyEntry) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// NewPerDestination makes a PerDestination and starts checking the relays
// it marks down; its goroutines end when ctx ends.
func NewPerDestination(ctx context.Context, cfg PerDestinationConfig) *PerDestination {
	r := &PerDestination{pc: cfg, ctx: ctx, surveys: map[string]*surveyEntry{}}
	r.init(cfg.Config, r.resurvey)
	r.spawn(func() { r.watch.Run(ctx) })
	return r
}

// resurvey makes every destination's survey due (a relay went down or
// came back): the next tunnel to each starts a new one, and the old one
// serves until it is done.
func (r *PerDestination) resurvey() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.surveys {
		if isDone(e) { // run writes at only before it closes done
			e.at = time.Time{}
		}
	}
}

// Failed marks down a relay a tunnel could not reach
// (relay.FailureObserver): the next tunnels are planned without it.
func (r *PerDestination) Failed(ch *chain.Chain, err error) { r.watch.Failed(ch, err) }

// Slow checks the relays of a chain whose tunnel is still not up after
// Config.SlowDial (relay.SlowObserver), and marks down the first that
// fails.
func (r *PerDestination) Slow(ch *chain.Chain) {
	if len(ch.Hops) > 0 {
		r.spawn(func() { r.watch.Slow(ch, r.cfg.SlowDial) })
	}
}

// survey returns dst's survey, starting one when there is none or it is
// older than the TTL. A stale survey keeps serving while the new one runs.
func (r *PerDestination) survey(ctx context.Context, dst string) (*survey.Result, error) {
	r.mu.Lock()
	e := r.surveys[dst]
	if e == nil || (isDone(e) && time.Since(e.at) > r.pc.TTL) {
		next := &surveyEntry{done: make(chan struct{})}
		r.surveys[dst] = next
		prev := e
		r.spawn(func() { r.run(dst, next, prev) })
		if e == nil || e.res == nil {
			e = next
		}
	}
	r.mu.Unlock()
	t := time.NewTimer(SurveyWait)
	defer t.Stop()
	select {
	case <-e.done:
		return e.res, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("survey of %s still running after %v", dst, SurveyWait)
	}
}

func (r *PerDestination) run(dst string, e, prev *surveyEntry) {
	ctx, cancel := context.WithTimeout(r.ctx, surveyTimeout)
	defer cancel()
	res, err := r.pc.Survey(ctx, dst)
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
	// Bound the cache: destinations not asked for within a TTL go, and
	// their next plan is logged again.
	for k, v := range r.surveys {
		if isDone(v) && time.Since(v.at) > 2*r.pc.TTL {
			delete(r.surveys, k)
			r.forget(k)
		}
	}
	r.mu.Unlock()
}

// Route plans the tunnel to dst (relay.Router). On any failure to plan it
// takes the fallback chain and says why.
func (r *PerDestination) Route(ctx context.Context, dst string) (*chain.Chain, error) {
	ch, err := r.route(ctx, dst)
	if err != nil {
		r.log.Info("no plan; using the static chain", zap.String("dst", dst), zap.Error(err))
		return r.pc.Fallback(), nil
	}
	return ch, nil
}

func (r *PerDestination) route(ctx context.Context, dst string) (*chain.Chain, error) {
	host, _, err := net.SplitHostPort(dst)
	if err != nil {
		return nil, err
	}
	if r.pc.CheckHost != nil {
		if err := r.pc.CheckHost(host); err != nil {
			return nil, err
		}
	}
	sr, err := r.survey(ctx, dst)
	if err != nil {
		return nil, err
	}
	down := r.watch.DownNames()
	m := r.matrix(ctx, sr)
	res, err := planner.Search(m, r.request(m, sr.Target.Name, down))
	if err != nil {
		return nil, err
	}
	b := res.Best
	if len(b.Chain) == 0 || b.Chain[0] != survey.ClientNode {
		return nil, errors.New("no chain from this relay to " + dst)
	}
	names := b.Chain[1:]
	ch, err := r.build(names, sr.Relays)
	if err != nil {
		return nil, err
	}
	r.logPlan(dst, names, false,
		zap.Float64("predicted_mbit_s", b.PredictedBps/1e6), zap.Float64("speedup", b.Speedup),
		zap.Strings("down", down))
	return ch, nil
}

// matrix is sr's matrix with this relay (the survey's client node) made a
// relay, and the user's one edge leading to it: every chain starts here.
func (r *PerDestination) matrix(ctx context.Context, sr *survey.Result) *planner.Matrix {
	m := &planner.Matrix{Nodes: slices.Clone(sr.Matrix.Nodes), Pairs: slices.Clone(sr.Matrix.Pairs)}
	for i := range m.Nodes {
		if m.Nodes[i].Name == survey.ClientNode {
			m.Nodes[i].Relay = true
		}
	}
	var rtt float64
	var window int64
	ok := false
	if r.pc.ClientSegment != nil {
		rtt, window, ok = r.pc.ClientSegment(ctx)
	}
	if !ok {
		rtt = 0.001 // unknown: the user's segment costs nothing and limits nothing
	}
	m.Nodes = append(m.Nodes, planner.Node{Name: userNode, WindowBytes: window})
	m.Pairs = append(m.Pairs, planner.Pair{A: userNode, B: survey.ClientNode, RTTMs: max(rtt, 0.001)})
	return m
}

// request plans on m (from matrix) from the user through this relay to
// dst, leaving out this relay's own registry entry and the relays down.
// MaxHops counts this relay too; any gain over direct wins.
func (r *PerDestination) request(m *planner.Matrix, dst string, down []string) planner.Request {
	req := planner.Request{Client: userNode, Destination: dst,
		Constraints: planner.Constraints{MaxHops: r.pc.MaxHops + 1, MinGain: -1}}
	if self := r.pc.Self; self != "" && slices.ContainsFunc(m.Nodes, func(n planner.Node) bool { return n.Name == self }) {
		req.Constraints.Exclude = []string{self} // this relay is the client node already
	}
	req.Constraints.Exclude = append(req.Constraints.Exclude, m.RelaysAmong(down)...)
	return req
}
