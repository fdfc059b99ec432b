package rules

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// planRouter stands for the owner's plan router: it answers its own
// chain and records what it was told.
type planRouter struct {
	ch     *chain.Chain
	asked  []string
	failed []*chain.Chain
	slow   []*chain.Chain
}

func (p *planRouter) Route(_ context.Context, dst string) (*chain.Chain, error) {
	p.asked = append(p.asked, dst)
	return p.ch, nil
}
func (p *planRouter) Failed(ch *chain.Chain, _ error) { p.failed = append(p.failed, ch) }
func (p *planRouter) Slow(ch *chain.Chain)            { p.slow = append(p.slow, ch) }

// fleet is a registry.Store with fixed relays.
type fleet []registry.Relay

func (f fleet) Relays(context.Context) ([]registry.Relay, error)       { return f, nil }
func (f fleet) Pairs(context.Context) ([]registry.Pair, error)         { return nil, nil }
func (f fleet) Publish(context.Context, string, []registry.Pair) error { return nil }
func (f fleet) Watch(context.Context) <-chan struct{}                  { return nil }

func TestRouterActions(t *testing.T) {
	set := mustParse(t, `DOMAIN,direct.example,DIRECT
DOMAIN,chain.example,CHAIN:r1,r2
DOMAIN,ghost.example,CHAIN:r1,ghost
DOMAIN,ads.example,REJECT
DOMAIN,plan.example,PLAN
`)
	plan := &planRouter{ch: &chain.Chain{}}
	direct := &chain.Chain{}
	var built [][]string
	var rejected []string
	reg := fleet{{Name: "r1", Relay: "10.0.0.1:7000"}, {Name: "r2", Relay: "10.0.0.2:7000"}, {Name: "ghost"}}
	r := NewRouter(RouterConfig{Rules: set, Plan: plan, Direct: direct,
		Chain: RegistryChains(reg, func(next []string) (*chain.Chain, error) {
			built = append(built, next)
			return &chain.Chain{}, nil
		}),
		Rejected: func(dst string, _ Decision) { rejected = append(rejected, dst) },
	})
	ctx := context.Background()
	if ch, err := r.Route(ctx, "direct.example:443"); err != nil || ch != direct {
		t.Fatalf("DIRECT: %v %v", ch, err)
	}
	if _, err := r.Route(ctx, "chain.example:443"); err != nil || len(built) != 1 ||
		!slices.Equal(built[0], []string{"relaymesh://10.0.0.1:7000?name=r1", "relaymesh://10.0.0.2:7000?name=r2"}) {
		t.Fatalf("CHAIN: %v %q", err, built)
	}
	if _, err := r.Route(ctx, "ghost.example:443"); err == nil || err.Error() != "rule line 3 (DOMAIN,ghost.example,CHAIN:r1,ghost): CHAIN relay ghost has no relay listener address in the registry" {
		t.Fatalf("CHAIN through a relay without an address: %v", err)
	}
	_, err := r.Route(ctx, "ads.example:443")
	var de *chain.DeniedError
	if err == nil || chain.Classify(err) != chain.KindDenied || !errors.As(err, &de) || de.Reason != DenyReason || !slices.Equal(rejected, []string{"ads.example:443"}) {
		t.Fatalf("REJECT: %v (%v), counted %v", err, chain.Classify(err), rejected)
	}
	if err := r.Refuses("ads.example:443"); chain.Classify(err) != chain.KindDenied {
		t.Fatalf("Refuses REJECT: %v", err)
	}
	if err := r.Refuses("plan.example:443"); err != nil {
		t.Fatalf("Refuses PLAN: %v", err)
	}
	for _, dst := range []string{"plan.example:443", "nomatch.example:443"} {
		if ch, err := r.Route(ctx, dst); err != nil || ch != plan.ch {
			t.Fatalf("%s: %v %v", dst, ch, err)
		}
	}
	if !slices.Equal(plan.asked, []string{"plan.example:443", "nomatch.example:443"}) {
		t.Fatalf("plan asked for %v", plan.asked)
	}
	// Failures and stalls on any chain reach the plan router's health.
	ch := &chain.Chain{}
	r.Failed(ch, errors.New("x"))
	r.Slow(ch)
	if len(plan.failed) != 1 || len(plan.slow) != 1 {
		t.Fatalf("observers: %d failed, %d slow", len(plan.failed), len(plan.slow))
	}
}
