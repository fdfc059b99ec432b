// Package health keeps the relays a client has stopped using, and decides
// when they may be used again.
//
// A relay is marked down by a passive failure: a tunnel failed at it, or a
// tunnel through it stalled and a probe of it failed. It stays down, left
// out of every plan, until Rise probes in a row pass: one lucky answer from
// a flapping host (a reboot loop, a link that drops most packets) does not
// bring it back, and a relay that fails a probe starts counting again.
package health

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// DefaultRise is the passing probes in a row that re-admit a relay.
const DefaultRise = 3

// Tracker is safe for concurrent use. The zero value uses DefaultRise.
type Tracker struct {
	Rise int

	mu   sync.Mutex
	down map[string]*state
}

type state struct {
	since  time.Time
	reason string
	passes int // consecutive passing probes since the last failure
}

// Down is one relay out of use.
type Down struct {
	Name   string
	Since  time.Time
	Reason string
	Passes int // passing probes in a row so far
}

func (t *Tracker) rise() int {
	if t.Rise > 0 {
		return t.Rise
	}
	return DefaultRise
}

// MarkDown takes name out of use (again: its count of passing probes
// restarts). It reports whether name was in use until now.
func (t *Tracker) MarkDown(name, reason string, now time.Time) (wasUp bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down == nil {
		t.down = map[string]*state{}
	}
	if s, ok := t.down[name]; ok {
		s.passes = 0
		return false
	}
	t.down[name] = &state{since: now, reason: reason}
	return true
}

// Probed records one probe of a relay that is down. A failed probe restarts
// the count; the Rise-th passing probe in a row re-admits the relay, and
// Probed then reports true. Probes of relays in use are ignored.
func (t *Tracker) Probed(name string, ok bool) (readmitted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, isDown := t.down[name]
	if !isDown {
		return false
	}
	if !ok {
		s.passes = 0
		return false
	}
	s.passes++
	if s.passes < t.rise() {
		return false
	}
	delete(t.down, name)
	return true
}

// IsDown reports whether name is out of use.
func (t *Tracker) IsDown(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.down[name]
	return ok
}

// Down lists the relays out of use, by name.
func (t *Tracker) Down() []Down {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Down, 0, len(t.down))
	for name, s := range t.down {
		out = append(out, Down{Name: name, Since: s.since, Reason: s.reason, Passes: s.passes})
	}
	slices.SortFunc(out, func(a, b Down) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
