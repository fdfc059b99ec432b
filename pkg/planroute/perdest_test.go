package planroute

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// fakeSurvey answers every destination with one line of nodes, RTTs their
// distance in ms: this relay (the survey's client node) at 0, the
// destination at 100, and relays r0 (this relay's own registry entry) at
// 50, a at 45 and b at 40. With windows unknown the most equal split wins:
// r0 if it were not this relay, else a, else b.
type fakeSurvey struct {
	mu  sync.Mutex
	n   int   // surveys run
	err error // returned instead of a result when set
}

func (s *fakeSurvey) run(_ context.Context, dst string) (*survey.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.err != nil {
		return nil, s.err
	}
	spots := []struct {
		name  string
		x     float64
		relay bool
	}{{survey.ClientNode, 0, false}, {dst, 100, false}, {"r0", 50, true}, {"a", 45, true}, {"b", 40, true}}
	m := &planner.Matrix{}
	for i, p := range spots {
		m.Nodes = append(m.Nodes, planner.Node{Name: p.name, Relay: p.relay})
		for _, q := range spots[i+1:] {
			m.Pairs = append(m.Pairs, planner.Pair{A: p.name, B: q.name, RTTMs: math.Abs(p.x - q.x)})
		}
	}
	return &survey.Result{Matrix: m, Relays: relaysOf("r0", "a", "b"), Target: survey.Target{Name: dst, Addr: dst}}, nil
}

func (s *fakeSurvey) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *fakeSurvey) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// static is the fallback chain of the tests.
var static = &chain.Chain{Hops: []chain.Hop{{Scheme: "socks5", Addr: "static:1080"}}}

func newPerDest(t *testing.T, sv *fakeSurvey, c *checker, edit func(*PerDestinationConfig)) (*PerDestination, func()) {
	t.Helper()
	log, _ := logs()
	cfg := PerDestinationConfig{
		Config:     Config{Build: buildHops, Check: c.check, CheckEvery: 2 * time.Millisecond, SlowDial: 2 * time.Second, Log: log},
		Survey:     sv.run,
		TTL:        time.Hour,
		SurveyWait: SurveyWait, // relayd's; the no-wait tests set 0
		MaxHops:    3,
		Self:       "r0",
		Fallback:   func() *chain.Chain { return static },
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := NewPerDestination(ctx, cfg)
	return r, func() { cancel(); r.Wait() }
}

// A tunnel that cannot reach a marks it down: the next tunnels are planned
// without it (on a new survey), and through it again once its checks pass
// 3 times in a row.
func TestPerDestinationMarksDownAndReadmits(t *testing.T) {
	sv, c := &fakeSurvey{}, &checker{up: map[string]bool{}}
	log, obs := logs()
	r, stop := newPerDest(t, sv, c, func(cfg *PerDestinationConfig) { cfg.Log = log })
	defer stop()

	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("chain %v, want through a (this relay's own entry r0 left out)", got)
	}
	ch, _ := r.Route(context.Background(), "srv:80")
	if sv.count() != 1 {
		t.Fatalf("%d surveys for one destination within its TTL", sv.count())
	}
	r.Failed(ch, unreachable(ch, 1))
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[b:7000]" {
		t.Fatalf("chain %v with a down, want through b", got)
	}
	eventually(t, "a resurvey after a went down", func() bool { routeOf(t, r, "srv:80"); return sv.count() >= 2 })
	eventually(t, "a checked 5 times", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.n >= 5 })
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[b:7000]" {
		t.Fatalf("chain %v while a's checks fail", got)
	}
	c.set("a", true)
	eventually(t, "a re-admitted", func() bool { return len(r.Down()) == 0 })
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("chain %v after a's re-admission", got)
	}
	// The re-admission makes the survey due just after Down() shows it;
	// the next tunnel starts the new survey.
	eventually(t, "a resurvey after a came back", func() bool { routeOf(t, r, "srv:80"); return sv.count() >= 3 })

	// Logged once per change: a, b (with a down), a again.
	if got, want := plans(obs), []string{"[a]", "[b]", "[a]"}; !slices.Equal(got, want) {
		t.Fatalf("plans logged %q, want %q", got, want)
	}
	e := obs.FilterMessage("plan").All()[1].ContextMap()
	if e["dst"] != "srv:80" || fmt.Sprint(e["down"]) != "[a]" {
		t.Fatalf("plan around a logged %v", e)
	}
}

