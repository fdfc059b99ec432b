// Package planroute routes tunnels through planned chains: Single, one
// destination's plan for every tunnel, planned again on a schedule
// (relayctl connect --dst); PerDestination, each destination planned on a
// survey cached per destination key for a TTL (relayctl connect without
// --dst, not waiting for surveys; relays with routing: plan, waiting up to
// SurveyWait for a new key's first).
//
// Its contract, for both:
//   - A relay a tunnel could not reach, or that fails a check after a
//     tunnel through it stalled, is marked down (pkg/health): every plan
//     from then on leaves it out, until it passes health.DefaultRise checks
//     in a row, one every Config.CheckEvery.
//   - A plan's relay names become relaymesh:// hops at the relay listener
//     addresses the registry records for them (HopURLs); a relay without
//     one fails the plan.
//   - A destination's (PerDestination: a destination key's) plan is
//     logged ("plan") when its chain changes, and every plan at debug
//     with what it rests on ("plan details": its segments and direct's,
//     the survey's notes).
//
// It does no I/O of its own: surveys, relay checks and chain building come
// in as functions (Config, PerDestinationConfig, PlanFunc). Its goroutines
// end when the context they were started with ends; Wait waits for them.
package planroute

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/health"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// Config is what both routers take from their owner.
type Config struct {
	// Build makes the chain for next-hop URLs with the owner's dialers,
	// pools and secret (relay.Server.Chain).
	Build func(next []string) (*chain.Chain, error)
	// Check asks whether a relay's relayd answers: directly (via nil), or
	// through via, a relay this host reaches (survey.Survey.CheckRelay).
	Check func(ctx context.Context, r registry.Relay, via *registry.Relay) error
	// CheckEvery is the time between two checks of a relay that is down.
	CheckEvery time.Duration
	// SlowDial is how long a tunnel had not come up when Slow is called
	// (relay.SlowDial); it is told in the reason a relay is marked down.
	SlowDial time.Duration
	// Log gets the plans, the relays marked down and re-admitted, and
	// why planning failed. nil: nothing is logged.
	Log *zap.Logger
}

// HopURLs is the next-hop URLs (native protocol) of a chain of relay
// names, at the relay listener addresses in relays (by name), with the
// segment into each striped as plan stripes it (planner.Segment.Stripes).
// Each names its relay: the link to it is made only if the peer's
// certificate does.
func HopURLs(names []string, plan planner.Plan, relays map[string]registry.Relay) ([]string, error) {
	var next []string
	for _, name := range names {
		r, ok := relays[name]
		if !ok || r.Relay == "" {
			return nil, fmt.Errorf("relay %s has no relay listener address in the registry", name)
		}
		next = append(next, nexthop.StripedRelayURL(name, r.Relay, stripesInto(plan, name)))
	}
	return next, nil
}

// stripesInto is the links plan stripes the segment into relay name over
// (0: the plan has no such segment, or does not stripe it).
func stripesInto(plan planner.Plan, name string) int {
	for _, s := range plan.Segments {
		if s.To == name {
			return s.Stripes
		}
	}
	return 0
}

// core is what Single and PerDestination share: the health watch, chain
// building and the log of plan changes.
type core struct {
	cfg   Config
	log   *zap.Logger
	watch *health.Watch
	wg    sync.WaitGroup // goroutines started with spawn

	mu   sync.Mutex
	last map[string]string // destination (key) -> chain last logged for it
}

// init sets c up; onChange is called when a relay goes down or comes back.
func (c *core) init(cfg Config, onChange func()) {
	c.cfg, c.log, c.last = cfg, cfg.Log, map[string]string{}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	c.watch = &health.Watch{Every: cfg.CheckEvery, Check: cfg.Check, Log: c.log, OnChange: onChange}
}

// spawn runs f in a goroutine Wait waits for.
func (c *core) spawn(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Wait waits for the router's goroutines, which end once the context it
// was started with is done (and checks or surveys in flight return).
func (c *core) Wait() { c.wg.Wait() }

// Down lists the relays marked down, by name: plans leave them out.
func (c *core) Down() []string { return c.watch.DownNames() }

// build makes the chain through the relays names (by name in relays),
// striped where plan stripes it.
func (c *core) build(names []string, plan planner.Plan, relays map[string]registry.Relay) (*chain.Chain, error) {
	next, err := HopURLs(names, plan, relays)
	if err != nil {
		return nil, err
	}
	return c.cfg.Build(next)
}

// logPlan logs the plan for key (a destination, or a destination key)
// when its chain differs from the one last logged for key (or none was),
// or always with always. fields name the destination.
func (c *core) logPlan(key string, names []string, always bool, fields ...zap.Field) {
	chainKey := strings.Join(names, ",")
	c.mu.Lock()
	prev, seen := c.last[key]
	c.last[key] = chainKey
	c.mu.Unlock()
	if always || !seen || prev != chainKey {
		c.log.Info("plan", append([]zap.Field{zap.Strings("chain", names)}, fields...)...)
	}
}

// logDetails logs at debug, with every plan (a changed chain or not),
// what it rests on: the segments of its pick and of direct (each one's
// bound, and where its figures came from: learnt and from whose traffic,
// declared, assumed, unknown) and the survey's notes. fields name the
// destination.
func (c *core) logDetails(res *planner.Result, notes []string, fields ...zap.Field) {
	if ce := c.log.Check(zap.DebugLevel, "plan details"); ce != nil {
		ce.Write(append(slices.Clip(fields), zap.Strings("chain", res.Best.Chain), zap.Any("segments", res.Best.Segments),
			zap.Any("direct_segments", res.Direct.Segments), zap.Strings("notes", notes))...)
	}
}

// forget drops what was logged for key: its next plan is logged.
func (c *core) forget(key string) {
	c.mu.Lock()
	delete(c.last, key)
	c.mu.Unlock()
}
