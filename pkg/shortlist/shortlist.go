// Package shortlist plans a path over a fleet too large to measure whole.
//
// A relay measures only a bounded set of peers (pkg/coord), so most
// relay-to-relay RTTs are estimates from network coordinates, and nobody
// has measured the client's or the destination's RTT to most relays. Plan
// goes from estimates to measurements in a few rounds of targeted probes:
//
//  1. Landmarks: the client probes a few relays spread over the coordinate
//     space, those relays probe the destination, and the client probes the
//     destination (the direct path). The client and the destination get
//     coordinates fitted to those RTTs (coord.Fit).
//  2. Candidates: each relay is ranked by the estimated bottleneck (the
//     longest segment) of the best chain through it, over every relay's
//     coordinates; the best Candidates are what the planner sees. Not the
//     relays nearest the direct path: with only the longest segment
//     setting the rate, the best chains often go the long way round.
//  3. Ends: the client probes every candidate and every candidate probes
//     the destination, in one round: the endpoints' coordinates, fitted
//     from a few landmarks, are the least accurate estimates, and those
//     segments start and end every chain.
//  4. Shortlist: the planner plans over the candidates (exact pairs where a
//     relay published one, estimates elsewhere); the estimated segments of
//     the best plan and its runners-up are probed, with the candidate pairs
//     that would beat the best plan's bottleneck were their estimates
//     Optimism times too high, and the planner plans again. That repeats
//     until the best plan stands on measurements only, or Rounds run out.
//
// The planner stays pure; probing is the Prober's (relays' /v1/probe and
// this host's handshakes in relayctl, the modelled network in the
// simulator). Each round is one batch of probes made in parallel, so a
// plan costs a few round trips of wall time, not one per probe.
package shortlist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/planner"
)

// Defaults.
const (
	DefaultLandmarks  = 8
	DefaultCandidates = 48
	DefaultRounds     = 6
	// DefaultOptimism: in the simulator, the median relay-pair estimate
	// is off by about 13 % and the worst tenth by 45 % or more; a pair
	// whose true RTT is 0.6 of its estimate is rare, one at 0.8 is not.
	DefaultOptimism        = 0.6
	DefaultExplorePerRound = 400
)

// Config tunes Plan. The zero value is the defaults.
type Config struct {
	Landmarks  int // relays the endpoints are placed from; default DefaultLandmarks
	Candidates int // relays the planner sees, ranked by their best chain's estimated bottleneck; default DefaultCandidates
	// Rounds is how many rounds of shortlist probes may follow the
	// landmarks'; 0 = DefaultRounds, negative = none (plan on the
	// estimates and published pairs).
	Rounds int
	// Optimism is how much lower than its estimate a relay pair's RTT may
	// turn out, a fraction: each round also probes the candidate pairs
	// whose estimate times Optimism beats the best plan's bottleneck
	// (default DefaultOptimism; 1 = trust the estimates).
	Optimism float64
	// ExplorePerRound bounds each round's probes, those of the ranked
	// plans' segments and the optimistic ones together; default
	// DefaultExplorePerRound.
	ExplorePerRound int
	// Seed picks the landmarks (reproducibly: the same fleet, the same
	// landmarks).
	Seed uint64
	// Vivaldi configures the endpoints' fit; nil = coordinate.DefaultConfig().
	Vivaldi *coordinate.Config
}

func (c Config) withDefaults() Config {
	c.Landmarks = cmp.Or(c.Landmarks, DefaultLandmarks)
	c.Candidates = cmp.Or(c.Candidates, DefaultCandidates)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Optimism = cmp.Or(c.Optimism, DefaultOptimism)
	c.ExplorePerRound = cmp.Or(c.ExplorePerRound, DefaultExplorePerRound)
	if c.Rounds < 0 {
		c.Rounds = 0
	}
	if c.Vivaldi == nil {
		c.Vivaldi = coordinate.DefaultConfig()
	}
	return c
}

// Relay is one relay of the fleet as the registry knows it.
type Relay struct {
	Node  planner.Node           // Relay must be true; its windows and limit as known
	Coord *coordinate.Coordinate // nil: not placed yet (never a candidate unless measured)
}

// Input is what Plan plans from.
type Input struct {
	Relays []Relay
	// Exact are relay-to-relay RTTs the relays measured and published
	// (Estimated false); they win over estimates.
	Exact []planner.Pair
	// Client and Destination are the endpoints' nodes (not relays); their
	// names are the matrix's and the Prober's.
	Client, Destination planner.Node
	// Request says how to plan; its Client and Destination are set from
	// the nodes above.
	Request planner.Request
	// Describe, when set, is called once the candidates are chosen, with
	// their names, and returns their nodes as they are now known (windows,
	// limits: what is too costly to read for every relay of a large
	// fleet); nodes it leaves out keep Relays' Node. An error fails the
	// plan.
	Describe func(ctx context.Context, names []string) (map[string]planner.Node, error)
}

