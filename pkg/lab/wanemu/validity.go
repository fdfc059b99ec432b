package wanemu

import (
	"errors"
	"fmt"
	"time"
)

// The self-check by effect. Stats.Check is absolute (0.5 ms, 20 ms): right
// for lab doctor and for the engine's own tests, but a run is there to
// measure something, and what matters is whether the emulator's timing
// error can move that figure by a share its tolerance cannot absorb. A
// tail of packets 0.7 ms late is nothing on a 50 ms path and a lot on a
// 2 ms one; a 50 ms stall is nothing in a minute's download and a lot in a
// half-second one.
//
// A Budget says what the run measures; EffectOf turns a link's lateness
// into shares of what it distorts; LinkEffect.Check holds them to the
// budget. The sensitivities below (how far a figure moves per unit of
// share) were measured by injecting known error (Injection) into a valid
// lab: docs/lab.md has the table and the command.

// Budget is what a run's figures can absorb.
type Budget struct {
	// ToleranceShare is the relative tolerance of the figures the run
	// measures (0.15: a rate or time checked within 15 %).
	ToleranceShare float64 `json:"tolerance_share"`
	// WindowNs is the shortest span one figure is averaged over (a steady
	// rate over half a download): a stall is weighed against it.
	WindowNs int64 `json:"window_ns"`
}

// DefaultBudget is a figure checked within 15 % over at least a second.
var DefaultBudget = Budget{ToleranceShare: 0.15, WindowNs: int64(time.Second)}

// ErrorShare is the most the emulator's error may move a figure: a third
// of the tolerance, so that the rest is left to what is being measured.
func (b Budget) ErrorShare() float64 { return b.ToleranceShare / 3 }

// Validate refuses a budget that checks nothing or everything.
func (b Budget) Validate() error {
	if !(b.ToleranceShare > 0 && b.ToleranceShare <= 1) {
		return fmt.Errorf("tolerance %g %%: want more than 0 and at most 100 %%", b.ToleranceShare*100)
	}
	if b.WindowNs < int64(time.Millisecond) {
		return fmt.Errorf("window %v: want at least 1ms", time.Duration(b.WindowNs))
	}
	return nil
}

func (b Budget) String() string {
	return fmt.Sprintf("tolerance %.0f %%, figures over at least %v: the emulator may move a figure by %.1f %%",
		100*b.ToleranceShare, time.Duration(b.WindowNs), 100*b.ErrorShare())
}

// Sensitivities: how far a measured figure (a window-limited rate, a
// handshake's time) moves per unit of each share: the largest measured
// over the calibration's figures, rounded up (docs/lab.md, "What the
// emulator's error does to a figure", bench/results/lab-sensitivity).
const (
	// A mean extra delay slows a window-limited flow, whose rate is
	// window / (RTT + extra), and lengthens every handshake; measured up to
	// 1.7 times its share, not 1: extra delay that varies also bunches
	// the packets.
	meanSensitivity = 1.7
	// A p99 tail moves a rate only through the mean (counted above); what
	// it can move alone is a figure of a few packets (a handshake, a
	// probe), and only when one of them is in the tail. Measured: at most
	// 0.015 of its share beyond what the mean explains; 0.05 leaves room
	// for figures of fewer samples than the calibration's.
	tailSensitivity = 0.05
	// A stall of a share of the window takes about that share of the
	// window's progress (measured up to 1.03).
	stallSensitivity = 1.1
)

// minRTTNs floors the RTT that shares are taken of: on a link of a few
// hundred microseconds every wake-up would be a large share, yet a figure
// measured across it spans other links' RTTs too.
const minRTTNs = int64(time.Millisecond)

// LinkEffect is what one link's timing error can do to a figure measured
// across it.
type LinkEffect struct {
	RTTNs int64 `json:"rtt_ns"`
	// MeanShare: both directions' mean lateness added, over the RTT.
	MeanShare float64 `json:"mean_share"`
	// TailShare: the worse direction's p99 lateness over the RTT.
	TailShare float64 `json:"tail_share"`
	// StallShare: the longest single lateness over the budget's window.
	StallShare float64 `json:"stall_share"`
	// Moves is the estimated move of a figure: the largest of the shares,
	// each times its sensitivity.
	Moves float64 `json:"moves"`
}

// EffectOf weighs a link's two directions (ab, ba) against its RTT and b.
func EffectOf(ab, ba Stats, rttNs int64, b Budget) LinkEffect {
	rtt := float64(max(rttNs, minRTTNs))
	e := LinkEffect{
		RTTNs:      rttNs,
		MeanShare:  float64(ab.LatenessMeanNs+ba.LatenessMeanNs) / rtt,
		TailShare:  float64(max(ab.LatenessP99Ns, ba.LatenessP99Ns)) / rtt,
		StallShare: float64(max(ab.LatenessMaxNs, ba.LatenessMaxNs)) / float64(max(b.WindowNs, 1)),
	}
	e.Moves = max(meanSensitivity*e.MeanShare, tailSensitivity*e.TailShare, stallSensitivity*e.StallShare)
	return e
}

// Check says why e moves a figure by more than b allows, or nil.
func (e LinkEffect) Check(b Budget) error {
	limit := b.ErrorShare()
	var errs []error
	if m := meanSensitivity * e.MeanShare; m > limit {
		errs = append(errs, fmt.Errorf("mean extra delay %.2f %% of the %.1f ms RTT moves a rate by about %.1f %% > %.1f %%",
			100*e.MeanShare, float64(e.RTTNs)/1e6, 100*m, 100*limit))
	}
	if m := tailSensitivity * e.TailShare; m > limit {
		errs = append(errs, fmt.Errorf("p99 lateness %.1f %% of the %.1f ms RTT moves a figure by about %.1f %% > %.1f %%",
			100*e.TailShare, float64(e.RTTNs)/1e6, 100*m, 100*limit))
	}
	if m := stallSensitivity * e.StallShare; m > limit {
		errs = append(errs, fmt.Errorf("a stall of %.1f %% of a %v window moves a figure by about %.1f %% > %.1f %% (emulator stalled)",
			100*e.StallShare, time.Duration(b.WindowNs), 100*m, 100*limit))
	}
	return errors.Join(errs...)
}

// String is the effect for a person.
func (e LinkEffect) String() string {
	return fmt.Sprintf("moves a figure by at most %.2f %% (mean extra delay %.2f %% and p99 %.2f %% of the %.1f ms RTT, longest %.2f %% of the window)",
		100*e.Moves, 100*e.MeanShare, 100*e.TailShare, float64(e.RTTNs)/1e6, 100*e.StallShare)
}

// RTTNs is the link's round trip as configured now (both one-way delays).
func (l *Link) RTTNs() int64 {
	return l.ab.params.Load().DelayNs + l.ba.params.Load().DelayNs
}

// CheckEffect is the self-check by effect: the link's timing error
// weighed against b (LinkEffect.Check), and, as in SelfCheck, any packet
// the emulator or a TUN ring dropped, which TCP sees as loss whatever the
// budget.
func (l *Link) CheckEffect(b Budget) (LinkEffect, error) {
	ab, ba := l.Stats()
	e := EffectOf(ab, ba, l.RTTNs(), b)
	return e, errors.Join(e.Check(b), l.checkDirections(ab, ba, Stats.checkDrops))
}

// CheckDrops is the part of every check that no budget relaxes: packets
// the emulator or a TUN ring dropped.
func (l *Link) CheckDrops() error {
	ab, ba := l.Stats()
	return l.checkDirections(ab, ba, Stats.checkDrops)
}
