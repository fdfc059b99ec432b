package wanemu

import (
	"strings"
	"testing"
	"time"
)

// TestEffectIsRelativeToTheRTT: the same lateness is accepted on a long
// link and refused on a short one, and a stall is weighed against the
// budget's window.
func TestEffectIsRelativeToTheRTT(t *testing.T) {
	b := Budget{ToleranceShare: 0.15, WindowNs: int64(time.Second)}
	// The tail that failed a valid sweep run: p99 0.675 ms, mean 50 us.
	st := Stats{LatenessMeanNs: 50_000, LatenessP99Ns: 675_000, LatenessMaxNs: 3_000_000}
	for _, tc := range []struct {
		rttMs float64
		ok    bool
	}{{50, true}, {25, true}, {12.5, true}, {2, false}} {
		e := EffectOf(st, st, int64(tc.rttMs*1e6), b)
		if err := e.Check(b); (err == nil) != tc.ok {
			t.Errorf("RTT %g ms: %v (effect %s), want ok=%v", tc.rttMs, err, e, tc.ok)
		}
	}
	// The mean decides a rate: 2 x 1.5 ms on a 50 ms link is 6 % > 5 %.
	slow := Stats{LatenessMeanNs: 1_500_000, LatenessP99Ns: 2_000_000, LatenessMaxNs: 3_000_000}
	if err := EffectOf(slow, slow, 50e6, b).Check(b); err == nil || !strings.Contains(err.Error(), "mean extra delay") {
		t.Errorf("mean 1.5 ms each way on 50 ms: %v, want a mean extra delay error", err)
	}
	// A 40 ms stall: 4 % of a 1 s window passes, 8 % of 500 ms does not.
	stall := Stats{LatenessMaxNs: 40_000_000}
	if err := EffectOf(stall, Stats{}, 50e6, b).Check(b); err != nil {
		t.Errorf("40 ms stall in a 1 s window: %v", err)
	}
	half := Budget{ToleranceShare: 0.15, WindowNs: int64(500 * time.Millisecond)}
	if err := EffectOf(stall, Stats{}, 50e6, half).Check(half); err == nil || !strings.Contains(err.Error(), "stall") {
		t.Errorf("40 ms stall in a 500 ms window: %v, want a stall error", err)
	}
	// A tighter tolerance tightens every bound.
	tight := Budget{ToleranceShare: 0.03, WindowNs: int64(time.Second)}
	if err := EffectOf(st, st, 12.5e6, tight).Check(tight); err == nil {
		t.Error("p99 0.675 ms on 12.5 ms passes a 3 % tolerance")
	}
}

// TestEffectFloorsTheRTT: a zero-delay link is weighed as a 1 ms one, not
// divided by zero.
func TestEffectFloorsTheRTT(t *testing.T) {
	e := EffectOf(Stats{LatenessMeanNs: 10_000}, Stats{}, 0, DefaultBudget)
	if e.MeanShare != 0.01 {
		t.Fatalf("mean share %g on a 0 ms link, want 0.01 (of a 1 ms floor)", e.MeanShare)
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, b := range []Budget{{0, 1e9}, {1.5, 1e9}, {0.15, 0}} {
		if b.Validate() == nil {
			t.Errorf("%+v validated", b)
		}
	}
	if err := DefaultBudget.Validate(); err != nil {
		t.Error(err)
	}
}

func TestParseInjection(t *testing.T) {
	in, err := ParseInjection("uniform=300us, tail=1.5%:2ms,stall=50ms/5s")
	if err != nil {
		t.Fatal(err)
	}
	want := Injection{UniformNs: 300_000, TailShare: 0.015, TailNs: 2e6, StallNs: 50e6, StallEveryNs: 5e9}
	if in != want {
		t.Fatalf("got %+v, want %+v", in, want)
	}
	if back, err := ParseInjection(in.String()); err != nil || back != in {
		t.Fatalf("round trip %q: %+v, %v", in.String(), back, err)
	}
	if in, err := ParseInjection(""); err != nil || !in.Zero() {
		t.Fatalf("empty: %+v, %v", in, err)
	}
	for _, bad := range []string{"uniform", "tail=1:2ms", "tail=200%:1ms", "stall=5s/1s", "jitter=1ms", "uniform=-1ms"} {
		if _, err := ParseInjection(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestInjectedStallHoldsUntilItsEnd: a packet due inside a stall leaves
// when the stall ends, one due outside it is not delayed.
func TestInjectedStallHoldsUntilItsEnd(t *testing.T) {
	in := Injection{StallNs: 50e6, StallEveryNs: 1e9}
	if got := in.extraNs(3e9 + 10e6); got != 40e6 {
		t.Errorf("due 10 ms into a stall: extra %d ns, want 40 ms", got)
	}
	if got := in.extraNs(3e9 + 60e6); got != 0 {
		t.Errorf("due after the stall: extra %d ns, want 0", got)
	}
}

// TestInjectedDelayIsCountedAsLateness: the rate queue writes an injected
// packet later but keeps the emulated due time, from which lateness is
// counted, and a packet behind it waits (order kept) and is late too.
func TestInjectedDelayIsCountedAsLateness(t *testing.T) {
	q := rateQueue{inject: Injection{TailShare: 1, TailNs: 5e6}}
	p := &Params{DelayNs: 10e6, RateBps: 1e9}
	var tl tally
	d1, ok := q.admit(p, 0, 1500, due{}, &tl)
	if !ok || d1.linkNs != 10e6+12_000 || d1.atNs != d1.linkNs+5e6 {
		t.Fatalf("first packet due %+v", d1)
	}
	q.inject = Injection{}
	d2, _ := q.admit(p, 1000, 1500, d1, &tl)
	if d2.atNs != d1.atNs || d2.linkNs != 10e6+24_000 {
		t.Fatalf("packet behind the injected one: %+v, want written with it at %d, due on the link at 10.024 ms", d2, d1.atNs)
	}
}
