package planner

import (
	"fmt"
	"math"
	"slices"
)

// What loss a segment gets. Probes cannot see random loss below a few per
// cent, so a segment whose loss nobody measured (a 0 from the probes
// alone) is not known to be clean; treated as clean, it looks faster than
// every segment whose loss traffic did measure, and a plan moves onto it
// for that reason alone. Such a segment gets a prior from what the fleet
// has measured: the loss per millisecond of RTT over the segments whose
// loss was measured, times its own RTT. Loss per unit of RTT because long
// segments cross more links and more distance, where random loss
// accumulates, and because it keeps the prior's effect where it belongs:
// the Mathis bound falls with RTT^1.5 under it, so splitting a long
// unmeasured segment still pays, as it does on a real lossy path.

// LossFromPrior is the source of a loss the model gave a segment nobody
// measured, from what the fleet measured elsewhere (LossPrior):
// Segment.LossSource. A guess, never a measurement.
const LossFromPrior = "prior"

// LossPriorMinSegments is how many segments measured to lose packets a
// prior needs. One lossy segment's loss is that link's own (a fleet with
// one bad link), however many clean segments were measured beside it (a
// client's clean segment to its relay says nothing of the links beyond),
// and would price every unmeasured segment of the fleet by it; two is the
// least evidence that loss is not one link's.
const LossPriorMinSegments = 2

// LossPrior is what the fleet's measured loss says of a segment nobody
// measured (Result.LossPrior): PerRTTMs × the segment's RTT, at most
// MaxLoss.
type LossPrior struct {
	// PerRTTMs is the measured segments' loss per millisecond of RTT:
	// Σ loss / Σ RTT, each segment's RTT weighing its evidence (a
	// fraction per ms). 0 = no prior: fewer than LossPriorMinSegments
	// of the segments measured lost packets.
	PerRTTMs float64 `json:"loss_per_rtt_ms"`
	// MaxLoss is the highest loss measured on any of them, a fraction: no
	// unmeasured segment is priced worse than the worst the fleet has seen.
	MaxLoss float64 `json:"max_loss"`
	// Segments is how many segments' loss was measured (traffic learnt it,
	// the matrix declared it, or the probes saw it), Lossy how many of
	// them lost packets.
	Segments int `json:"segments"`
	Lossy    int `json:"lossy"`
}

// lossPriorOf is the prior from pairs, leaving out estimated ones, those
// older than maxAgeSec (unless useStale), and unreachable ones (an outage
// is not random loss).
func lossPriorOf(pairs []Pair, maxAgeSec float64, useStale bool) LossPrior {
	var lp LossPrior
	var losses, rttsMs []float64
	for i := range pairs {
		p := &pairs[i]
		if p.Estimated || p.Loss >= 1 || p.AgeSec > maxAgeSec && !useStale || !lossMeasured(p) {
			continue
		}
		if p.Loss > 0 {
			lp.Lossy++
		}
		losses, rttsMs = append(losses, p.Loss), append(rttsMs, p.RTTMs)
		lp.MaxLoss = max(lp.MaxLoss, p.Loss)
	}
	lp.Segments = len(losses)
	if lp.Lossy >= LossPriorMinSegments {
		lp.PerRTTMs = sortedSum(losses) / sortedSum(rttsMs)
	}
	return lp
}

// sortedSum sums vs in ascending order (sorting vs), so that the sum, to
// the last bit, does not depend on the order of the matrix's pairs.
func sortedSum(vs []float64) float64 {
	slices.Sort(vs)
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return sum
}

// lossMeasured says someone measured p's loss: traffic learnt it (either
// way), the matrix declared it, or the probes saw some.
func lossMeasured(p *Pair) bool { return p.Loss > 0 || p.ALossSource != "" || p.BLossSource != "" }

// ok says the prior prices unmeasured segments.
func (lp LossPrior) ok() bool { return lp.PerRTTMs > 0 }

// lossAt is the prior of a segment of rttMs, a fraction.
func (lp LossPrior) lossAt(rttMs float64) float64 { return min(lp.PerRTTMs*rttMs, lp.MaxLoss) }

// sendLoss is the one place that decides what loss data dense node sender
// sends over a segment of rttMs meets, and who says so. loss is the pair's
// (the higher of its two ways', 0..1) and source who measured sender's
// sends ("" the probes alone). A measured loss, or any loss the probes
// saw, is the segment's. A 0 from the probes alone is unknown: for a
// loss-based sender the fleet's prior (LossFromPrior) where there is one;
// otherwise it stays 0 from the probes, and the segment lists its loss as
// unknown (a BBR sender is not bound by the loss probes miss, so it gets
// no prior).
func (s *search) sendLoss(sender int, rttMs, loss float64, source string) (float64, string) {
	if !s.prior.ok() || loss > 0 || source != "" || LossTolerant(s.ccs[sender]) {
		return loss, source
	}
	return s.prior.lossAt(rttMs), LossFromPrior
}

// pairLoss is sendLoss over pair p.
func (s *search) pairLoss(sender int, p *Pair) (float64, string) {
	return s.sendLoss(sender, p.RTTMs, p.Loss, lossSourceOf(s.name(sender), p))
}

// priorNote says what the prior is, or that there is none and why.
func (lp LossPrior) note() string {
	switch {
	case lp.ok():
		return fmt.Sprintf("loss prior: a segment whose loss nobody measured gets %s per ms of its RTT (at most %s), the loss of the %d segment%s the fleet measured (%d lossy) over their RTT; it is a guess, marked prior, and traffic or relayctl bench replaces it",
			fmtLossPerMs(lp.PerRTTMs), fmtPct(lp.MaxLoss), lp.Segments, plural(lp.Segments), lp.Lossy)
	case lp.Segments == 0:
		return "no loss measured anywhere in the fleet: a segment whose loss only the probes saw has nothing better (they miss random loss), and a plan over it is a bound"
	case lp.Lossy == 0:
		return fmt.Sprintf("no loss prior: the %d segment%s whose loss was measured lost nothing: a segment whose loss only the probes saw has nothing better (they miss random loss), and a plan over it is a bound",
			lp.Segments, plural(lp.Segments))
	}
	return fmt.Sprintf("no loss prior: %d of the %d segment%s measured lost packets (a prior needs %d: one link's loss is its own): a segment whose loss only the probes saw has nothing better (they miss random loss), and a plan over it is a bound",
		lp.Lossy, lp.Segments, plural(lp.Segments), LossPriorMinSegments)
}

// fmtLossPerMs formats a loss per ms of RTT: "0.025% per ms".
func fmtLossPerMs(perMs float64) string {
	p := perMs * 100 // two significant digits, no exponent
	return fmt.Sprintf("%.*f%%", max(0, 1-int(math.Floor(math.Log10(p)))), p)
}
