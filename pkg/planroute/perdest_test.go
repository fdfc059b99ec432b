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
	eventually(t, "a resurvey after a went down", func() bool { return sv.count() >= 2 })
	eventually(t, "a checked 5 times", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.n >= 5 })
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[b:7000]" {
		t.Fatalf("chain %v while a's checks fail", got)
	}
	c.set("a", true)
	eventually(t, "a re-admitted", func() bool { return len(r.Down()) == 0 })
	if got := routeOf(t, r, "srv:80"); fmt.Sprint(got) != "[a:7000]" {
		t.Fatalf("chain %v after a's re-admission", got)
	}
	eventually(t, "a resurvey after a came back", func() bool { return sv.count() >= 3 })

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
