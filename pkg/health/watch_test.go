package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// fakeFleet: relays a, b, c on relay listeners a:7000...; this host reaches
// a and c, not b (only a reaches b).
func fakeFleet() (map[string]registry.Relay, *chain.Chain) {
	relays := map[string]registry.Relay{}
	ch := &chain.Chain{}
	for _, n := range []string{"a", "b", "c"} {
		relays[n] = registry.Relay{Name: n, Relay: n + ":7000", Admin: n + ":9090"}
		ch.Hops = append(ch.Hops, chain.Hop{Scheme: "relaymesh", Addr: n + ":7000"})
	}
	return relays, ch
}

type checks struct {
	mu   sync.Mutex
	up   map[string]bool
	seen []string // "name via"
}

func (c *checks) check(_ context.Context, r registry.Relay, via *registry.Relay) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := ""
	if via != nil {
		v = via.Name
	}
	c.seen = append(c.seen, r.Name+" via "+v)
	if !c.up[r.Name] {
		return errors.New("no answer")
	}
	return nil
}

// bUnreachable is the error of a tunnel on fakeFleet's chain that a could
// not take to b: b is to blame.
func bUnreachable() error {
	return &chain.HopError{Hop: 2, Target: "b:7000", Kind: chain.KindTimeout, Err: errors.New("i/o timeout")}
}

// runWatch runs w until the test ends.
func runWatch(t *testing.T, w *Watch) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
}

// waitFor waits up to 5 s for ch, failing with what otherwise.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

func TestWatchBlamesAndReadmits(t *testing.T) {
	relays, ch := fakeFleet()
	c := &checks{up: map[string]bool{"a": true, "c": true}}
	changes := make(chan struct{}, 10)
	w := &Watch{Every: 10 * time.Millisecond, Check: c.check, OnChange: func() { changes <- struct{}{} }}
	w.SetFleet(relays, []string{"a", "c"})

	// The destination refusing, at the last relay: not the chain's fault.
	if w.Failed(ch, &chain.HopError{Hop: 3, Target: "dst:80", Kind: chain.KindRefused}) {
		t.Fatal("the destination's refusal counted as a broken chain")
	}
	// a could not reach b: b is down, and the chain is broken.
	if !w.Failed(ch, bUnreachable()) {
		t.Fatal("an unreachable relay did not break the chain")
	}
	if got := w.DownNames(); fmt.Sprint(got) != "[b]" {
		t.Fatalf("down %v, want [b]", got)
	}
	<-changes

	// b is checked through a (this host does not reach b); it stays down
	// while it fails, and comes back after 3 passes in a row.
	runWatch(t, w)
	time.Sleep(50 * time.Millisecond)
	if !w.IsDown("b") {
		t.Fatal("b re-admitted while its checks fail")
	}
	c.mu.Lock()
	if len(c.seen) == 0 || c.seen[0] != "b via a" {
		t.Fatalf("checks %v, want b checked via a", c.seen)
	}
	c.up["b"] = true
	c.mu.Unlock()
	waitFor(t, changes, "b not re-admitted after its checks pass")
	if w.IsDown("b") {
		t.Fatal("OnChange without re-admission")
	}
}

func TestWatchSlowMarksFirstFailing(t *testing.T) {
	relays, ch := fakeFleet()
	c := &checks{up: map[string]bool{"a": true, "b": false, "c": false}}
	w := &Watch{Every: time.Hour, Check: c.check}
	w.SetFleet(relays, []string{"a", "c"})
	w.Slow(ch, 2*time.Second)
	// a passes, b fails (checked through a), c is not checked: it cannot
	// be told apart from b.
	if got := w.DownNames(); fmt.Sprint(got) != "[b]" {
		t.Fatalf("down %v, want [b]", got)
	}
	if fmt.Sprint(c.seen) != "[a via  b via a]" {
		t.Fatalf("checks %q", c.seen)
	}
}

// TestWatchChecksStayEveryApart: a check that waits out its timeout (a
// vanished host) must not let the next checks follow at once. Here the
// first check of b takes 2.5 x Every and b is back when it returns: the
// passing checks after it, which re-admit b, must each start at least
// Every after the one before ended, so Rise passes span (Rise-1) x Every.
func TestWatchChecksStayEveryApart(t *testing.T) {
	const every = 100 * time.Millisecond
	relays, ch := fakeFleet()
	var mu sync.Mutex
	var starts, ends []time.Time
	slowOnce := true
	check := func(_ context.Context, r registry.Relay, _ *registry.Relay) error {
		mu.Lock()
		slow := slowOnce
		slowOnce = false
		starts = append(starts, time.Now())
		mu.Unlock()
		if slow {
			time.Sleep(every * 5 / 2)
		}
		mu.Lock()
		ends = append(ends, time.Now())
		mu.Unlock()
		if slow {
			return errors.New("timeout")
		}
		return nil
	}
	readmitted := make(chan struct{}, 10)
	w := &Watch{Every: every, Check: check, OnChange: func() { readmitted <- struct{}{} }}
	w.SetFleet(relays, []string{"a", "b", "c"})
	w.Failed(ch, bUnreachable())
	<-readmitted // marked down

	runWatch(t, w)
	waitFor(t, readmitted, "b not re-admitted")
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1+DefaultRise {
		t.Fatalf("%d checks, want 1 failing and %d passing", len(starts), DefaultRise)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(ends[i-1]); gap < every {
			t.Errorf("check %d started %v after check %d ended, want >= %v", i+1, gap, i, every)
		}
	}
}

// A survey made while a relay was down may not list it (its registry
// dropped it): the watch keeps checking it at its last known address, and
// re-admits it once it passes, without mutating the caller's map.
func TestWatchKeepsCheckingADownRelayTheSurveyLeftOut(t *testing.T) {
	relays, ch := fakeFleet()
	c := &checks{up: map[string]bool{"a": true, "c": true}}
	changes := make(chan struct{}, 10)
	w := &Watch{Every: 5 * time.Millisecond, Check: c.check, OnChange: func() { changes <- struct{}{} }}
	w.SetFleet(relays, []string{"a", "c"})
	w.Failed(ch, bUnreachable())
	<-changes // b marked down

	without := map[string]registry.Relay{"a": relays["a"], "c": relays["c"]}
	w.SetFleet(without, []string{"a", "c"})
	if _, ok := without["b"]; ok {
		t.Fatal("SetFleet wrote into the caller's map")
	}
	c.mu.Lock()
	c.up["b"] = true
	c.mu.Unlock()
	runWatch(t, w)
	waitFor(t, changes, "b, left out of the survey while down, was not re-admitted once its checks pass")
	// Once up, a survey without it drops it.
	w.SetFleet(without, []string{"a", "c"})
	w.mu.Lock()
	_, kept := w.relays["b"]
	w.mu.Unlock()
	if kept {
		t.Fatal("a relay in use and not in the survey was kept")
	}
}
