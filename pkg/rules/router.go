package rules

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// PlanRouter is what routes a destination when its action is PLAN: the
// owner's plan router (pkg/planroute), as relay.Router has it.
type PlanRouter interface {
	Route(ctx context.Context, dst string) (*chain.Chain, error)
}

// RouterConfig is what a Router takes from its owner (relayctl connect,
// a relay with routing: plan).
type RouterConfig struct {
	Rules *Set
	// Plan routes PLAN destinations and those no rule matches.
	Plan PlanRouter
	// Direct is the chain of no hops (relay.Server.Chain(nil)).
	Direct *chain.Chain
	// Chain builds the chain through relays, by registry name, in order
	// (RegistryChains).
	Chain func(ctx context.Context, relays []string) (*chain.Chain, error)
	// Rejected is called for every destination a REJECT rule refuses,
	// after it is logged (relayd counts it). nil: only logged.
	Rejected func(dst string, d Decision)
	// Log gets every decision at debug level and each rejection at info.
	// nil: nothing is logged.
	Log *zap.Logger
}

// Router routes each new tunnel by the rule set (relay.Router): DIRECT on
// Direct, PLAN on Plan, CHAIN on the named relays, REJECT with an error
// the front ends answer as "not allowed" (SOCKS5 0x02, HTTP 403). It
// passes the tunnels that failed or stalled on to Plan's observers, so a
// relay that failed a CHAIN tunnel is planned around too.
type Router struct {
	cfg RouterConfig
	log *zap.Logger
}

// NewRouter makes a Router; cfg.Rules, Plan and Direct are required, and
// Chain when the rules name a chain.
func NewRouter(cfg RouterConfig) *Router {
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Router{cfg: cfg, log: log}
}

// RejectedError is a destination a REJECT rule refused. It wraps a
// chain.DeniedError (reason "rule"): front ends answer it as any denial.
type RejectedError struct {
	Rule *Rule
	err  *chain.DeniedError
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("rule line %d (%s): %v", e.Rule.Line, e.Rule.Text, e.err)
}

func (e *RejectedError) Unwrap() error { return e.err }

// DenyReason is a rejection's reason in chain.DeniedError and in relayd's
// relaymesh_denials_total{reason}.
const DenyReason = "rule"

// Route is the chain of a new tunnel to dst (host:port).
func (r *Router) Route(ctx context.Context, dst string) (*chain.Chain, error) {
	d := r.cfg.Rules.MatchAddr(dst)
	if ce := r.log.Check(zap.DebugLevel, "rule"); ce != nil {
		ce.Write(decisionFields(dst, d)...)
	}
	switch d.Action.Verb {
	case Direct:
		return r.cfg.Direct, nil
	case Chain:
		if r.cfg.Chain == nil {
			return nil, fmt.Errorf("rule line %d (%s): no registry to find the relays in", d.Rule.Line, d.Rule.Text)
		}
		ch, err := r.cfg.Chain(ctx, d.Action.Relays)
		if err != nil {
			return nil, fmt.Errorf("rule line %d (%s): %w", d.Rule.Line, d.Rule.Text, err)
		}
		return ch, nil
	case Reject:
		err := r.reject(dst, d)
		r.log.Info("destination rejected by rule", decisionFields(dst, d)...)
		if r.cfg.Rejected != nil {
			r.cfg.Rejected(dst, d)
		}
		return nil, err
	}
	return r.cfg.Plan.Route(ctx, dst)
}

// Refuses is the error a tunnel to dst would be refused with by a REJECT
// rule, nil when no rule rejects it: a front end that answers a client
// before it routes (optimistic data) asks first, to refuse in the reply.
func (r *Router) Refuses(dst string) error {
	d := r.cfg.Rules.MatchAddr(dst)
	if d.Action.Verb != Reject {
		return nil
	}
	return r.reject(dst, d)
}

func (r *Router) reject(dst string, d Decision) error {
	return &RejectedError{Rule: d.Rule, err: &chain.DeniedError{Addr: dst, Reason: DenyReason}}
}

func decisionFields(dst string, d Decision) []zap.Field {
	f := []zap.Field{zap.String("dst", dst), zap.String("action", d.Action.String())}
	if d.Rule != nil {
		f = append(f, zap.Int("line", d.Rule.Line), zap.String("rule", d.Rule.Text))
	}
	return f
}

// Failed passes a failed tunnel to Plan's relay.FailureObserver, if it is
// one: a relay a CHAIN tunnel could not reach is down for plans too.
func (r *Router) Failed(ch *chain.Chain, err error) {
	if fo, ok := r.cfg.Plan.(interface{ Failed(*chain.Chain, error) }); ok {
		fo.Failed(ch, err)
	}
}

// Slow passes a stalled tunnel to Plan's relay.SlowObserver, if it is one.
func (r *Router) Slow(ch *chain.Chain) {
	if so, ok := r.cfg.Plan.(interface{ Slow(*chain.Chain) }); ok {
		so.Slow(ch)
	}
}

// RegistryChains is RouterConfig.Chain on a registry: the relays' native
// listener addresses as reg lists them now (without waiting on the
// network), each hop checked to be the relay it names, built with build
// (relay.Server.Chain).
func RegistryChains(reg registry.Store, build func(next []string) (*chain.Chain, error)) func(ctx context.Context, relays []string) (*chain.Chain, error) {
	return func(ctx context.Context, relays []string) (*chain.Chain, error) {
		known, err := reg.Relays(ctx)
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		next := make([]string, 0, len(relays))
		for _, name := range relays {
			addr := ""
			for _, k := range known {
				if k.Name == name {
					addr = k.Relay
				}
			}
			if addr == "" {
				return nil, errors.New("CHAIN relay " + name + " has no relay listener address in the registry")
			}
			next = append(next, nexthop.RelayURL(name, addr))
		}
		return build(next)
	}
}
