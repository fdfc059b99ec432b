package planroute

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// ReplanAfterFailureMin spaces a Single's re-plans caused by failing
// tunnels: a dead relay fails every tunnel until the registry notices, and
// one survey is enough.
const ReplanAfterFailureMin = 5 * time.Second

// replanTimeout bounds one re-plan (a survey of the whole fleet).
const replanTimeout = 60 * time.Second

// AwaitingReplanEvery is how soon a plan that went direct for want of
// measurements (planner.Result.Awaiting: a fleet that has not measured
// itself yet) is made again, whatever the re-plan interval: relays publish
// their first measurements within seconds of starting. Each further plan
// that still waits doubles it, up to the re-plan interval: what never
// arrives (a destination no relay reaches) costs a survey per interval.
const AwaitingReplanEvery = 5 * time.Second

// awaitBackoff is the wait after the n-th plan in a row that awaited
// measurements (n from 1): first, doubling each time, at most most.
func awaitBackoff(first, most time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// Plan is one plan of a Single with what applying it needs.
type Plan struct {
	// Result is the planner's answer; Best.Chain names the relays after
	// this host.
	Result *planner.Result
	// Relays are the registry's relays of the survey, by name: where
	// each hop is, and what the relays marked down are checked by. nil
	// (a plan on a matrix file) applies only a direct plan.
	Relays map[string]registry.Relay
	// FromHere names the relays this host reached itself in the survey;
	// the others are checked through one it reached.
	FromHere []string
	// Notes are the survey's notes (what it could not measure, where a
	// figure came from): logged at debug with the plan.
	Notes []string
	// Matrix and Request are what Result was searched from: with them a
	// relay marked down drops out of the plan at once, searched again on
	// the same figures, before the next survey. nil Matrix: it waits for
	// the next plan.
	Matrix  *planner.Matrix
	Request planner.Request
}

// PlanFunc plans once, leaving out the relays named in down.
type PlanFunc func(ctx context.Context, down []string) (*Plan, error)

// Single sends every tunnel, whatever its destination, through the current
// plan's chain, and plans again: every interval (Run), and soon after a
// tunnel fails or stalls on the current chain, or a relay goes down or
// comes back. New tunnels take the new chain; live ones keep theirs.
type Single struct {
	core
	plan  PlanFunc
	every time.Duration
	// awaitEvery is AwaitingReplanEvery (shorter in tests).
	awaitEvery time.Duration

	// installMu orders the installs of a plan (Apply's, and the one a
	// relay going down makes at once), each with the relays down as read
	// inside it: a plan never installs past a relay marked down before.
	installMu sync.Mutex

	mu       sync.Mutex
	cur      *chain.Chain
	names    []string
	last     *Plan         // the plan installed last; nil before Apply
	kick     chan struct{} // buffered 1: a re-plan is due
	lastKick time.Time
	awaiting []string // the current plan's Result.Awaiting
	awaitN   int      // plans in a row that awaited measurements
}

// NewSingle makes a Single that plans with plan every interval once Run
// runs. Apply the first plan before routing by it.
func NewSingle(cfg Config, every time.Duration, plan PlanFunc) *Single {
	r := &Single{plan: plan, every: every, awaitEvery: AwaitingReplanEvery, kick: make(chan struct{}, 1)}
	r.init(cfg, r.relayChanged)
	return r
}

// relayChanged is the watch's OnChange: a relay went down or came back.
// A chain through a relay now down is replaced at once by the last plan
// searched again without it (a new survey may take seconds while every
// tunnel on the old chain fails); then Run plans again.
func (r *Single) relayChanged() {
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	if last != nil {
		r.installMu.Lock()
		down := r.watch.DownNames()
		if p, ok := replanWithout(last, down); ok {
			r.log.Info("a relay of the chain is down: planned again on the last survey without it, until the next plan",
				zap.Strings("down", down))
			if err := r.install(p, down, false); err != nil {
				r.log.Warn("the plan without the relays down could not be applied; planning again", zap.Error(err))
			}
		}
		r.installMu.Unlock()
	}
	r.replanSoon(nil, true)
}

// replanWithout is p searched again on its own matrix with the relays in
// down left out, when its chain goes through one of them. ok is false
// when it does not, when p carries no matrix, or when the search fails
// (the next plan will do).
func replanWithout(p *Plan, down []string) (*Plan, bool) {
	if p.Matrix == nil || !slices.ContainsFunc(p.Result.Best.Chain, func(n string) bool { return slices.Contains(down, n) }) {
		return nil, false
	}
	req := p.Request
	req.Constraints.Exclude = append(slices.Clone(req.Constraints.Exclude), p.Matrix.RelaysAmong(down)...)
	res, err := planner.Search(p.Matrix, req)
	if err != nil {
		return nil, false
	}
	again := *p
	again.Result, again.Request = res, req
	return &again, true
}

// Route is the current plan's chain (relay.Router), nil before Apply.
func (r *Single) Route(context.Context, string) (*chain.Chain, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, nil
}

// Chain names the relays of the current plan's chain (none: direct).
func (r *Single) Chain() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.names)
}