// Each destination has its own survey and its own plan log.
func TestPerDestinationSurveysEachDestination(t *testing.T) {
	sv := &fakeSurvey{}
	log, obs := logs()
	r, stop := newPerDest(t, sv, &checker{}, func(cfg *PerDestinationConfig) { cfg.Log = log })
	defer stop()
	for _, dst := range []string{"x:80", "y:80", "x:80", "y:80"} {
		if got := routeOf(t, r, dst); fmt.Sprint(got) != "[a:7000]" {
			t.Fatalf("%s: chain %v", dst, got)
		}
	}
	if sv.count() != 2 || obs.FilterMessage("plan").Len() != 2 {
		t.Fatalf("%d surveys and %d plans logged for 2 destinations", sv.count(), obs.FilterMessage("plan").Len())
	}
}

// Without a plan a tunnel takes the fallback chain, and says why; a
// destination the policy refuses is not surveyed.
func TestPerDestinationFallsBack(t *testing.T) {
	sv := &fakeSurvey{}
	log, obs := logs()
	r, stop := newPerDest(t, sv, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.Log = log
		cfg.CheckHost = func(host string) error {
			if host == "10.0.0.1" {
				return errors.New("private address")
			}
			return nil
		}
	})
	defer stop()
	for _, dst := range []string{"10.0.0.1:80", "no-port"} {
		if ch, err := r.Route(context.Background(), dst); err != nil || ch != static {
			t.Fatalf("%s: Route = %v, %v; want the static chain", dst, ch, err)
		}
	}
	if sv.count() != 0 {
		t.Fatalf("%d surveys of destinations the relay does not dial", sv.count())
	}
	sv.setErr(errors.New("registry unreachable"))
	if ch, _ := r.Route(context.Background(), "srv:80"); ch != static {
		t.Fatalf("Route = %v after a failed survey; want the static chain", ch)
	}
	no := obs.FilterMessage("no plan; using the static chain").All()
	if len(no) != 3 || !strings.Contains(fmt.Sprint(no[2].ContextMap()["error"]), "registry unreachable") {
		t.Fatalf("fallbacks logged %v", no)
	}
}

// A survey that fails after a good one keeps the good one in use.
func TestPerDestinationKeepsTheLastGoodSurvey(t *testing.T) {
	sv := &fakeSurvey{}
	log, obs := logs()
	r, stop := newPerDest(t, sv, &checker{}, func(cfg *PerDestinationConfig) { cfg.Log = log })
	defer stop()
	routeOf(t, r, "srv:80")
	sv.setErr(errors.New("registry unreachable"))
	r.resurvey()
	routeOf(t, r, "srv:80") // starts the next survey; the last one serves
	eventually(t, "the next survey failing", func() bool { return obs.FilterMessage("survey failed; keeping the previous one").Len() == 1 })
	r.resurvey()
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("chain %v after a failed survey, want the last good one's", got)
	}
}

// The client's own segment is planned on: a client that is far away with
// a small window limits every chain to what direct does, and the fewest
// relays win.
func TestPerDestinationPlansTheClientSegment(t *testing.T) {
	r, stop := newPerDest(t, &fakeSurvey{}, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.ClientSegment = func(context.Context) (float64, int64, bool) { return 200, 1000, true }
	})
	defer stop()
	if got := routeOf(t, r, "srv:80"); len(got) != 0 {
		t.Fatalf("chain %v behind a slow client segment, want none after this relay", got)
	}
}

// A tunnel stalled on a chain: its relays are checked, and the first that
// fails is marked down.
func TestPerDestinationSlowChecksTheChain(t *testing.T) {
	c := &checker{up: map[string]bool{"a": false}}
	r, stop := newPerDest(t, &fakeSurvey{}, c, func(cfg *PerDestinationConfig) { cfg.CheckEvery = time.Hour })
	defer stop()
	ch, _ := r.Route(context.Background(), "srv:80") // the survey tells the watch where a is
	r.Slow(ch)
	eventually(t, "a marked down", func() bool { return fmt.Sprint(r.Down()) == "[a]" })
	r.Slow(&chain.Chain{}) // direct: nothing to check
}

