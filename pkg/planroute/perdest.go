package planroute

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
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

// SurveyWait is how long relayd's first tunnel to a new destination key
// waits for its survey (PerDestinationConfig.SurveyWait); after that it
// takes the fallback chain, and the survey goes on for the next tunnels.
const SurveyWait = 5 * time.Second

// Defaults of PerDestinationConfig's bounds.
const (
	// DefaultMaxKeys bounds the destination keys cached: a client that
	// walks many hosts (a crawler, a scan) evicts the least recently used
	// instead of growing the cache.
	DefaultMaxKeys = 1024
	// DefaultMaxSurveys bounds the surveys running at once: each probes
	// from every relay, so a burst of new destinations must not turn into
	// a burst of probes across the fleet.
	DefaultMaxSurveys = 4
)

// surveyTimeout bounds one survey of a destination, from when it got a
// slot.
const surveyTimeout = 30 * time.Second

// PerDestinationConfig is what a PerDestination takes from its owner.
type PerDestinationConfig struct {
	Config
	// Survey measures one destination (host:port) from this host
	// (survey.Survey.Run; on a relay with its destination policy applied
	// to its own probes).
	Survey func(ctx context.Context, dst string) (*survey.Result, error)
	// TTL is how long a destination key's survey serves before the next
	// tunnel to it starts a new one; a key not asked for within 2×TTL of
	// its survey is dropped.
	TTL time.Duration
	// SurveyWait is how long a tunnel to a key with no survey yet waits
	// for it before taking the fallback chain. 0: it does not wait (the
	// survey runs in the background for the next tunnels).
	SurveyWait time.Duration
	// MaxKeys bounds the destination keys cached, evicting the least
	// recently used (and its survey, if one is queued or running).
	// 0: DefaultMaxKeys.
	MaxKeys int
	// MaxSurveys bounds the surveys running at once; more keys queue for a
	// slot and route as if they had no survey meanwhile.
	// 0: DefaultMaxSurveys.
	MaxSurveys int
	// MaxHops is the most relays after this host in a chain.
	MaxHops int
	// MaxStripes is the most TCP connections a segment between two relays
	// may be striped over (planner.Constraints.MaxStripes): 0 =
	// planner.DefaultMaxStripes, 1 = no striping.
	MaxStripes int
	// Self is this host's name in the registry: left out of plans, as it
	// is the survey's client node already. "": not in the registry.
	Self string
	// CheckHost applies the destination policy to a host: a destination
	// it refuses is not surveyed (the dial refuses it). nil: all pass.
	CheckHost func(host string) error
	// Fallback is the chain a tunnel takes when there is no plan (a
	// relay's static chain; direct for relayctl connect). Required.
	Fallback func() *chain.Chain
	// ClientSegment is the client's RTT (ms) and advertised receive
	// window (bytes) read from the tunnel's accepted connection; ok false
	// when unknown. nil: always unknown.
	ClientSegment func(ctx context.Context) (rttMs float64, windowBytes int64, ok bool)
}

// PerDestination plans every new tunnel on its destination key's survey
// plus the client's own segment, with this host as the chain's first hop.
//
// Surveys are cached by DestinationKey: the host without the port, a
// literal address by its /24 or /48. A key is surveyed when first asked
// for, probing the host:port of the tunnel that asked; that survey stands
// for every destination of the key (other ports, nearby addresses) until
// the next. The next starts with the first tunnel after TTL, or after a
// relay went down or came back; the last survey serves while it runs.
// A key has at most one survey queued or running; at most MaxSurveys run
// at once; at most MaxKeys keys are kept, the least recently used evicted.
type PerDestination struct {
	core
	pc      PerDestinationConfig
	ctx     context.Context // bounds the surveys and the health watch
	maxKeys int
	slots   chan struct{} // one per running survey: MaxSurveys

	mu   sync.Mutex
	keys map[string]*keyEntry
	lru  *list.List // of *keyEntry, most recently used first
}

// keyEntry is one destination key's surveys; r.mu guards its fields.
type keyEntry struct {
	key  string
	elem *list.Element  // in r.lru
	res  *survey.Result // the last good survey; nil before one
	err  error          // the last survey's error while res is nil
	at   time.Time      // when the last survey ended; zero before one
	due  bool           // a relay went down or came back: survey again
	// retryAt, when set, is when the key is surveyed again sooner than
	// TTL: its plan went direct for want of measurements, awaitN surveys
	// in a row (the wait doubles each time, see awaitBackoff).
	retryAt time.Time
	awaitN  int
	run     *surveyRun // the survey queued or running; nil when none
	told    bool       // "no plan yet" logged for this key
}

// surveyRun is one survey of a key, queued for a slot or running.
type surveyRun struct {
	dst    string        // the host:port probed for the key
	done   chan struct{} // closed once its entry holds the outcome
	cancel context.CancelFunc
}

