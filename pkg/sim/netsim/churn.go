package netsim

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// EventKind is what happens to a relay in a churn event.
type EventKind uint8

// The kinds of churn event.
const (
	Join  EventKind = iota + 1 // a down relay comes (back) up
	Leave                      // an alive relay leaves gracefully: it can say goodbye
	Fail                       // an alive relay vanishes without notice
)

// String is the kind's name.
func (k EventKind) String() string {
	switch k {
	case Join:
		return "join"
	case Leave:
		return "leave"
	case Fail:
		return "fail"
	}
	return "event?"
}

// Event is one relay changing state at a simulated time since the start.
type Event struct {
	At    time.Duration
	Relay int
	Kind  EventKind
}

// Events returns the churn schedule from time 0 up to and including
// until, sorted by time (then relay). It is fixed by the world's seed and
// config: each relay runs its own two-state process (Config's JoinPerHour,
// LeavePerHour, FailPerHour, InitialDownShare) from its own random stream.
// With no churn configured it is empty.
func (w *World) Events(until time.Duration) []Event {
	var evs []Event
	for i := range w.relays {
		w.churn(i, until, func(e Event) { evs = append(evs, e) })
	}
	slices.SortFunc(evs, func(x, y Event) int {
		return cmp.Or(cmp.Compare(x.At, y.At), cmp.Compare(x.Relay, y.Relay))
	})
	return evs
}

// Alive reports whether relay i is up at time t: the state after every
// event of Events at or before t. It replays the relay's own schedule, so
// it costs the number of that relay's events up to t.
func (w *World) Alive(i int, t time.Duration) bool {
	return w.churn(i, t, nil)
}

// churn runs relay i's process up to until, calling emit (if not nil) for
// each event, and returns whether the relay is alive at until.
func (w *World) churn(i int, until time.Duration, emit func(Event)) bool {
	cfg := &w.cfg
	rnd := rand.New(rand.NewPCG(mix(w.seed, tagChurn), uint64(i)))
	alive := rnd.Float64() >= cfg.InitialDownShare
	out := cfg.LeavePerHour + cfg.FailPerHour
	t := 0.0 // hours
	for {
		rate := cfg.JoinPerHour
		if alive {
			rate = out
		}
		if rate <= 0 {
			return alive
		}
		t += rnd.ExpFloat64() / rate
		kind := Join
		if alive {
			kind = Fail
			if rnd.Float64()*out < cfg.LeavePerHour {
				kind = Leave
			}
		}
		if t*float64(time.Hour) >= math.MaxInt64 {
			return alive
		}
		at := time.Duration(t * float64(time.Hour))
		if at > until {
			return alive
		}
		alive = !alive
		if emit != nil {
			emit(Event{At: at, Relay: i, Kind: kind})
		}
	}
}
