package planroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// relaysOf is registry records for names, each relay listener at
// name:7000.
func relaysOf(names ...string) map[string]registry.Relay {
	out := map[string]registry.Relay{}
	for _, n := range names {
		out[n] = registry.Relay{Name: n, Relay: n + ":7000", Admin: n + ":9090"}
	}
	return out
}

// buildHops is a Config.Build that parses the hops and dials nothing.
func buildHops(next []string) (*chain.Chain, error) {
	c := &chain.Chain{}
	for _, raw := range next {
		h, err := nexthop.Parse(raw)
		if err != nil {
			return nil, err
		}
		c.Hops = append(c.Hops, h)
	}
	return c, nil
}

// hopsOf is the relay listener addresses of ch's hops.
func hopsOf(ch *chain.Chain) []string {
	var out []string
	for _, h := range ch.Hops {
		out = append(out, h.Addr)
	}
	return out
}

// checker answers checks of the relays it holds as up.
type checker struct {
	mu sync.Mutex
	up map[string]bool
	n  int // checks so far
}

func (c *checker) check(_ context.Context, r registry.Relay, _ *registry.Relay) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if !c.up[r.Name] {
		return errors.New("no answer")
	}
	return nil
}

func (c *checker) set(name string, up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up[name] = up
}

// logs is an observed logger at info.
func logs() (*zap.Logger, *observer.ObservedLogs) {
	core, obs := observer.New(zapcore.InfoLevel)
	return zap.New(core), obs
}

// plans lists the chain field of every "plan" entry, as "[a b]".
func plans(obs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range obs.FilterMessage("plan").All() {
		out = append(out, fmt.Sprint(e.ContextMap()["chain"]))
	}
	return out
}

// eventually polls cond every millisecond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// unreachable is the error of a tunnel on ch that could not reach hop i
// (1-based): the relay at that hop is to blame.
func unreachable(ch *chain.Chain, i int) error {
	return &chain.HopError{Hop: i, Target: ch.Hops[i-1].Addr, Kind: chain.KindTimeout, Err: errors.New("i/o timeout")}
}

func TestHopURLs(t *testing.T) {
	relays := relaysOf("a", "b")
	relays["nolistener"] = registry.Relay{Name: "nolistener", Admin: "x:9090"}
	got, err := HopURLs([]string{"b", "a"}, planner.Plan{}, relays)
	if err != nil || !slices.Equal(got, []string{"relaymesh://b:7000?name=b", "relaymesh://a:7000?name=a"}) {
		t.Fatalf("HopURLs = %q, %v", got, err)
	}
	// The segment into a relay carries the plan's stripes.
	striped := planner.Plan{Segments: []planner.Segment{{From: "client", To: "b"}, {From: "b", To: "a", Stripes: 3}}}
	got, err = HopURLs([]string{"b", "a"}, striped, relays)
	if err != nil || !slices.Equal(got, []string{"relaymesh://b:7000?name=b", "relaymesh://a:7000?name=a&stripes=3"}) {
		t.Fatalf("HopURLs of a striped plan = %q, %v", got, err)
	}
	if got, err := HopURLs(nil, planner.Plan{}, nil); err != nil || len(got) != 0 {
		t.Fatalf("direct: %q, %v", got, err)
	}
	for _, name := range []string{"nolistener", "gone"} {
		if _, err := HopURLs([]string{"a", name}, planner.Plan{}, relays); err == nil || !strings.Contains(err.Error(), "relay "+name+" ") {
			t.Errorf("%s: err %v, want one naming it", name, err)
		}
	}
}

func TestLogPlanOnChangePerDestination(t *testing.T) {
	log, obs := logs()
	var c core
	c.init(Config{Log: log}, nil)
	c.logPlan("x:80", []string{"a"}, false, zap.String("dst", "x:80"))
	c.logPlan("x:80", []string{"a"}, false)                            // same: not logged
	c.logPlan("y:80", []string{"a"}, false, zap.String("dst", "y:80")) // another destination
	c.logPlan("x:80", nil, false)                                      // direct now
	c.logPlan("x:80", []string{}, false)                               // still direct
	c.logPlan("x:80", nil, true)                                       // always
	c.forget("y:80")
	c.logPlan("y:80", []string{"a"}, false) // forgotten: logged again
	want := []string{"[a]", "[a]", "[]", "[]", "[a]"}
	if got := plans(obs); !slices.Equal(got, want) {
		t.Fatalf("plans logged %q, want %q", got, want)
	}
	if e := obs.FilterMessage("plan").All()[1]; e.ContextMap()["dst"] != "y:80" {
		t.Fatalf("second plan logged %v, want dst y:80", e.ContextMap())
	}
}