// errSurveying is route's answer for a key with no survey yet while its
// survey runs and the tunnel does not wait.
var errSurveying = errors.New("no plan yet: the destination is being surveyed")

// NewPerDestination makes a PerDestination and starts checking the relays
// it marks down; its goroutines end when ctx ends.
func NewPerDestination(ctx context.Context, cfg PerDestinationConfig) *PerDestination {
	r := &PerDestination{pc: cfg, ctx: ctx, maxKeys: cmp.Or(cfg.MaxKeys, DefaultMaxKeys),
		slots: make(chan struct{}, cmp.Or(cfg.MaxSurveys, DefaultMaxSurveys)),
		keys:  map[string]*keyEntry{}, lru: list.New()}
	r.init(cfg.Config, r.resurvey)
	r.spawn(func() { r.watch.Run(ctx) })
	return r
}

// resurvey makes every key's survey due (a relay went down or came back):
// the next tunnel to each starts a new one, and the old one serves until
// it is done. A survey running now may have read the fleet before the
// change, so its key is due again once it ends.
func (r *PerDestination) resurvey() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.keys {
		e.due = true
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

// Keys is the number of destination keys cached.
func (r *PerDestination) Keys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

// survey returns key's survey for a tunnel to dst, starting one (of dst)
// when there is none or it is due. A key with a survey answers at once,
// stale or not; one without waits up to SurveyWait for the survey, or
// answers errSurveying at once when SurveyWait is 0. first is true the
// first time errSurveying is answered for the key.
func (r *PerDestination) survey(ctx context.Context, key, dst string) (res *survey.Result, first bool, err error) {
	r.mu.Lock()
	e := r.entry(key)
	if e.run == nil && (e.at.IsZero() || e.due || time.Since(e.at) > r.pc.TTL || !e.retryAt.IsZero() && time.Now().After(e.retryAt)) {
		r.start(e, dst)
	}
	run := e.run
	if e.res != nil || run == nil {
		res, err = e.res, e.err
		r.mu.Unlock()
		return res, false, err
	}
	if r.pc.SurveyWait <= 0 {
		first, e.told = !e.told, true
		r.mu.Unlock()
		return nil, first, errSurveying
	}
	r.mu.Unlock()
	t := time.NewTimer(r.pc.SurveyWait)
	defer t.Stop()
	select {
	case <-run.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		if e.res == nil && e.err == nil {
			// run drops the outcome of a key evicted meanwhile.
			return nil, false, fmt.Errorf("survey of %s dropped: its key was evicted", dst)
		}
		return e.res, false, e.err
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-t.C:
		return nil, false, fmt.Errorf("survey of %s still running after %v", dst, r.pc.SurveyWait)
	}
}

// entry is key's entry, made the most recently used; a new key evicts the
// least recently used beyond MaxKeys. r.mu is held.
func (r *PerDestination) entry(key string) *keyEntry {
	if e := r.keys[key]; e != nil {
		r.lru.MoveToFront(e.elem)
		return e
	}
	e := &keyEntry{key: key}
	e.elem = r.lru.PushFront(e)
	r.keys[key] = e
	for len(r.keys) > r.maxKeys {
		old := r.lru.Back().Value.(*keyEntry)
		r.log.Debug("destination key evicted: the least recently used", zap.String("key", old.key), zap.Int("max_keys", r.maxKeys))
		r.drop(old)
	}
	return e
}

// drop removes e from the cache and cancels its survey, if any; its next
// plan is logged again. r.mu is held.
func (r *PerDestination) drop(e *keyEntry) {
	delete(r.keys, e.key)
	r.lru.Remove(e.elem)
	if e.run != nil {
		e.run.cancel()
	}
	r.forget(e.key)
}

// start queues a survey of dst for e. r.mu is held.
func (r *PerDestination) start(e *keyEntry, dst string) {
	ctx, cancel := context.WithCancel(r.ctx)
	run := &surveyRun{dst: dst, done: make(chan struct{}), cancel: cancel}
	e.run, e.due, e.retryAt = run, false, time.Time{}
	r.spawn(func() { r.run(ctx, e, run) })
}

// run takes a survey slot, surveys and records the outcome in e, unless e
// was evicted meanwhile (then ctx is cancelled and the outcome dropped).
func (r *PerDestination) run(ctx context.Context, e *keyEntry, run *surveyRun) {
	defer close(run.done)
	defer run.cancel()
	var res *survey.Result
	var err error
	select {
	case r.slots <- struct{}{}:
		sctx, cancel := context.WithTimeout(ctx, surveyTimeout)
		res, err = r.pc.Survey(sctx, run.dst)
		cancel()
		<-r.slots
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		// Outside r.mu: the watch may call back into resurvey.
		r.watch.SetFleet(res.Relays, res.FromHere())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e.run = nil
	if r.keys[e.key] != e {
		return // evicted
	}
	switch {
	case err == nil:
		e.res, e.err = res, nil
	case e.res != nil:
		// Keep planning on the last good survey rather than on nothing.
		r.log.Warn("survey failed; keeping the previous one", zap.String("key", e.key), zap.String("dst", run.dst), zap.Error(err))
	default:
		r.log.Warn("survey failed", zap.String("key", e.key), zap.String("dst", run.dst), zap.Error(err))
		e.err = err
	}
	e.at = time.Now()
	// Keys not asked for within 2×TTL of their survey go, and their next
	// plan is logged again.
	for _, v := range r.keys {
		if v.run == nil && !v.at.IsZero() && time.Since(v.at) > 2*r.pc.TTL {
			r.drop(v)
		}
	}
}

// Route plans the tunnel to dst (relay.Router). Without a plan it takes
// the fallback chain and says why: once per key while its first survey
// runs, else per tunnel.
func (r *PerDestination) Route(ctx context.Context, dst string) (*chain.Chain, error) {
	ch, first, err := r.route(ctx, dst)
	switch {
	case errors.Is(err, errSurveying):
		fb := r.pc.Fallback()
		if first {
			msg := "no plan yet; direct while surveying"
			if len(fb.Hops) > 0 {
				msg = "no plan yet; static chain while surveying"
			}
			r.log.Info(msg, zap.String("dst", dst), zap.String("key", DestinationKey(dst)))
		}
		return fb, nil
	case err != nil:
		r.log.Info("no plan; using the static chain", zap.String("dst", dst), zap.Error(err))
		return r.pc.Fallback(), nil
	}
	return ch, nil
}

func (r *PerDestination) route(ctx context.Context, dst string) (ch *chain.Chain, first bool, err error) {
	host, _, err := net.SplitHostPort(dst)
	if err != nil {
		return nil, false, err
	}
	if r.pc.CheckHost != nil {
		if err := r.pc.CheckHost(host); err != nil {
			return nil, false, err
		}
	}
	key := DestinationKey(dst)
	sr, first, err := r.survey(ctx, key, dst)
	if err != nil {
		return nil, first, err
	}
	down := r.watch.DownNames()
	m := r.matrix(ctx, sr)
	res, err := planner.Search(m, r.request(m, sr.Target.Name, down))
	if err != nil {
		return nil, false, err
	}
	b := res.Best
	if len(res.Awaiting) > 0 {
		r.retrySoon(key)
		return nil, false, fmt.Errorf("waiting for measurements (%s): surveying %s again soon",
			strings.Join(res.Awaiting, "; "), key)
	}
	r.awaited(key)
	if len(b.Chain) == 0 || b.Chain[0] != survey.ClientNode {
		return nil, false, errors.New("no chain from this host to " + dst)
	}
	names := b.Chain[1:]
	ch, err = r.build(names, b, sr.Relays)
	if err != nil {
		return nil, false, err
	}
	fields := []zap.Field{zap.String("dst", dst), zap.String("key", key), zap.String("surveyed", sr.Target.Addr),
		zap.Float64("predicted_mbit_s", b.PredictedBps/1e6), zap.Strings("down", down)}
	if b.Speedup > 0 {
		// Unknown (0) when the user's only edge is to this host: the
		// matrix has no direct path from the user to compare with.
		fields = append(fields, zap.Float64("speedup", b.Speedup))
	}
	r.logDetails(res, sr.Notes, fields...)
	r.logPlan(key, names, false, fields...)
	return ch, false, nil
}

// retrySoon has key surveyed again soon after its last survey (from
// AwaitingReplanEvery, doubling with each survey in a row that still
// waits, up to TTL), unless one is already due or running.
func (r *PerDestination) retrySoon(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.keys[key]; e != nil && e.retryAt.IsZero() && e.run == nil {
		e.awaitN++
		e.retryAt = e.at.Add(awaitBackoff(AwaitingReplanEvery, r.pc.TTL, e.awaitN))
	}
}

// awaited marks key's survey as awaiting nothing: the next wait for
// measurements starts from AwaitingReplanEvery again.
func (r *PerDestination) awaited(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.keys[key]; e != nil {
		e.awaitN = 0
	}
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
		Constraints: planner.Constraints{MaxHops: r.pc.MaxHops + 1, MinGain: -1, MaxStripes: r.pc.MaxStripes}}
	if self := r.pc.Self; self != "" && slices.ContainsFunc(m.Nodes, func(n planner.Node) bool { return n.Name == self }) {
		req.Constraints.Exclude = []string{self} // this relay is the client node already
	}
	req.Constraints.Exclude = append(req.Constraints.Exclude, m.RelaysAmong(down)...)
	return req
}