// Awaiting is what the current plan waits for (planner.Result.Awaiting):
// empty unless it went direct for want of measurements.
func (r *Single) Awaiting() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.awaiting)
}

// Failed reads a tunnel that failed on ch (relay.FailureObserver): a relay
// that could not be reached is marked down, and a broken current chain is
// planned again.
func (r *Single) Failed(ch *chain.Chain, err error) {
	if r.watch.Failed(ch, err) {
		r.replanSoon(ch, false)
	}
}

// Slow reads a tunnel on ch still not up after Config.SlowDial
// (relay.SlowObserver): ch's relays are checked, the first that fails is
// marked down, and the current chain is planned again.
func (r *Single) Slow(ch *chain.Chain) {
	if len(ch.Hops) == 0 {
		return
	}
	r.spawn(func() {
		r.watch.Slow(ch, r.cfg.SlowDial)
		r.replanSoon(ch, false)
	})
}

// replanSoon asks Run to plan now, at most every ReplanAfterFailureMin,
// and only for trouble on the current chain (ch nil: any). force skips
// both checks: a relay went down or came back.
func (r *Single) replanSoon(ch *chain.Chain, force bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && (ch != r.cur || time.Since(r.lastKick) < ReplanAfterFailureMin) {
		return
	}
	r.lastKick = time.Now()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Apply plans once, leaving out the relays that are down, and installs the
// chain. The plan is logged when its chain changed, or always with logAll.
func (r *Single) Apply(ctx context.Context, logAll bool) error {
	p, err := r.plan(ctx, r.watch.DownNames())
	if err != nil {
		return err
	}
	r.installMu.Lock()
	defer r.installMu.Unlock()
	// A relay marked down while the survey ran is left out on its figures.
	down := r.watch.DownNames()
	if again, ok := replanWithout(p, down); ok {
		p = again
	}
	return r.install(p, down, logAll)
}

// install makes p's chain the one new tunnels take, and logs it (when its
// chain changed, or always with logAll); down are the relays it leaves out.
// r.installMu is held.
func (r *Single) install(p *Plan, down []string, logAll bool) error {
	b := p.Result.Best
	ch, err := r.build(b.Chain, b, p.Relays)
	if err != nil {
		return err
	}
	if p.Relays != nil {
		r.watch.SetFleet(p.Relays, p.FromHere)
	}
	r.mu.Lock()
	r.cur, r.names, r.last = ch, b.Chain, p
	wasAwaiting := len(r.awaiting) > 0
	r.awaiting = p.Result.Awaiting
	if len(r.awaiting) > 0 {
		r.awaitN++
	} else {
		r.awaitN = 0
	}
	next := r.nextLocked()
	r.mu.Unlock()
	fields := []zap.Field{zap.String("dst", p.Result.Destination),
		zap.Float64("predicted_mbit_s", b.PredictedBps/1e6), zap.Float64("speedup", b.Speedup),
		zap.Strings("down", down)}
	r.logDetails(p.Result, p.Notes, fields...)
	if len(p.Result.Awaiting) > 0 {
		if !wasAwaiting || logAll {
			r.log.Info("direct: waiting for measurements; planning again soon", append(fields,
				zap.Strings("awaiting", p.Result.Awaiting), zap.Duration("again_in", next))...)
		}
		return nil
	}
	r.logPlan(p.Result.Destination, b.Chain, logAll || wasAwaiting, fields...)
	return nil
}

// next is how long Run waits before the next plan.
func (r *Single) next() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nextLocked()
}

// nextLocked is next with r.mu held.
func (r *Single) nextLocked() time.Duration {
	if r.awaitN > 0 {
		return awaitBackoff(r.awaitEvery, r.every, r.awaitN)
	}
	return r.every
}

// Run checks the relays that are down and plans again every interval
// (sooner while the plan awaits measurements: AwaitingReplanEvery) and when a
// re-plan is due, until ctx ends. A failed re-plan keeps the current
// chain.
func (r *Single) Run(ctx context.Context) {
	r.spawn(func() { r.watch.Run(ctx) })
	t := time.NewTimer(r.next())
	defer t.Stop()
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
			kicked = true
			r.log.Info("planning again: a tunnel failed or stalled, or a relay went down or came back")
		}
		pctx, cancel := context.WithTimeout(ctx, replanTimeout)
		if err := r.Apply(pctx, kicked); err != nil {
			r.log.Warn("re-plan failed; keeping the current chain", zap.Error(err))
		}
		cancel()
		t.Reset(r.next())
	}
}