// gatedSurvey is a fakeSurvey whose surveys each start by telling started
// their destination and then wait for a token on release (or for their
// context to end, told on cancelled).
type gatedSurvey struct {
	fakeSurvey
	started   chan string   // buffered: the destination of every survey begun
	release   chan struct{} // unbuffered: one token ends one survey
	cancelled chan string   // buffered: surveys whose context ended first

	mu          sync.Mutex
	inflight    int
	maxInflight int // the most surveys waiting at once
}

func newGated() *gatedSurvey {
	return &gatedSurvey{started: make(chan string, 100), release: make(chan struct{}), cancelled: make(chan string, 100)}
}

func (g *gatedSurvey) run(ctx context.Context, dst string) (*survey.Result, error) {
	g.mu.Lock()
	g.inflight++
	g.maxInflight = max(g.maxInflight, g.inflight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.mu.Unlock()
	}()
	g.started <- dst
	select {
	case <-g.release:
		return g.fakeSurvey.run(ctx, dst)
	case <-ctx.Done():
		g.cancelled <- dst
		return nil, ctx.Err()
	}
}

// next is the next value on ch, failing the test after 5 s.
func next(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("not within 5 s: %s", what)
		return ""
	}
}

// direct is the fallback of relayctl connect: no hops.
var direct = &chain.Chain{}

// Without a wait, a tunnel to a key with no survey takes the fallback at
// once (logged once per key, not per tunnel) and starts the key's one
// survey; once it is in, tunnels to every port of the key take the plan.
func TestPerDestinationNoWaitFallsBackThenPlans(t *testing.T) {
	g := newGated()
	log, obs := logs()
	r, stop := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.Log, cfg.Survey, cfg.SurveyWait = log, g.run, 0
		cfg.Fallback = func() *chain.Chain { return direct }
	})
	defer stop()
	for _, dst := range []string{"srv:80", "srv:443", "SRV.:80"} {
		if ch, err := r.Route(context.Background(), dst); err != nil || ch != direct {
			t.Fatalf("%s while surveying: Route = %v, %v; want the fallback at once", dst, ch, err)
		}
	}
	if dst := next(t, g.started, "the survey started"); dst != "srv:80" {
		t.Fatalf("surveyed %s, want the first tunnel's srv:80", dst)
	}
	routeOf(t, r, "203.0.113.7:80") // another key: its own survey and log
	next(t, g.started, "the second key's survey started")
	noPlan := obs.FilterMessage("no plan yet; direct while surveying").All()
	if len(noPlan) != 2 || noPlan[0].ContextMap()["key"] != "srv" || noPlan[1].ContextMap()["key"] != "203.0.113.0/24" {
		t.Fatalf("no-plan logs %v, want one for srv and one for 203.0.113.0/24", noPlan)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	eventually(t, "the plan once the survey is in", func() bool {
		ch, _ := r.Route(context.Background(), "srv:8080")
		return fmt.Sprint(hopsOf(ch)) == "[a:7000]"
	})
	// The two surveys finish in either order.
	eventually(t, "a neighbour in the /24 on the key's plan", func() bool {
		return fmt.Sprint(routeOf(t, r, "203.0.113.200:443")) == "[a:7000]"
	})
	if n := g.count(); n != 2 {
		t.Fatalf("%d surveys for 2 keys", n)
	}
	if n := obs.FilterMessage("no plan; using the static chain").Len(); n != 0 {
		t.Fatalf("%d per-tunnel fallback logs while surveying", n)
	}
}

// A due survey (TTL passed, or a relay went down or came back) runs in
// the background while the last plan serves, with and without a wait.
func TestPerDestinationServesTheLastPlanWhileResurveying(t *testing.T) {
	for _, wait := range []time.Duration{0, SurveyWait} {
		t.Run(fmt.Sprint(wait), func(t *testing.T) {
			g := newGated()
			r, stop := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
				cfg.Survey, cfg.SurveyWait = g.run, wait
			})
			defer stop()
			routed := make(chan struct{}) // the first tunnel may wait for its survey
			go func() {
				defer close(routed)
				r.Route(context.Background(), "srv:80")
			}()
			next(t, g.started, "the first survey")
			g.release <- struct{}{}
			<-routed
			eventually(t, "the first plan", func() bool { return fmt.Sprint(routeOf(t, r, "srv:80")) == "[a:7000]" })
			r.resurvey()
			// The gate stays shut until the tunnels below are routed: one
			// that waited for the new survey would time out to static.
			for range 3 {
				if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[a:7000]" {
					t.Fatalf("chain %v while re-surveying, want the last plan's", got)
				}
			}
			next(t, g.started, "the re-survey")
			g.release <- struct{}{}
			eventually(t, "the re-survey done", func() bool { return g.count() == 2 })
		})
	}
}

