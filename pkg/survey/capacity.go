package survey

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/packettrain"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// A plan that leans on a relay-to-relay segment whose capacity nobody
// declared or learnt is an upper bound that more relays always seem to
// raise. Before it is shown, the relays sending on those segments are
// asked to measure them (relayd's capacity probe, GET /v1/capacity), and
// the plan is made again with the answers (docs/planning.md, "The capacity
// probe").

// MaxCapacityAsks bounds the sends measured for one plan: the best plan's
// relay segments and its runners-up's, a few each. Each measurement costs
// its two relays budget that lasts an hour.
const MaxCapacityAsks = 6

// DefaultCapacityBound is how long the measurements of one plan may take
// in all: they run at once, each a few admin requests and 3 trains.
const DefaultCapacityBound = 2 * time.Second

// CapacityAsk is one relay's sends to another whose capacity a plan needs.
type CapacityAsk struct {
	Sender, Receiver string
}

// UnknownCapacities lists the relay-to-relay sends, in the plans'
// direction, of the segments of plans (the best first) whose capacity is
// unknown (planner.UnknownCapacity), at most MaxCapacityAsks. isRelay says
// which names are relays of the fleet (not the client or the destination).
func UnknownCapacities(plans []planner.Plan, dir planner.Direction, isRelay func(string) bool) []CapacityAsk {
	var out []CapacityAsk
	for _, p := range plans {
		for _, seg := range p.Segments {
			if !slices.Contains(seg.Unknown, planner.UnknownCapacity) || !isRelay(seg.From) || !isRelay(seg.To) {
				continue
			}
			// Data of a download flows from the destination's side (To)
			// to the client's (From).
			ways := []CapacityAsk{{Sender: seg.To, Receiver: seg.From}}
			switch dir {
			case planner.Up:
				ways = []CapacityAsk{{Sender: seg.From, Receiver: seg.To}}
			case planner.Both:
				ways = append(ways, CapacityAsk{Sender: seg.From, Receiver: seg.To})
			}
			for _, w := range ways {
				if !slices.Contains(out, w) && len(out) < MaxCapacityAsks {
					out = append(out, w)
				}
			}
		}
	}
	return out
}

// ProbeCapacity asks each ask's sender to measure its sends to the
// receiver, all at once and within bound, and sets each answer on sr's
// matrix as the sender's send rate (planner.LearntFromProbe). A sender
// this host did not reach in the survey is asked through a relay it did
// reach that measured the sender (?via=). measured counts the answers set;
// notes say why an ask got no figure (probe.capacity off, over budget, the
// bound reached).
func (s *Survey) ProbeCapacity(ctx context.Context, sr *Result, asks []CapacityAsk, bound time.Duration) (measured int, notes []string) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	answers := make([]packettrain.Answer, len(asks))
	errs := make([]error, len(asks))
	var wg sync.WaitGroup
	for i, a := range asks {
		wg.Go(func() { answers[i], errs[i] = s.askCapacity(ctx, capacityPath(sr, a.Sender), a.Receiver) })
	}
	wg.Wait()
	for i, a := range asks {
		ans, err := answers[i], errs[i]
		switch {
		case err == nil && ans.Error != "":
			err = errors.New(ans.Error)
		case err == nil && (ans.From != a.Sender || ans.To != a.Receiver || !(ans.SendBps > 0) || ans.SendBps > maxProbedBps):
			err = fmt.Errorf("an answer for %s→%s at %v bits/s", ans.From, ans.To, ans.SendBps)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("capacity %s→%s not probed: %v", a.Sender, a.Receiver, err))
			continue
		}
		if setProbed(sr.Matrix, a, ans) {
			measured++
		}
	}
	return measured, notes
}

// maxProbedBps is the highest probed capacity believed: 10 Tbit/s, as the
// registry's send rates.
const maxProbedBps = 1e13

// capacityPath is how this host reaches sender's admin API: directly when
// the survey reached it from here, else through the fewest relays, the
// first one this host reached, each pair of them measured (the matrix's
// relay pairs), as ?via= forwards (a linear lab, a relay only its peers
// see).
func capacityPath(sr *Result, sender string) adminPath {
	here := sr.FromHere()
	if slices.Contains(here, sender) {
		return adminPath{first: sr.Relays[sender]}
	}
	next := map[string][]string{}
	for _, p := range sr.Matrix.Pairs {
		_, aRelay := sr.Relays[p.A]
		_, bRelay := sr.Relays[p.B]
		if aRelay && bRelay && p.Loss < 1 {
			next[p.A], next[p.B] = append(next[p.A], p.B), append(next[p.B], p.A)
		}
	}
	// Breadth first from the relays this host reached: parent[x] is the
	// relay x was reached from ("" for a start).
	parent := map[string]string{}
	queue := slices.Clone(here)
	for _, h := range here {
		parent[h] = ""
	}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		if x == sender {
			var path []string
			for y := x; y != ""; y = parent[y] {
				path = append([]string{y}, path...)
			}
			return adminPath{first: sr.Relays[path[0]], via: path[1:]}
		}
		for _, y := range next[x] {
			if _, seen := parent[y]; !seen {
				parent[y] = x
				queue = append(queue, y)
			}
		}
	}
	return adminPath{first: sr.Relays[sender]}
}

// askCapacity asks the relay at the end of ap for its capacity towards
// receiver.
func (s *Survey) askCapacity(ctx context.Context, ap adminPath, receiver string) (packettrain.Answer, error) {
	var ans packettrain.Answer
	if ap.first.Admin == "" {
		return ans, fmt.Errorf("no admin address for %s in the registry", ap.first.Name)
	}
	err := s.adminGet(ctx, ap, adminapi.PathCapacity+"?to="+url.QueryEscape(receiver), &ans)
	return ans, err
}

// setProbed sets ans on the pair of a's ends in m, as a's sender's send
// rate; false when m has no such pair.
func setProbed(m *planner.Matrix, a CapacityAsk, ans packettrain.Answer) bool {
	for i := range m.Pairs {
		p := &m.Pairs[i]
		switch {
		case p.A == a.Sender && p.B == a.Receiver:
			p.ASendBps, p.ASendAgeSec, p.ASendSource = ans.SendBps, ans.AgeSec, planner.LearntFromProbe
			return true
		case p.B == a.Sender && p.A == a.Receiver:
			p.BSendBps, p.BSendAgeSec, p.BSendSource = ans.SendBps, ans.AgeSec, planner.LearntFromProbe
			return true
		}
	}
	return false
}

// sendSourceOf is the planner's source of a registry pair's send rate.
func sendSourceOf(p registry.Pair) string {
	if p.SendSource == registry.SendFromProbe {
		return planner.LearntFromProbe
	}
	return planner.LearntFromTunnels
}