// Probe asks one node to measure its RTT to another: From is the client or
// a relay, To a relay or the destination.
type Probe struct{ From, To string }

// Prober measures RTTs, milliseconds. It answers one value per probe, in
// order; a value <= 0 is a probe that failed (the pair stays unknown or
// estimated). An error fails the whole plan.
type Prober interface {
	Probe(ctx context.Context, probes []Probe) ([]float64, error)
}

// Stats says what a plan cost and what it stands on.
type Stats struct {
	Probes     int // probes asked of the Prober, all rounds
	Rounds     int // batches of probes, the landmarks' included
	Candidates int // relays the planner saw
	// Measured and Estimated count the best plan's segments by source.
	Measured, Estimated int
}

// Plan plans the path from in.Client to in.Destination: see the package
// documentation. It returns the planner's result, the matrix it planned
// on (candidates only) and what it cost.
func Plan(ctx context.Context, cfg Config, in Input, p Prober) (*planner.Result, *planner.Matrix, Stats, error) {
	cfg = cfg.withDefaults()
	var st Stats
	client, dst := in.Client.Name, in.Destination.Name
	if client == "" || dst == "" || client == dst {
		return nil, nil, st, errors.New("shortlist: the client and the destination need two different names")
	}
	placed := make(map[string]Relay, len(in.Relays))
	var peers []coord.Peer
	for _, r := range in.Relays {
		if r.Node.Name == client || r.Node.Name == dst {
			return nil, nil, st, fmt.Errorf("shortlist: relay %q has an endpoint's name", r.Node.Name)
		}
		placed[r.Node.Name] = r
		if r.Coord != nil {
			peers = append(peers, coord.Peer{Name: r.Node.Name, Coord: r.Coord})
		}
	}
	slices.SortFunc(peers, func(a, b coord.Peer) int { return cmp.Compare(a.Name, b.Name) })

	// measured holds every RTT probed in this plan, by unordered pair.
	measured := map[[2]string]float64{}
	probe := func(batch []Probe) error {
		if len(batch) == 0 {
			return nil
		}
		rtts, err := p.Probe(ctx, batch)
		if err != nil {
			return err
		}
		if len(rtts) != len(batch) {
			return fmt.Errorf("shortlist: the prober answered %d of %d probes", len(rtts), len(batch))
		}
		st.Probes += len(batch)
		st.Rounds++
		for i, b := range batch {
			if rtts[i] > 0 {
				measured[key(b.From, b.To)] = rtts[i]
			}
		}
		return nil
	}

	// Round 1: the landmarks and the direct path.
	landmarks := coord.Landmarks(peers, cfg.Landmarks, rand.New(rand.NewPCG(cfg.Seed, uint64(len(peers)))))
	batch := []Probe{{client, dst}}
	for _, l := range landmarks {
		batch = append(batch, Probe{client, l.Name}, Probe{l.Name, dst})
	}
	if err := probe(batch); err != nil {
		return nil, nil, st, err
	}
	fit := func(end string) *coordinate.Coordinate {
		var ls []coord.Landmark
		for _, l := range landmarks {
			if ms, ok := measured[key(end, l.Name)]; ok {
				ls = append(ls, coord.Landmark{Coord: l.Coord, RTTMs: ms})
			}
		}
		c, err := coord.Fit(ls, cfg.Vivaldi)
		if err != nil {
			return nil
		}
		return c
	}
	coords := map[string]*coordinate.Coordinate{client: fit(client), dst: fit(dst)}
	for _, r := range peers {
		coords[r.Name] = r.Coord
	}
	exact := map[[2]string]float64{}
	for _, e := range in.Exact {
		if !e.Estimated && e.RTTMs > 0 {
			exact[key(e.A, e.B)] = e.RTTMs
		}
	}
	// rtt is the best figure known for a pair: measured in this plan,
	// else published, else estimated from coordinates.
	rtt := func(a, b string) (ms float64, estimated, ok bool) {
		k := key(a, b)
		if ms, ok := measured[k]; ok {
			return ms, false, true
		}
		if ms, ok := exact[k]; ok {
			return ms, false, true
		}
		ms, ok = coord.EstimateMs(coords[a], coords[b])
		return ms, true, ok && ms > 0
	}

	// The candidates: the relays on the chains with the lowest estimated
	// bottleneck (see minimaxCandidates).
	sp := &space{dim: -1}
	var fromClient, toDst []float64
	for _, r := range in.Relays {
		c := r.Coord
		a, _, okA := rtt(client, r.Node.Name)
		b, _, okB := rtt(r.Node.Name, dst)
		if !okA || !okB || !validCoord(c) || (sp.dim >= 0 && len(c.Vec) != sp.dim) {
			continue
		}
		sp.dim = len(c.Vec)
		for _, x := range c.Vec {
			sp.vec = append(sp.vec, x*1000)
		}
		sp.hgt, sp.adj = append(sp.hgt, c.Height*1000), append(sp.adj, c.Adjustment*1000)
		sp.name = append(sp.name, r.Node.Name)
		fromClient, toDst = append(fromClient, a), append(toDst, b)
	}
	directMs, _, okDirect := rtt(client, dst)
	if !okDirect {
		directMs = math.Inf(1)
	}
	hops := in.Request.Constraints.MaxHops
	if hops == 0 {
		hops = planner.DefaultMaxHops
	}
	var cands []string
	for _, v := range sp.minimaxCandidates(fromClient, toDst, directMs, hops, cfg.Candidates) {
		cands = append(cands, sp.name[v])
	}
	slices.Sort(cands)
	st.Candidates = len(cands)
	if in.Describe != nil {
		nodes, err := in.Describe(ctx, cands)
		if err != nil {
			return nil, nil, st, err
		}
		for name, n := range nodes {
			if r, ok := placed[name]; ok && n.Name == name {
				n.Relay = true
				r.Node = n
				placed[name] = r
			}
		}
	}

	req := in.Request
	req.Client, req.Destination = client, dst
	build := func() *planner.Matrix {
		m := &planner.Matrix{Nodes: []planner.Node{in.Client, in.Destination}}
		m.Nodes[0].Relay, m.Nodes[1].Relay = false, false
		names := append([]string{client, dst}, cands...)
		for _, c := range cands {
			m.Nodes = append(m.Nodes, placed[c].Node)
		}
		for i, a := range names {
			for _, b := range names[i+1:] {
				if ms, est, ok := rtt(a, b); ok {
					m.Pairs = append(m.Pairs, planner.Pair{A: a, B: b, RTTMs: max(ms, 0.001), Estimated: est})
				}
			}
		}
		slices.SortFunc(m.Nodes, func(x, y planner.Node) int { return cmp.Compare(x.Name, y.Name) })
		return m
	}

	// Round 2: every candidate's segments to the client and to the
	// destination. The endpoints' coordinates are fitted from a few
	// landmarks, the least accurate estimates there are, and those are the
	// first and last segments of every chain.
	{
		batch = batch[:0]
		for _, c := range cands {
			if _, est, _ := rtt(client, c); est {
				batch = append(batch, Probe{client, c})
			}
			if _, est, _ := rtt(c, dst); est {
				batch = append(batch, Probe{c, dst})
			}
		}
		if err := probe(batch); err != nil {
			return nil, nil, st, err
		}
	}
	var res *planner.Result
	var m *planner.Matrix
	for round := 0; ; round++ {
		m = build()
		var err error
		if res, err = planner.Search(m, req); err != nil {
			return nil, nil, st, err
		}
		if round == cfg.Rounds || !hasEstimate(res.Best) {
			break
		}
		// Probe the estimated segments of every plan the result ranks:
		// the runner-up that measurement promotes must be measured too.
		seen := map[[2]string]bool{}
		batch = batch[:0]
		for _, pl := range append([]planner.Plan{res.Best}, res.Alternatives...) {
			for _, seg := range pl.Segments {
				k := key(seg.From, seg.To)
				if seg.Estimated && !seen[k] {
					seen[k] = true
					batch = append(batch, orient(seg.From, seg.To, client, dst))
				}
			}
		}
		// And the relay pairs among the candidates whose estimate, were it
		// Optimism times too high, would beat the best plan's bottleneck:
		// a detour's one good long hop is what coordinates see worst.
		if res.Best.Bottleneck >= 0 {
			bMs := res.Best.Segments[res.Best.Bottleneck].RTTMs
			for i, a := range cands {
				for _, b := range cands[i+1:] {
					k := key(a, b)
					if ms, est, ok := rtt(a, b); ok && est && ms*cfg.Optimism < bMs && !seen[k] && len(batch) < cfg.ExplorePerRound {
						seen[k] = true
						batch = append(batch, Probe{a, b})
					}
				}
			}
		}
		if err := probe(batch); err != nil {
			return nil, nil, st, err
		}
	}
	for _, seg := range res.Best.Segments {
		if seg.Estimated {
			st.Estimated++
		} else {
			st.Measured++
		}
	}
	return res, m, st, nil
}

// validCoord says c can be used in estimates.
func validCoord(c *coordinate.Coordinate) bool {
	return c != nil && len(c.Vec) > 0 && c.IsValid()
}

// orient says which end of a segment measures it: the client measures its
// own segment, a relay its segment to the destination; between relays the
// segment's client-side end.
func orient(from, to, client, dst string) Probe {
	switch {
	case to == client, from == dst:
		return Probe{to, from}
	}
	return Probe{from, to}
}

func hasEstimate(p planner.Plan) bool {
	return slices.ContainsFunc(p.Segments, func(s planner.Segment) bool { return s.Estimated })
}

// key is an unordered pair: RTTs are symmetric.
func key(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}
