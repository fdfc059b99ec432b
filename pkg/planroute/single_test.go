package planroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/planner"
)

// fakePlanner plans through a, or through b while a is down, and records
// what it was told is down.
type fakePlanner struct {
	mu    sync.Mutex
	downs [][]string
	err   error // returned instead of a plan when set
}

func (p *fakePlanner) plan(_ context.Context, down []string) (*Plan, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downs = append(p.downs, down)
	if p.err != nil {
		return nil, p.err
	}
	best := []string{"a"}
	if slices.Contains(down, "a") {
		best = []string{"b"}
	}
	return &Plan{Result: &planner.Result{Destination: "tokyo", Best: planner.Plan{Chain: best, PredictedBps: 8e6, Speedup: 2}},
		Relays: relaysOf("a", "b"), FromHere: []string{"a", "b"}}, nil
}

func (p *fakePlanner) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// runSingle runs r until the test ends, and waits for it then.
func runSingle(t *testing.T, r *Single) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; r.Wait() })
	return ctx
}

func routeOf(t *testing.T, r interface {
	Route(context.Context, string) (*chain.Chain, error)
}, dst string) []string {
	t.Helper()
	ch, err := r.Route(context.Background(), dst)
	if err != nil || ch == nil {
		t.Fatalf("Route(%s) = %v, %v", dst, ch, err)
	}
	return hopsOf(ch)
}

// A tunnel that cannot reach a marks it down and plans around it at once;
// a is planned again only after its checks pass 3 times in a row.
func TestSingleMarksDownAndReadmits(t *testing.T) {
	log, obs := logs()
	c := &checker{up: map[string]bool{}}
	p := &fakePlanner{}
	r := NewSingle(Config{Build: buildHops, Check: c.check, CheckEvery: 2 * time.Millisecond, SlowDial: 2 * time.Second, Log: log},
		time.Hour, p.plan)
	if err := r.Apply(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got := routeOf(t, r, "anything:443"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("first chain %v, want through a", got)
	}
	ctx := runSingle(t, r)

	ch, _ := r.Route(ctx, "x:80")
	r.Failed(ch, unreachable(ch, 1))
	if got := r.Down(); fmt.Sprint(got) != "[a]" {
		t.Fatalf("down %v after a tunnel could not reach a", got)
	}
	eventually(t, "planned around a", func() bool { return fmt.Sprint(routeOf(t, r, "x:80")) == "[b:7000]" })
	// Checks fail: a stays down, however often it is checked.
	eventually(t, "a checked 5 times", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.n >= 5 })
	if !slices.Equal(r.Down(), []string{"a"}) || fmt.Sprint(r.Chain()) != "[b]" {
		t.Fatalf("down %v, chain %v while a's checks fail", r.Down(), r.Chain())
	}
	c.set("a", true)
	eventually(t, "a planned again", func() bool { return fmt.Sprint(routeOf(t, r, "x:80")) == "[a:7000]" })
	if len(r.Down()) != 0 {
		t.Fatalf("down %v after a was planned again", r.Down())
	}

	if got, want := plans(obs), []string{"[a]", "[b]", "[a]"}; !slices.Equal(got, want) {
		t.Fatalf("plans logged %q, want %q", got, want)
	}
	last := obs.FilterMessage("plan").All()[2].ContextMap()
	if fmt.Sprint(last["down"]) != "[]" || last["dst"] != "tokyo" || last["predicted_mbit_s"] != 8.0 || last["speedup"] != 2.0 {
		t.Fatalf("last plan logged %v", last)
	}
	if fmt.Sprint(obs.FilterMessage("plan").All()[1].ContextMap()["down"]) != "[a]" {
		t.Fatal("the plan around a does not say a is down")
	}
	for _, msg := range []string{"relay marked down: left out of plans until it passes its checks", "relay re-admitted: it passed its checks",
		"planning again: a tunnel failed or stalled, or a relay went down or came back"} {
		if obs.FilterMessage(msg).Len() == 0 {
			t.Errorf("not logged: %q", msg)
		}
	}
}

