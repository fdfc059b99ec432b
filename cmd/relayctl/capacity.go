package main

import (
	"context"
	"fmt"

	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// capacityPlans is how many plans, the best first, may have their relay
// segments of unknown capacity measured: the best, and the runners-up
// that would take its place if the measurement demotes it.
const capacityPlans = 3

// probeCapacities asks the relays that send on the relay-to-relay
// segments of res's best plans whose capacity nobody declared or learnt to
// measure them (--probe-capacity), and plans again on sr's matrix with
// the answers; res as it was when nothing was measured. The notes say what
// was measured, and why a segment was not.
func probeCapacities(ctx context.Context, sv *survey.Survey, sr *survey.Result, req planner.Request, res *planner.Result) (*planner.Result, []string, error) {
	plans := append([]planner.Plan{res.Best}, res.Alternatives...)
	plans = plans[:min(len(plans), capacityPlans)]
	asks := survey.UnknownCapacities(plans, req.Direction, func(name string) bool {
		_, ok := sr.Relays[name]
		return ok
	})
	if len(asks) == 0 {
		return res, nil, nil
	}
	n, notes := sv.ProbeCapacity(ctx, sr, asks, survey.DefaultCapacityBound)
	if n == 0 {
		return res, notes, nil
	}
	again, err := planner.Search(sr.Matrix, req)
	if err != nil {
		return nil, nil, err
	}
	notes = append(notes, fmt.Sprintf("planned again after the relays' capacity probes measured %d of the %d relay send%s of unknown capacity the plans leaned on (--probe-capacity)", n, len(asks), plural(len(asks))))
	return again, notes, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