// relayd's configured wait: the first tunnel to a new key waits for the
// survey and takes its plan; one whose survey outlasts the wait takes the
// fallback and says why.
func TestPerDestinationWaitsForTheFirstSurvey(t *testing.T) {
	g := newGated()
	r, stop := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) { cfg.Survey = g.run })
	defer stop()
	got := make(chan string, 1)
	go func() {
		ch, _ := r.Route(context.Background(), "srv:80")
		got <- fmt.Sprint(hopsOf(ch))
	}()
	next(t, g.started, "the survey")
	g.release <- struct{}{} // only now can the tunnel have a plan
	if c := next(t, got, "the waiting tunnel routed"); c != "[a:7000]" {
		t.Fatalf("chain %v for a tunnel that waited, want the survey's plan", c)
	}

	log, obs := logs()
	r2, stop2 := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.Log, cfg.Survey, cfg.SurveyWait = log, g.run, time.Millisecond
	})
	defer stop2()
	if ch, _ := r2.Route(context.Background(), "srv:80"); ch != static {
		t.Fatalf("Route = %v with the survey held past the wait; want the static chain", ch)
	}
	next(t, g.started, "the held survey")
	if e := obs.FilterMessage("no plan; using the static chain").All(); len(e) != 1 ||
		!strings.Contains(fmt.Sprint(e[0].ContextMap()["error"]), "still running") {
		t.Fatalf("fallback logs %v, want one saying the survey is still running", e)
	}
	g.release <- struct{}{}
	eventually(t, "the plan after the held survey", func() bool { return fmt.Sprint(routeOf(t, r2, "srv:80")) == "[a:7000]" })
}

// At most MaxKeys keys are kept: a new one evicts the least recently used,
// cancelling its survey if one is running.
func TestPerDestinationEvictsTheLeastRecentlyUsed(t *testing.T) {
	sv := &fakeSurvey{}
	r, stop := newPerDest(t, sv, &checker{}, func(cfg *PerDestinationConfig) { cfg.MaxKeys = 2 })
	defer stop()
	for _, step := range []struct {
		dst     string
		surveys int
	}{
		{"x:80", 1}, {"y:80", 2}, {"x:443", 2}, // x used after y
		{"z:80", 3},              // evicts y
		{"x:80", 3}, {"z:80", 3}, // kept
		{"y:80", 4}, // surveyed again; evicts x
		{"z:80", 4}, {"x:80", 5},
	} {
		if got := routeOf(t, r, step.dst); fmt.Sprint(got) != "[a:7000]" {
			t.Fatalf("%s: chain %v", step.dst, got)
		}
		if sv.count() != step.surveys || r.Keys() > 2 {
			t.Fatalf("after %s: %d surveys, %d keys; want %d surveys, at most 2 keys", step.dst, sv.count(), r.Keys(), step.surveys)
		}
	}

	g := newGated()
	r2, stop2 := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.MaxKeys, cfg.Survey, cfg.SurveyWait = 1, g.run, 0
	})
	defer stop2()
	r2.Route(context.Background(), "x:80")
	next(t, g.started, "x's survey")
	r2.Route(context.Background(), "y:80") // evicts x
	if dst := next(t, g.cancelled, "x's survey cancelled"); dst != "x:80" {
		t.Fatalf("cancelled %s, want x:80", dst)
	}
	next(t, g.started, "y's survey")
	g.release <- struct{}{}
	eventually(t, "y's plan", func() bool { return fmt.Sprint(routeOf(t, r2, "y:80")) == "[a:7000]" })
}

