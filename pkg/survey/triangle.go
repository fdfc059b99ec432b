package survey

import (
	"fmt"
	"slices"
	"strings"
)

// A relay reports its own RTTs: to the destination (its /v1/probe answer)
// and to its peers (its measurements). A relay that lies low pulls every
// plan through itself. What it claims is checked against what other
// relays measured, by the triangle: a witness W that measured W→X and
// W→T bounds X→T from below both ways, X→T ≥ W→T − W→X and
// X→T ≥ W→X − W→T, unless a path is a detour shorter than W's own. Such
// detours are real (they are why relays pay), but rarely shorter than
// half the path they avoid; so a witness allows no claim below
//
//	max(W→T / detourAllowance − W→X, W→X / detourAllowance − W→T)
//
// The first bound catches a claimant near the witnesses claiming to be
// near a far target; the second a claimant far from the witnesses
// claiming to be near a target they are near (a relay on another
// continent saying it is next to the destination).
//
// A claim is not believed when minWitnesses witnesses each allow no less:
// the minWitnesses-th highest floor decides. So one lying witness can
// neither condemn an honest relay (it needs another) nor clear a liar
// (lowering its own floor changes nothing the others say). A claim not
// believed is dropped (no segment of the plan), not rounded to the floor:
// the floor is the best lie the check still believes.
//
// One witness alone, even this host, is no verdict: its own path to the
// target may be a bad route (one that leaves the continent, 30-150 ms
// more than its neighbours'), and a detour through the claimant that
// more than halves that path is honest; those are the paths relays
// exist for. Two witnesses whose floors both exceed the claim make a
// real detour far less likely than a lie. Where RTTs obey the triangle
// inequality every floor is below half the honest claim, so an honest
// relay's claim with ordinary noise (a few per cent of its RTT) sits far
// above any floor.

// detourAllowance is how many times shorter than a witness's own path a
// detour through the claimant may be before the claim is not believed.
const detourAllowance = 2.0

// minWitnesses is how many witnesses a verdict needs (see above).
const minWitnesses = 2

// witness is one relay's own measurements: to the claimant and to the
// claim's target, milliseconds.
type witness struct {
	name                     string
	toClaimantMs, toTargetMs float64
}

// triangleFloor returns the least RTT from a claimant to a target that the
// witnesses allow (the minWitnesses-th highest of their floors), and
// whether there are enough witnesses (minWitnesses) for a verdict. A claim
// below the floor is not believed.
func triangleFloor(ws []witness) (floorMs float64, ok bool) {
	var floors []float64
	for _, w := range ws {
		if w.toClaimantMs > 0 && w.toTargetMs > 0 {
			floors = append(floors, w.floorMs())
		}
	}
	if len(floors) < minWitnesses {
		return 0, false
	}
	slices.Sort(floors)
	return floors[len(floors)-minWitnesses], true
}

// floorMs is the least RTT from the claimant to the target this witness
// allows (see above), never below 0.
func (w witness) floorMs() float64 {
	return max(w.toTargetMs/detourAllowance-w.toClaimantMs, w.toClaimantMs/detourAllowance-w.toTargetMs, 0)
}

// implausible is a claim the triangle check did not believe (dropped from
// the matrix), and the floor it fell below.
type implausible struct {
	from, to         string
	claimMs, floorMs float64
	witnesses        []string
}

func (c implausible) note() string {
	return fmt.Sprintf("%s -> %s: %s claims %.2f ms, but what %s measured allows no less than %.2f ms (a detour more than %.0fx shorter than their own path); claim dropped",
		c.from, c.to, c.from, c.claimMs, strings.Join(c.witnesses, ", "), c.floorMs, detourAllowance)
}

// checkClaim returns the claim checked against the witnesses (never the
// claimant or the target themselves).
func checkClaim(from, to string, claimMs float64, ws []witness) (implausible, bool) {
	var others []witness
	var names []string
	for _, w := range ws {
		if w.name != from && w.name != to && w.toClaimantMs > 0 && w.toTargetMs > 0 {
			others = append(others, w)
			names = append(names, w.name)
		}
	}
	slices.Sort(names)
	floor, ok := triangleFloor(others)
	if !ok || claimMs >= floor {
		return implausible{}, false
	}
	return implausible{from: from, to: to, claimMs: claimMs, floorMs: floor, witnesses: names}, true
}