// Trouble on the current chain plans again, at most every
// ReplanAfterFailureMin; trouble on an older chain, or the destination's
// own refusal, does not.
func TestSingleReplansOnTroubleOnTheCurrentChain(t *testing.T) {
	p := &fakePlanner{}
	r := NewSingle(Config{Build: buildHops, Check: (&checker{}).check, CheckEvery: time.Hour}, time.Hour, p.plan)
	if err := r.Apply(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	cur, _ := r.Route(context.Background(), "x:80")
	kicked := func() bool {
		select {
		case <-r.kick:
			return true
		default:
			return false
		}
	}
	r.Failed(cur, &chain.HopError{Hop: 1, Target: "x:80", Kind: chain.KindRefused, Err: errors.New("refused")})
	if kicked() || len(r.Down()) != 0 {
		t.Fatal("the destination refusing at the last relay was taken for a broken chain")
	}
	r.Failed(cur, unreachable(cur, 1)) // a goes down: plan again, whatever the spacing
	if !kicked() {
		t.Fatal("no re-plan after a went down")
	}
	r.Failed(cur, unreachable(cur, 1)) // a already down: a broken chain, spaced
	if kicked() {
		t.Fatalf("re-planned again within %v", ReplanAfterFailureMin)
	}
	r.mu.Lock()
	r.lastKick = time.Now().Add(-ReplanAfterFailureMin)
	r.mu.Unlock()
	old := &chain.Chain{Hops: slices.Clone(cur.Hops)}
	r.Failed(old, unreachable(old, 1))
	if kicked() {
		t.Fatal("re-planned for trouble on a chain no longer in use")
	}
	r.Failed(cur, unreachable(cur, 1))
	if !kicked() {
		t.Fatal("no re-plan for a broken current chain")
	}
	r.Wait()
}

// A plan that cannot be applied keeps the chain in use; a plan on a matrix
// file (no registry records) applies only when it is direct.
func TestSingleKeepsChainWhenAPlanFails(t *testing.T) {
	log, obs := logs()
	p := &fakePlanner{}
	r := NewSingle(Config{Build: buildHops, Check: (&checker{}).check, CheckEvery: time.Hour, Log: log}, time.Hour, p.plan)
	if err := r.Apply(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	p.setErr(errors.New("survey failed"))
	if err := r.Apply(context.Background(), false); err == nil {
		t.Fatal("a failed plan applied")
	}
	if got := routeOf(t, r, "x:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("chain %v after a failed plan, want a's kept", got)
	}
	if err := r.Apply(context.Background(), false); err == nil {
		t.Fatal("a failed plan applied")
	}

	offline := func(chain ...string) PlanFunc {
		return func(context.Context, []string) (*Plan, error) {
			return &Plan{Result: &planner.Result{Destination: "srv", Best: planner.Plan{Chain: chain}}}, nil
		}
	}
	r.plan = offline("a")
	if err := r.Apply(context.Background(), false); err == nil {
		t.Fatal("a chain without registry records applied")
	}
	r.plan = offline()
	if err := r.Apply(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if got := routeOf(t, r, "x:80"); len(got) != 0 || len(r.Chain()) != 0 {
		t.Fatalf("chain %v after a direct plan", got)
	}
	if got := plans(obs); !slices.Equal(got, []string{"[a]", "[]"}) {
		t.Fatalf("plans logged %q", got)
	}
}

// A plan that went direct for want of measurements is made again within
// the awaiting interval, however long the re-plan interval; once the
// measurements are in, the chain is taken and the interval is the usual.
func TestSingleReplansSoonWhileAwaiting(t *testing.T) {
	log, obs := logs()
	var mu sync.Mutex
	calls := 0
	plan := func(context.Context, []string) (*Plan, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		res := &planner.Result{Destination: "tokyo", Best: planner.Plan{Chain: []string{}}, Awaiting: []string{"no relay's RTT to tokyo"}}
		if calls >= 3 {
			res = &planner.Result{Destination: "tokyo", Best: planner.Plan{Chain: []string{"a"}, PredictedBps: 8e6, Speedup: 2}}
		}
		return &Plan{Result: res, Relays: relaysOf("a", "b"), FromHere: []string{"a", "b"}}, nil
	}
	r := NewSingle(Config{Build: buildHops, Check: (&checker{up: map[string]bool{}}).check, CheckEvery: time.Hour, SlowDial: time.Hour, Log: log},
		time.Hour, plan)
	r.awaitEvery = 10 * time.Millisecond
	if err := r.Apply(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if got := r.Awaiting(); len(got) != 1 || len(r.Chain()) != 0 {
		t.Fatalf("awaiting %q, chain %v: want direct, awaiting", got, r.Chain())
	}
	runSingle(t, r)
	eventually(t, "the chain once measurements arrived", func() bool { return fmt.Sprint(r.Chain()) == "[a]" })
	if len(r.Awaiting()) != 0 {
		t.Fatalf("awaiting %q after the chain was planned", r.Awaiting())
	}
	if n := obs.FilterMessage("direct: waiting for measurements; planning again soon").Len(); n != 1 {
		t.Errorf("%d waiting lines, want 1 (logged when the wait starts)", n)
	}
	if n := obs.FilterMessage("plan").Len(); n != 1 {
		t.Errorf("%d plan lines, want 1 (the chain)", n)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("%d plans, want 3: no re-plan within the hour once the chain is planned", calls)
	}
}

// The wait for measurements doubles with each plan that still waits, up
// to the re-plan interval: a destination no relay ever reaches costs a
// survey per interval, not one every 5 s.
func TestAwaitBackoff(t *testing.T) {
	for n, want := range []time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second, 5: time.Minute, 9: time.Minute} {
		if want == 0 {
			continue
		}
		if got := awaitBackoff(5*time.Second, time.Minute, n); got != want {
			t.Errorf("wait after %d plans awaiting: %v, want %v", n, got, want)
		}
	}
}

// surveyedPlanner plans on a surveyed matrix (client -> a -> dst the
// fastest, b next): plans from the waitFrom-th (0-based) answer only when
// release is closed, as a survey does that waits out a vanished relay's
// timeouts.
type surveyedPlanner struct {
	waitFrom int
	calls    chan []string // the down list of every plan, as it starts
	release  chan struct{}

	mu sync.Mutex
	n  int
}

func newSurveyedPlanner(waitFrom int) *surveyedPlanner {
	return &surveyedPlanner{waitFrom: waitFrom, calls: make(chan []string, 10), release: make(chan struct{})}
}

func (p *surveyedPlanner) plan(ctx context.Context, down []string) (*Plan, error) {
	p.mu.Lock()
	n := p.n
	p.n++
	p.mu.Unlock()
	p.calls <- down
	if n >= p.waitFrom {
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m := &planner.Matrix{Nodes: []planner.Node{{Name: "client"}, {Name: "a", Relay: true}, {Name: "b", Relay: true}, {Name: "dst"}},
		Pairs: []planner.Pair{{A: "client", B: "dst", RTTMs: 100}, {A: "client", B: "a", RTTMs: 20}, {A: "a", B: "dst", RTTMs: 20},
			{A: "client", B: "b", RTTMs: 30}, {A: "b", B: "dst", RTTMs: 30}, {A: "a", B: "b", RTTMs: 60}}}
	req := planner.Request{Client: "client", Destination: "dst"}
	req.Constraints.Exclude = m.RelaysAmong(down)
	res, err := planner.Search(m, req)
	if err != nil {
		return nil, err
	}
	return &Plan{Result: res, Relays: relaysOf("a", "b"), FromHere: []string{"a", "b"}, Matrix: m, Request: req}, nil
}

// A relay of the current chain marked down is left out at once, on the last
// survey's figures, while the survey it starts is still running.
func TestSinglePlansAroundADownRelayBeforeTheNextSurvey(t *testing.T) {
	log, obs := logs()
	p := newSurveyedPlanner(1)
	r := NewSingle(Config{Build: buildHops, Check: (&checker{up: map[string]bool{}}).check, CheckEvery: time.Hour, Log: log},
		time.Hour, p.plan)
	if err := r.Apply(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	<-p.calls
	if got := routeOf(t, r, "x:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("first chain %v, want through a", got)
	}
	ctx := runSingle(t, r)

	ch, _ := r.Route(ctx, "x:80")
	r.Failed(ch, unreachable(ch, 1))
	// At once: the survey Failed asked for has not answered.
	if got := routeOf(t, r, "x:80"); fmt.Sprint(got) != "[b:7000]" {
		t.Fatalf("chain %v right after a went down, want through b", got)
	}
	if got := <-p.calls; fmt.Sprint(got) != "[a]" {
		t.Fatalf("the re-plan was told %v is down, want [a]", got)
	}
	if got := plans(obs); fmt.Sprint(got) != "[[a] [b]]" {
		t.Fatalf("plans logged %v", got)
	}
}

// A survey that read the fleet before a relay went down does not bring it
// back: the plan is searched again without it before it is installed.
func TestSingleApplyLeavesOutARelayDownSinceItsSurvey(t *testing.T) {
	p := newSurveyedPlanner(0)
	r := NewSingle(Config{Build: buildHops, Check: (&checker{up: map[string]bool{}}).check, CheckEvery: time.Hour}, time.Hour, p.plan)
	r.watch.SetFleet(relaysOf("a", "b"), []string{"a", "b"})
	applied := make(chan error, 1)
	go func() { applied <- r.Apply(context.Background(), false) }()
	if got := <-p.calls; len(got) != 0 {
		t.Fatalf("the plan was told %v is down, want none", got)
	}
	viaA, err := buildHops([]string{"relaymesh://a:7000"})
	if err != nil {
		t.Fatal(err)
	}
	r.Failed(viaA, unreachable(viaA, 1)) // a goes down while the survey runs
	close(p.release)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if got := routeOf(t, r, "x:80"); fmt.Sprint(got) != "[b:7000]" {
		t.Fatalf("chain %v after a went down during the survey, want through b", got)
	}
}
