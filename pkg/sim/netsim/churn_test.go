package netsim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestNoChurnByDefault(t *testing.T) {
	w := newTestWorld(t, Config{Relays: 100}, 1)
	if evs := w.Events(1000 * time.Hour); len(evs) != 0 {
		t.Errorf("%d churn events with no churn configured", len(evs))
	}
	for i := range w.NumRelays() {
		if !w.Alive(i, 0) || !w.Alive(i, 1000*time.Hour) {
			t.Fatalf("relay %d down with no churn configured", i)
		}
	}
}

func TestChurnDeterministic(t *testing.T) {
	cfg := Config{Relays: 200, LeavePerHour: 0.1, FailPerHour: 0.1, JoinPerHour: 1}
	e1 := newTestWorld(t, cfg, 7).Events(100 * time.Hour)
	e2 := newTestWorld(t, cfg, 7).Events(100 * time.Hour)
	if len(e1) == 0 || !slices.Equal(e1, e2) {
		t.Fatalf("churn schedules of one seed: %d and %d events, or different", len(e1), len(e2))
	}
	if e3 := newTestWorld(t, cfg, 8).Events(100 * time.Hour); slices.Equal(e1, e3) {
		t.Error("seeds 7 and 8 give one churn schedule")
	}
}

func TestChurnRates(t *testing.T) {
	cfg := Config{Relays: 2000, JoinPerHour: 0.5, LeavePerHour: 0.02, FailPerHour: 0.01, InitialDownShare: 0.1}
	w := newTestWorld(t, cfg, 4)
	const hours = 100
	until := hours * time.Hour
	evs := w.Events(until)
	if !slices.IsSortedFunc(evs, func(a, b Event) int {
		if a.At != b.At {
			return int(a.At - b.At)
		}
		return a.Relay - b.Relay
	}) {
		t.Fatal("events not sorted by time")
	}

	// Replay the schedule: count each kind and the time spent up and down,
	// and check every event is possible in the state it happens in.
	alive := make([]bool, w.NumRelays())
	since := make([]time.Duration, w.NumRelays())
	down0 := 0
	for i := range alive {
		alive[i] = w.Alive(i, 0)
		if !alive[i] {
			down0++
		}
	}
	var upH, downH float64
	count := map[EventKind]int{}
	for _, e := range evs {
		if e.At < 0 || e.At > until {
			t.Fatalf("event %+v outside [0, %v]", e, until)
		}
		if (e.Kind == Join) == alive[e.Relay] {
			t.Fatalf("event %+v with relay alive=%v", e, alive[e.Relay])
		}
		if alive[e.Relay] {
			upH += (e.At - since[e.Relay]).Hours()
		} else {
			downH += (e.At - since[e.Relay]).Hours()
		}
		alive[e.Relay], since[e.Relay] = !alive[e.Relay], e.At
		count[e.Kind]++
	}
	for i := range alive {
		if alive[i] {
			upH += (until - since[i]).Hours()
		} else {
			downH += (until - since[i]).Hours()
		}
		if alive[i] != w.Alive(i, until) {
			t.Fatalf("relay %d: replay says alive=%v at the end, Alive says %v", i, alive[i], w.Alive(i, until))
		}
	}

	// Each kind's count is a Poisson count with mean rate × exposure.
	within := func(name string, got int, want float64) {
		t.Logf("%s: %d events, expected %.0f", name, got, want)
		if math.Abs(float64(got)-want) > 5*math.Sqrt(want) {
			t.Errorf("%s: %d events, want %.0f ± %.0f", name, got, want, 5*math.Sqrt(want))
		}
	}
	within("join", count[Join], cfg.JoinPerHour*downH)
	within("leave", count[Leave], cfg.LeavePerHour*upH)
	within("fail", count[Fail], cfg.FailPerHour*upH)
	n := float64(w.NumRelays())
	sd := math.Sqrt(n * cfg.InitialDownShare * (1 - cfg.InitialDownShare))
	t.Logf("down at start: %d of %.0f; up %.0f relay-hours, down %.0f", down0, n, upH, downH)
	if math.Abs(float64(down0)-n*cfg.InitialDownShare) > 5*sd {
		t.Errorf("%d relays down at start, want %.0f ± %.0f", down0, n*cfg.InitialDownShare, 5*sd)
	}
	// In the steady state a relay is up join/(join+leave+fail) of the time.
	up := 0
	for i := range w.NumRelays() {
		if w.Alive(i, until) {
			up++
		}
	}
	steady := cfg.JoinPerHour / (cfg.JoinPerHour + cfg.LeavePerHour + cfg.FailPerHour)
	if s := float64(up) / n; math.Abs(s-steady) > 0.03 {
		t.Errorf("%.3f of relays up after %d h, steady state %.3f", s, hours, steady)
	}

	// Alive agrees with the schedule at arbitrary times, including the
	// instants of events.
	rnd := rand.New(rand.NewPCG(4, 4))
	for range 200 {
		e := evs[rnd.IntN(len(evs))]
		if got := w.Alive(e.Relay, e.At); got != (e.Kind == Join) {
			t.Fatalf("Alive(%d, %v) = %v right at its %v", e.Relay, e.At, got, e.Kind)
		}
		if e.At > 0 {
			if got := w.Alive(e.Relay, e.At-1); got == (e.Kind == Join) {
				t.Fatalf("Alive(%d, %v) = %v just before its %v", e.Relay, e.At-1, got, e.Kind)
			}
		}
	}
	// A shorter horizon is a prefix of the longer schedule.
	short := w.Events(until / 2)
	if len(short) == 0 || !slices.Equal(short, evs[:len(short)]) {
		t.Error("Events(until/2) is not a prefix of Events(until)")
	}
}
