package health

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// CheckTimeout bounds one check of a relay.
const CheckTimeout = 2 * time.Second

// Watch applies the Tracker to the tunnels of a planner (relayctl connect,
// a relay routing by plan): it reads their failures and stalls, marks the
// relay to blame down, checks the relays that are down every Every, and
// calls OnChange when one goes down or comes back, so the owner plans
// again. Set the exported fields, then SetFleet after every survey.
type Watch struct {
	Tracker
	Every time.Duration // between two checks of a relay that is down
	// Check asks whether a relay's relayd answers: directly (via nil), or
	// through via, a relay this host reaches (survey.Survey.CheckRelay).
	Check    func(ctx context.Context, r registry.Relay, via *registry.Relay) error
	OnChange func()
	Log      *zap.Logger

	mu       sync.Mutex
	relays   map[string]registry.Relay // by name, as the last survey found them
	fromHere map[string]bool           // relays the last survey reached from this host
	before   map[string]string         // down relay -> the relay before it in the chain it failed on
}

// SetFleet records the relays of the last survey, and which of them this
// host reached itself. A relay that is down keeps its last known entry
// when the survey left it out (a registry that dropped it while it was
// gone): its checks need its address, or it could never pass them.
func (w *Watch) SetFleet(relays map[string]registry.Relay, fromHere []string) {
	set := make(map[string]bool, len(fromHere))
	for _, name := range fromHere {
		set[name] = true
	}
	down := w.Down()
	w.mu.Lock()
	defer w.mu.Unlock()
	kept, cloned := relays, false
	for _, d := range down {
		old, known := w.relays[d.Name]
		if _, listed := relays[d.Name]; listed || !known {
			continue
		}
		if !cloned {
			kept, cloned = make(map[string]registry.Relay, len(relays)+1), true
			maps.Copy(kept, relays) // relays is the caller's
		}
		kept[d.Name] = old
	}
	w.relays, w.fromHere = kept, set
}

// DownNames lists the relays out of use, to leave out of plans.
func (w *Watch) DownNames() []string {
	var names []string
	for _, d := range w.Down() {
		names = append(names, d.Name)
	}
	return names
}

// Failed reads a tunnel that failed on ch (relay.FailureObserver). It
// reports whether the chain is broken: a relay could not be reached, or
// could not reach the next one (the last relay failing to reach the
// destination is the destination's answer). A relay that could not be
// reached is marked down.
func (w *Watch) Failed(ch *chain.Chain, err error) (broken bool) {
	var he *chain.HopError
	if !errors.As(err, &he) || he.Hop < 1 || he.Hop > len(ch.Hops) {
		return false // direct, or no hop to blame
	}
	relayDown := he.Target == ch.Hops[he.Hop-1].Addr
	if he.Hop == len(ch.Hops) && !relayDown {
		return false
	}
	if relayDown {
		w.markDown(ch, he.Hop-1, he.Error())
	}
	return true
}

// Slow reads a tunnel on ch still not up after relay.SlowDial
// (relay.SlowObserver): a relay that vanished answers nothing at all. The
// chain's relays are checked in order (directly, or through the relay
// before them), and the first that fails is marked down: those after it
// cannot be told apart from it. It returns when the checks are done.
func (w *Watch) Slow(ch *chain.Chain, stalled time.Duration) {
	for i, h := range ch.Hops {
		rel, ok := w.relayAt(h.Addr)
		if !ok || w.IsDown(rel.Name) {
			continue
		}
		w.mu.Lock()
		via := w.viaForLocked(ch, i)
		w.mu.Unlock()
		if err := w.check(rel.Name, via); err != nil {
			w.markDown(ch, i, fmt.Sprintf("a tunnel stalled %v, then a check of the relay failed: %v", stalled, err))
			return
		}
	}
}

// markDown takes hop i of ch out of plans, remembering the relay before it
// to check it through when this host does not reach it.
func (w *Watch) markDown(ch *chain.Chain, i int, reason string) {
	rel, ok := w.relayAt(ch.Hops[i].Addr)
	if !ok {
		return
	}
	w.mu.Lock()
	if v := w.viaForLocked(ch, i); v != "" {
		if w.before == nil {
			w.before = map[string]string{}
		}
		w.before[rel.Name] = v
	}
	w.mu.Unlock()
	if w.MarkDown(rel.Name, reason, time.Now()) {
		w.log().Warn("relay marked down: left out of plans until it passes its checks", zap.String("relay", rel.Name),
			zap.String("reason", reason), zap.Int("checks_to_pass", w.rise()), zap.Duration("check_every", w.Every))
		w.changed()
	}
}

// Run checks every relay that is down, every Every, until ctx ends. The
// wait starts when a round of checks ends, so two checks of a relay are
// at least Every apart however long one took: a check that waits out its
// timeout (a vanished host) must not leave a tick behind that lets the
// next checks follow at once, or a relay back for a moment would pass
// its Rise checks in a fraction of the time they are meant to span.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTimer(w.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.checkDown()
		t.Reset(w.Every)
	}
}

// checkDown checks every relay that is down once, in turn.
func (w *Watch) checkDown() {
	for _, d := range w.Down() {
		w.mu.Lock()
		via := w.before[d.Name]
		if w.fromHere[d.Name] {
			via = ""
		} else if !w.fromHere[via] {
			via = w.anyFromHereLocked(d.Name)
		}
		w.mu.Unlock()
		err := w.check(d.Name, via)
		if w.Probed(d.Name, err == nil) {
			w.log().Info("relay re-admitted: it passed its checks", zap.String("relay", d.Name),
				zap.Int("checks_passed", w.rise()), zap.Duration("down_for", time.Since(d.Since).Round(time.Millisecond)))
			w.changed()
		}
	}
}

// check checks the relay called name (through via when via is not "")
// within CheckTimeout.
func (w *Watch) check(name, via string) error {
	ctx, cancel := context.WithTimeout(context.Background(), CheckTimeout)
	defer cancel()
	w.mu.Lock()
	rel, ok := w.relays[name]
	v, vok := w.relays[via]
	w.mu.Unlock()
	if !ok {
		return fmt.Errorf("relay %s is not in the registry", name)
	}
	if !vok {
		return w.Check(ctx, rel, nil)
	}
	return w.Check(ctx, rel, &v)
}

func (w *Watch) changed() {
	if w.OnChange != nil {
		w.OnChange()
	}
}

func (w *Watch) log() *zap.Logger {
	if w.Log == nil {
		return zap.NewNop()
	}
	return w.Log
}

// relayAt finds the relay whose relay listener is addr.
func (w *Watch) relayAt(addr string) (registry.Relay, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.relayAtLocked(addr)
}

func (w *Watch) relayAtLocked(addr string) (registry.Relay, bool) {
	for _, rel := range w.relays {
		if rel.Relay == addr {
			return rel, true
		}
	}
	return registry.Relay{}, false
}

// viaForLocked names the relay to check hop i of ch through: "" when this
// host reaches it, else the hop before it if this host reaches that one,
// else any relay this host reaches.
func (w *Watch) viaForLocked(ch *chain.Chain, i int) string {
	rel, ok := w.relayAtLocked(ch.Hops[i].Addr)
	if !ok || w.fromHere[rel.Name] {
		return ""
	}
	if i > 0 {
		if prev, ok := w.relayAtLocked(ch.Hops[i-1].Addr); ok && w.fromHere[prev.Name] {
			return prev.Name
		}
	}
	return w.anyFromHereLocked(rel.Name)
}

func (w *Watch) anyFromHereLocked(except string) string {
	var names []string
	for name, ok := range w.fromHere {
		if ok && name != except {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