// A tunnel waiting for the survey of a key that is evicted meanwhile takes
// the fallback once the survey is cancelled.
func TestPerDestinationEvictedWhileWaiting(t *testing.T) {
	g := newGated()
	r, stop := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.MaxKeys, cfg.Survey = 1, g.run
	})
	defer stop()
	route := func(dst string) <-chan string {
		got := make(chan string, 1)
		go func() {
			ch, _ := r.Route(context.Background(), dst)
			got <- fmt.Sprint(hopsOf(ch))
		}()
		return got
	}
	x := route("x:80")
	next(t, g.started, "x's survey")
	y := route("y:80") // evicts x, whose tunnel stops waiting
	next(t, g.cancelled, "x's survey cancelled")
	if c := next(t, x, "x's tunnel routed"); c != "[static:1080]" {
		t.Fatalf("x's tunnel took %v, want the fallback", c)
	}
	next(t, g.started, "y's survey")
	g.release <- struct{}{}
	if c := next(t, y, "y's tunnel routed"); c != "[a:7000]" {
		t.Fatalf("y's tunnel took %v, want its plan", c)
	}
}

// At most MaxSurveys run at once; the keys queued meanwhile take the
// fallback, and are surveyed as slots free.
func TestPerDestinationBoundsConcurrentSurveys(t *testing.T) {
	g := newGated()
	r, stop := newPerDest(t, &g.fakeSurvey, &checker{}, func(cfg *PerDestinationConfig) {
		cfg.MaxSurveys, cfg.Survey, cfg.SurveyWait = 2, g.run, 0
	})
	defer stop()
	dsts := []string{"a.example:80", "b.example:80", "c.example:80", "d.example:80", "e.example:80"}
	for _, dst := range dsts {
		if ch, _ := r.Route(context.Background(), dst); ch != static {
			t.Fatalf("%s: Route = %v while surveying, want the fallback", dst, ch)
		}
	}
	// Two start; each one released lets one queued start, until none is.
	surveyed := []string{next(t, g.started, "a survey started"), next(t, g.started, "a second survey started")}
	for range dsts[2:] {
		g.release <- struct{}{}
		surveyed = append(surveyed, next(t, g.started, "a queued survey started"))
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	eventually(t, "every survey done", func() bool { return g.count() == len(dsts) })
	slices.Sort(surveyed)
	if !slices.Equal(surveyed, dsts) {
		t.Fatalf("surveyed %v, want each of %v once", surveyed, dsts)
	}
	g.mu.Lock()
	most := g.maxInflight
	g.mu.Unlock()
	if most != 2 {
		t.Fatalf("%d surveys ran at once, want MaxSurveys 2", most)
	}
	// A fake survey counts itself done just before the router stores
	// its result.
	for _, dst := range dsts {
		eventually(t, dst+" planned after its survey", func() bool { return fmt.Sprint(routeOf(t, r, dst)) == "[a:7000]" })
	}
}

func TestDestinationKey(t *testing.T) {
	for _, c := range []struct{ dst, want string }{
		{"example.com:443", "example.com"},
		{"example.com:80", "example.com"},
		{"Example.COM.:80", "example.com"},
		{"www.example.com:80", "www.example.com"}, // names are not grouped
		{"203.0.113.7:80", "203.0.113.0/24"},
		{"203.0.113.250:443", "203.0.113.0/24"},
		{"203.0.114.7:80", "203.0.114.0/24"},
		{"[::ffff:203.0.113.9]:80", "203.0.113.0/24"},
		{"[2001:db8:1:2::1]:443", "2001:db8:1::/48"},
		{"[2001:db8:1:ffff::9]:80", "2001:db8:1::/48"},
		{"[2001:db8:2::1]:80", "2001:db8:2::/48"},
		{"[fe80::1%eth0]:80", "fe80::/48"},
		{"example.com", "example.com"}, // no port
	} {
		if got := DestinationKey(c.dst); got != c.want {
			t.Errorf("DestinationKey(%q) = %q, want %q", c.dst, got, c.want)
		}
	}
}

// A PerDestination's plans take its MaxStripes (relayctl connect's
// --max-stripes): 0 leaves the planner's default, 1 turns striping off.
func TestPerDestinationMaxStripes(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		r := &PerDestination{pc: PerDestinationConfig{MaxHops: 2, MaxStripes: n}}
		req := r.request(&planner.Matrix{}, "srv", nil)
		if req.Constraints.MaxStripes != n || req.Constraints.MaxHops != 3 {
			t.Errorf("MaxStripes %d: request's constraints %+v", n, req.Constraints)
		}
	}
}
