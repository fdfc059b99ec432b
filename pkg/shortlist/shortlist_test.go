package shortlist

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/planner"
)

// plane is a fleet on a plane: RTT = distance in ms, except the pairs in
// detour, whose true RTT is the distance plus the extra ms (a bad route
// the coordinates cannot show).
type plane struct {
	pos    map[string][2]float64
	detour map[[2]string]float64
	down   map[string]bool // nodes whose probes fail (answer 0)
	asked  [][]Probe
}

func (p *plane) trueMs(a, b string) float64 {
	pa, pb := p.pos[a], p.pos[b]
	return math.Hypot(pa[0]-pb[0], pa[1]-pb[1]) + p.detour[key(a, b)]
}

func (p *plane) Probe(_ context.Context, probes []Probe) ([]float64, error) {
	p.asked = append(p.asked, slices.Clone(probes))
	out := make([]float64, len(probes))
	for i, pr := range probes {
		if !p.down[pr.From] && !p.down[pr.To] {
			out[i] = p.trueMs(pr.From, pr.To)
		}
	}
	return out, nil
}

// exactCoord places a node exactly: its position in seconds on the
// first two of serf's eight dimensions.
func exactCoord(xy [2]float64) *coordinate.Coordinate {
	c := coordinate.NewCoordinate(coordinate.DefaultConfig())
	c.Vec[0], c.Vec[1] = xy[0]/1000, xy[1]/1000
	c.Height = 0
	return c
}

// emptyField is a 200×100 ms field with the client at its left end and
// the destination at its right, and no relay yet.
func emptyField() (*plane, Input) {
	p := &plane{pos: map[string][2]float64{"client": {0, 50}, "destination": {200, 50}}, detour: map[[2]string]float64{}}
	return p, Input{
		Client:      planner.Node{Name: "client"},
		Destination: planner.Node{Name: "destination"},
		Request:     planner.Request{Constraints: planner.Constraints{MaxHops: 3}},
	}
}

// place puts relay name at xy, exactly placed by its coordinate.
func (p *plane) place(in *Input, name string, xy [2]float64) {
	p.pos[name] = xy
	in.Relays = append(in.Relays, Relay{Node: planner.Node{Name: name, Relay: true}, Coord: exactCoord(xy)})
}

// newPlane lays n relays at random on a 200×100 ms field, the client at
// its left end and the destination at its right.
func newPlane(n int, seed uint64) (*plane, Input) {
	rnd := rand.New(rand.NewPCG(seed, 1))
	p, in := emptyField()
	for i := range n {
		p.place(&in, fmt.Sprintf("r%02d", i), [2]float64{rnd.Float64() * 200, rnd.Float64() * 100})
	}
	return p, in
}

// oracle plans on the true matrix of every node.
func (p *plane) oracle(t *testing.T, in Input) *planner.Result {
	t.Helper()
	m := &planner.Matrix{Nodes: []planner.Node{in.Client, in.Destination}}
	names := []string{"client", "destination"}
	for _, r := range in.Relays {
		m.Nodes = append(m.Nodes, r.Node)
		names = append(names, r.Node.Name)
	}
	for i, a := range names {
		for _, b := range names[i+1:] {
			m.Pairs = append(m.Pairs, planner.Pair{A: a, B: b, RTTMs: p.trueMs(a, b)})
		}
	}
	req := in.Request
	req.Client, req.Destination = "client", "destination"
	res, err := planner.Search(m, req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// wantOracle checks that res chose the oracle's chain.
func (p *plane) wantOracle(t *testing.T, seed uint64, in Input, res *planner.Result) {
	t.Helper()
	if want := p.oracle(t, in); !slices.Equal(res.Best.Chain, want.Best.Chain) {
		t.Errorf("seed %d: chose %v (%.1f Mbit/s), the oracle %v (%.1f Mbit/s)", seed,
			res.Best.Chain, res.Best.PredictedBps/1e6, want.Best.Chain, want.Best.PredictedBps/1e6)
	}
}

func TestPlanFindsTheOracleChainOnMeasurements(t *testing.T) {
	for seed := range uint64(20) {
		p, in := newPlane(30, seed)
		res, _, st, err := Plan(context.Background(), Config{}, in, p)
		if err != nil {
			t.Fatal(err)
		}
		p.wantOracle(t, seed, in, res)
		if st.Estimated != 0 || st.Measured != len(res.Best.Segments) {
			t.Errorf("seed %d: best plan stands on %d estimated and %d measured segments, want all %d measured",
				seed, st.Estimated, st.Measured, len(res.Best.Segments))
		}
		if st.Rounds < 2 || st.Probes != countProbes(p.asked) {
			t.Errorf("seed %d: stats %+v, prober asked %d probes in %d batches", seed, st, countProbes(p.asked), len(p.asked))
		}
	}
}

// A destination placed beforehand (a relay's host, by that relay's
// coordinate): the landmarks' round is the client's own probes, no relay
// asks the destination in it, and the plan is still the oracle's.
func TestPlanWithTheDestinationsCoordinate(t *testing.T) {
	for seed := range uint64(10) {
		p, in := newPlane(30, seed)
		in.DestinationCoord = exactCoord(p.pos["destination"])
		res, _, st, err := Plan(context.Background(), Config{}, in, p)
		if err != nil {
			t.Fatal(err)
		}
		p.wantOracle(t, seed, in, res)
		if st.Estimated != 0 {
			t.Errorf("seed %d: the best plan stands on %d estimated segments", seed, st.Estimated)
		}
		for _, pr := range p.asked[0] {
			if pr.From != "client" {
				t.Fatalf("seed %d: the first round asked %s to probe %s: want the client's probes only", seed, pr.From, pr.To)
			}
		}
	}
}

func countProbes(batches [][]Probe) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// planeWithALyingEstimate is a plane whose plan on estimates alone
// (chain) rests on a relay-to-relay segment that is 150 ms longer than its
// estimate says: its middle one.
func planeWithALyingEstimate(t *testing.T) (p *plane, in Input, chain []string) {
	t.Helper()
	p, in = newPlane(30, 3)
	first, _, _, err := Plan(context.Background(), Config{Rounds: -1}, in, &plane{pos: p.pos, detour: p.detour})
	if err != nil {
		t.Fatal(err)
	}
	chain = first.Best.Chain
	if len(chain) < 2 {
		t.Fatalf("want a chain of two relays or more to break, got %v", chain)
	}
	mid := len(chain) / 2
	p.detour[key(chain[mid-1], chain[mid])] = 150
	return p, in, chain
}

// A segment whose route is far worse than the coordinates say: the chain
// the estimates prefer is measured, found slow, and replaced; planning on
// estimates alone keeps it.
func TestPlanMeasuresAwayAnEstimateThatLies(t *testing.T) {
	p, in, chain := planeWithALyingEstimate(t)
	blind, _, blindSt, err := Plan(context.Background(), Config{Rounds: -1}, in, &plane{pos: p.pos, detour: p.detour})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(blind.Best.Chain, chain) || blindSt.Estimated == 0 {
		t.Fatalf("without targeted probes the plan should keep %v on estimates; got %v (%+v)", chain, blind.Best.Chain, blindSt)
	}
	res, _, _, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(res.Best.Chain, chain) {
		t.Fatalf("targeted probes kept the broken chain %v", chain)
	}
	if want := p.oracle(t, in); !slices.Equal(res.Best.Chain, want.Best.Chain) {
		t.Errorf("chose %v, the oracle %v", res.Best.Chain, want.Best.Chain)
	}
}

// A relay that vanished keeps its coordinate and its published pairs in
// the registry until they age out; its probes fail, and no plan uses it.
func TestPlanLeavesOutARelayWhoseProbesFail(t *testing.T) {
	p, in := newPlane(30, 5)
	first, _, _, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Best.Chain) == 0 {
		t.Fatal("want a chain to break, got direct")
	}
	gone := first.Best.Chain[0]
	// What it published before it vanished still says it is close.
	for _, r := range in.Relays {
		if r.Node.Name != gone {
			in.Exact = append(in.Exact, planner.Pair{A: gone, B: r.Node.Name, RTTMs: 1})
		}
	}
	p.down = map[string]bool{gone: true}
	p.asked = nil
	res, m, st, err := Plan(context.Background(), Config{Handshakes: 2}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Unreachable, []string{gone}) {
		t.Errorf("Stats.Unreachable %v, want [%s]", st.Unreachable, gone)
	}
	if slices.Contains(res.Best.Chain, gone) {
		t.Errorf("the plan %v goes through %s, whose probes fail", res.Best.Chain, gone)
	}
	for _, pair := range m.Pairs {
		if pair.A == gone || pair.B == gone {
			t.Errorf("the matrix keeps %s-%s (%.1f ms) after its probes failed", pair.A, pair.B, pair.RTTMs)
			break
		}
	}
	for _, batch := range p.asked {
		for _, pr := range batch {
			if pr.Handshakes != 2 && pr.Handshakes != DefaultVerifyHandshakes {
				t.Fatalf("probe %+v: want Config.Handshakes (2), or DefaultVerifyHandshakes re-measuring the answer", pr)
			}
		}
	}
}

type failing struct{ short bool }

func (f failing) Probe(_ context.Context, probes []Probe) ([]float64, error) {
	if f.short {
		return make([]float64, len(probes)-1), nil
	}
	return nil, errors.New("admin API down")
}

func TestPlanReportsAProberThatFails(t *testing.T) {
	_, in := newPlane(10, 1)
	if _, _, _, err := Plan(context.Background(), Config{}, in, failing{}); err == nil || err.Error() != "admin API down" {
		t.Errorf("got %v, want the prober's error", err)
	}
	if _, _, _, err := Plan(context.Background(), Config{}, in, failing{short: true}); err == nil {
		t.Error("a prober answering fewer probes than asked was accepted")
	}
	in.Relays[1].Node.Name = in.Relays[2].Node.Name
	if _, _, _, err := Plan(context.Background(), Config{}, in, &plane{}); err == nil || !strings.Contains(err.Error(), "two relays named") {
		t.Errorf("two relays of one name: got %v, want them refused", err)
	}
	in.Relays[0].Node.Name = "client"
	if _, _, _, err := Plan(context.Background(), Config{}, in, &plane{}); err == nil {
		t.Error("a relay named like the client was accepted")
	}
}

// Describe may tell the destination's node (a relay's host: its
// windows): the rounds plan with it, and the matrix carries it.
func TestDescribeKnowsTheDestination(t *testing.T) {
	p, in := newPlane(20, 2)
	var asked []string
	in.Describe = func(_ context.Context, names []string) (map[string]planner.Node, error) {
		asked = slices.Clone(names)
		return map[string]planner.Node{"destination": {Name: "destination", Relay: true, WindowBytes: 65536, SendWindowBytes: 32768}}, nil
	}
	_, m, _, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) == 0 {
		t.Fatal("Describe was not asked about the candidates")
	}
	i := slices.IndexFunc(m.Nodes, func(n planner.Node) bool { return n.Name == "destination" })
	if i < 0 || m.Nodes[i].WindowBytes != 65536 || m.Nodes[i].SendWindowBytes != 32768 || m.Nodes[i].Relay {
		t.Errorf("the matrix's destination %+v: want Describe's windows, not a relay", m.Nodes[max(i, 0)])
	}
}

// rounds is a plane that counts the rounds it has answered. Its second
// round waits a while for a Describe call (described) before it answers,
// so that one made while the round runs is seen as such.
type rounds struct {
	*plane
	mu        sync.Mutex
	ended     int
	described chan struct{} // closed at the first Describe call
}

func (r *rounds) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	if len(r.asked) == 1 {
		select {
		case <-r.described:
		case <-time.After(300 * time.Millisecond):
		}
	}
	out, err := r.plane.Probe(ctx, probes)
	r.mu.Lock()
	r.ended++
	r.mu.Unlock()
	return out, err
}

// describer sets in's Describe to record, in endedAt, how many rounds had
// ended when each relay was first described; it tells of none.
func (r *rounds) describer(in *Input) (endedAt map[string]int) {
	endedAt = map[string]int{}
	var once sync.Once
	in.Describe = func(_ context.Context, names []string) (map[string]planner.Node, error) {
		once.Do(func() { close(r.described) })
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, name := range names {
			if _, ok := endedAt[name]; !ok {
				endedAt[name] = r.ended
			}
		}
		return nil, nil
	}
	return endedAt
}

// The relays that make probes of a round are described once the round
// has ended (a Prober may bring their descriptions with the answers), the
// others while it runs.
func TestDescribeAfterTheRoundItsRelaysProbeIn(t *testing.T) {
	p, in := newPlane(40, 3)
	r := &rounds{plane: p, described: make(chan struct{})}
	endedAt := r.describer(&in)
	if _, _, _, err := Plan(context.Background(), Config{}, in, r); err != nil {
		t.Fatal(err)
	}
	// The second round is the first cut's: each of its relays probes the
	// destination, and is described once that round has ended.
	makers := map[string]bool{}
	for _, pr := range p.asked[1] {
		if pr.From != "client" {
			makers[pr.From] = true
		}
	}
	if len(makers) < 20 {
		t.Fatalf("%d relays made the first cut's probes, want its 40", len(makers))
	}
	for name := range makers {
		if n, ok := endedAt[name]; !ok || n < 2 {
			t.Errorf("relay %s: described after %d rounds (described: %v), want after the first cut's, the second", name, n, ok)
		}
	}
}

// A relay Describe does not tell of (its description not in yet) is asked
// of again before the next round plans, and counts from then on: the
// plan's matrix carries what Describe told at last.
func TestDescribeAsksAgainUntilTold(t *testing.T) {
	p, in := newPlane(40, 3)
	calls := map[string]int{}
	in.Describe = func(_ context.Context, names []string) (map[string]planner.Node, error) {
		out := map[string]planner.Node{}
		for _, name := range names {
			calls[name]++
			if calls[name] > 1 { // in by the second ask
				out[name] = planner.Node{Name: name, Relay: true, WindowBytes: 777777}
			}
		}
		return out, nil
	}
	_, m, _, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range m.Nodes {
		if !n.Relay {
			continue
		}
		if n.WindowBytes != 777777 {
			t.Errorf("relay %s in the matrix with window %d: want Describe's second answer, 777777", n.Name, n.WindowBytes)
		}
		if calls[n.Name] != 2 {
			t.Errorf("relay %s: asked of %d times, want twice (untold, then told)", n.Name, calls[n.Name])
		}
	}
}

// A destination that makes probes (a relay's host, its relay asked): the
// first cut's ends to it are its probes, no relay of the first cut is asked
// to probe it, and those relays, which this host probes in that round, are
// described once it has ended (the Prober brings their descriptions from
// beside its probes of them). The plan is still the oracle's.
func TestTheDestinationProbesTheFirstCutsEnds(t *testing.T) {
	for seed := range uint64(10) {
		p, in := newPlane(40, seed)
		in.DestinationCoord = exactCoord(p.pos["destination"])
		in.DestinationProbes = true
		r := &rounds{plane: p, described: make(chan struct{})}
		endedAt := r.describer(&in)
		res, _, _, err := Plan(context.Background(), Config{}, in, r)
		if err != nil {
			t.Fatal(err)
		}
		p.wantOracle(t, seed, in, res)
		fromDst := 0
		for _, pr := range p.asked[1] {
			switch {
			case pr.To == "destination" && pr.From != "client":
				t.Fatalf("seed %d: the first cut's round asked %s to probe the destination: want the destination's probes", seed, pr.From)
			case pr.From == "destination":
				fromDst++
			case pr.From == "client":
				// A landmark's was probed in the first round.
				if n, ok := endedAt[pr.To]; !ok || n < 2 {
					t.Errorf("seed %d: relay %s: described after %d rounds (described: %v), want after the first cut's, the second", seed, pr.To, n, ok)
				}
			}
		}
		if fromDst < 20 {
			t.Fatalf("seed %d: the destination probed %d relays in the first cut's round, want its 40", seed, fromDst)
		}
	}
}

// clusters is a fleet of two tight clusters of relays between the client
// (x=0) and the destination (x=200): west around x=60, east around x=140.
// Every west–east pair is 80 ms by distance, and the coordinates say so;
// one pair's route is 30 ms faster than that (a direct route between two
// hubs, which no embedding shows). That pair's relays sit a little off
// their clusters' centres, so that the estimates rank them last.
func clusters() (*plane, Input, [2]string) {
	p, in := emptyField()
	for i := range 8 {
		for _, side := range []struct {
			prefix string
			x      float64
		}{{"w", 60}, {"e", 140}} {
			p.place(&in, fmt.Sprintf("%s%d", side.prefix, i), [2]float64{side.x, 50 + float64(i)*0.3})
		}
	}
	fast := [2]string{"w7", "e7"}
	p.detour[key(fast[0], fast[1])] = -30
	return p, in, fast
}

// The best plan's bottleneck is a west–east hop; the relays near its ends
// are tried in its place, and the fast pair is found although the
// coordinates ranked neither of its relays among the candidates.
func TestPlanSearchesTheBottlenecksNeighbourhood(t *testing.T) {
	p, in, fast := clusters()
	cfg := Config{Candidates: 4, Neighbours: -1}
	blind, _, _, err := Plan(context.Background(), cfg, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(blind.Best.Chain, fast[0]) || slices.Contains(blind.Best.Chain, fast[1]) {
		t.Fatalf("without the neighbourhood search the plan %v found the fast pair: the test proves nothing", blind.Best.Chain)
	}
	cfg.Neighbours = 0 // the default
	res, _, st, err := Plan(context.Background(), cfg, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Best.Chain, fast[:]) {
		t.Errorf("chose %v, want the fast pair %v", res.Best.Chain, fast)
	}
	if st.Estimated != 0 || st.Candidates <= 4 {
		t.Errorf("stats %+v: want every segment measured and the neighbours among the candidates", st)
	}
}

// A pair a relay measured and published counts in the candidates' ranking:
// its relays become candidates, and a plan on estimates and published
// pairs alone takes it.
func TestPlanRanksByPublishedPairs(t *testing.T) {
	p, in, fast := clusters()
	cfg := Config{Candidates: 4, Neighbours: -1, Rounds: -1}
	res, _, _, err := Plan(context.Background(), cfg, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(res.Best.Chain, fast[0]) {
		t.Fatalf("without the published pair the plan %v took it: the test proves nothing", res.Best.Chain)
	}
	in.Exact = []planner.Pair{{A: fast[0], B: fast[1], RTTMs: p.trueMs(fast[0], fast[1])}}
	res, _, _, err = Plan(context.Background(), cfg, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Best.Chain, fast[:]) {
		t.Errorf("chose %v, want the published fast pair %v", res.Best.Chain, fast)
	}
}

// Published pairs read by Input.Published count as Exact's do, and are
// read once, after the first round's probes: a registry's read of them
// goes on while those are out. Its error ends the plan.
func TestPlanReadsThePublishedPairsAfterTheFirstRound(t *testing.T) {
	p, in, fast := clusters()
	cfg := Config{Candidates: 4, Neighbours: -1, Rounds: -1}
	var reads, roundsBefore int
	in.Published = func(context.Context) ([]planner.Pair, error) {
		reads++
		roundsBefore = len(p.asked)
		return []planner.Pair{{A: fast[0], B: fast[1], RTTMs: p.trueMs(fast[0], fast[1])}}, nil
	}
	res, _, _, err := Plan(context.Background(), cfg, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if reads != 1 || roundsBefore != 1 {
		t.Errorf("Published read %d times, after %d rounds; want once, after the first", reads, roundsBefore)
	}
	if !slices.Equal(res.Best.Chain, fast[:]) {
		t.Errorf("chose %v, want the published fast pair %v", res.Best.Chain, fast)
	}
	in.Published = func(context.Context) ([]planner.Pair, error) { return nil, errors.New("consul: gone") }
	if _, _, _, err := Plan(context.Background(), cfg, in, p); err == nil || !strings.Contains(err.Error(), "consul: gone") {
		t.Errorf("a failed read: got %v, want its error", err)
	}
}

// Chains that share their longest segment are told apart by the rest: the
// relay whose other segment has slack ranks first.
func TestRankCandidatesBreaksBottleneckTiesBySlack(t *testing.T) {
	sp := &space{dim: 1}
	for i, x := range []float64{50, 50} {
		sp.vec = append(sp.vec, x)
		sp.hgt, sp.adj = append(sp.hgt, 0), append(sp.adj, 0)
		sp.name = append(sp.name, fmt.Sprintf("r%d", i))
	}
	// Both relays' client segment is 60 ms (the client's slow access);
	// r0 is 55 ms from the destination, r1 20 ms. Alone, the bottleneck
	// ties them at 60 ms (and the name would pick r0).
	got := sp.rankCandidates([]float64{60, 60}, []float64{55, 20}, 200, 1, 1, siteLimit{}, nil)
	if len(got) != 1 || sp.name[got[0]] != "r1" {
		t.Errorf("ranked first %v, want r1 (its other segment has the slack)", got)
	}
}

// A site limit takes a few relays of the best-ranked site, then the next
// site's, and the rest of the first site's only to fill what is left;
// within each, rank order. The subset's caution does not move the sites'
// edges.
func TestRankCandidatesTakesFewPerSite(t *testing.T) {
	sp := &space{dim: 1}
	// a0..a4 in one city (x 0–4 ms apart), b0 and b1 in another 100 ms
	// away; a's chains are a little shorter.
	var fromClient, toDst []float64
	for i, x := range []float64{0, 1, 2, 3, 4, 100, 101} {
		sp.vec = append(sp.vec, x)
		sp.hgt, sp.adj = append(sp.hgt, 0), append(sp.adj, 0)
		name := fmt.Sprintf("a%d", i)
		ms := 30 + float64(i)
		if i >= 5 {
			name, ms = fmt.Sprintf("b%d", i-5), 40+float64(i)
		}
		sp.name = append(sp.name, name)
		fromClient, toDst = append(fromClient, ms), append(toDst, ms)
	}
	names := func(s *space, idx []int) []string {
		var out []string
		for _, v := range idx {
			out = append(out, s.name[v])
		}
		return out
	}
	site := siteLimit{perSite: 2, radius: 0.1} // 0.1 × 200 ms direct: 20 ms
	for _, tc := range []struct {
		count int
		site  siteLimit
		want  []string
	}{
		{4, siteLimit{}, []string{"a0", "a1", "a2", "a3"}},
		{4, site, []string{"a0", "a1", "b0", "b1"}},
		{6, site, []string{"a0", "a1", "b0", "b1", "a2", "a3"}},
	} {
		if got := names(sp, sp.rankCandidates(fromClient, toDst, 200, 1, tc.count, tc.site, nil)); !slices.Equal(got, tc.want) {
			t.Errorf("%d with %+v: ranked %v, want %v", tc.count, tc.site, got, tc.want)
		}
	}
	// Scaled 1.25 times (the second ranking's caution), a site is no
	// wider: b0, 12.5 ms from a0 as scaled, is 10 ms away as placed.
	idx := []int{0, 5, 1}
	sp.vec[5] = 10
	sub := sp.subset(idx, 1.25)
	fc, td := []float64{30, 45, 31}, []float64{30, 45, 31}
	if got, want := names(sub, sub.rankCandidates(fc, td, 200, 1, 2, siteLimit{perSite: 1, radius: 0.06}, nil)), []string{"a0", "a1"}; !slices.Equal(got, want) {
		t.Errorf("subset scaled 1.25, one a site within 12 ms: ranked %v, want %v (b0 is 10 ms from a0 as placed)", got, want)
	}
}

// With caution, a chain that owes its rank to an estimated segment ranks
// below one whose segments were all measured, unless it is clearly
// better; published pairs are measurements and count as they are.
func TestRankCandidatesWithCautionPrefersMeasuredSlack(t *testing.T) {
	sp := &space{dim: 1}
	// a at 0; b and e 38 ms apart (estimated); f 38 ms from b, published.
	for i, x := range []float64{0, 100, 138, 300} {
		sp.vec = append(sp.vec, x)
		sp.hgt, sp.adj = append(sp.hgt, 0), append(sp.adj, 0)
		sp.name = append(sp.name, []string{"a", "b", "e", "f"}[i])
	}
	sp.addExact(1, 3, 38)
	// Measured ends: c→a 40, a→d 40; c→b 10, e→d 10, f→d 10; the rest
	// far. Chains: c-a-d (40, 40), c-b-e-d (10, 38 estimated, 10),
	// c-b-f-d (10, 38 published, 10).
	inf := math.Inf(1)
	fromClient := []float64{40, 10, inf, inf}
	toDst := []float64{40, inf, 10, 10}
	rank := func(scale float64) []string {
		sub := sp.subset([]int{0, 1, 2, 3}, scale)
		var out []string
		for _, v := range sub.rankCandidates(fromClient, toDst, 200, 2, 4, siteLimit{}, nil) {
			out = append(out, sub.name[v])
		}
		return out
	}
	// As estimated, b-e (38) beats a's two 40s, and so does b-f.
	if got := rank(1); !slices.Equal(got[:2], []string{"b", "e"}) && !slices.Equal(got[:2], []string{"b", "f"}) {
		t.Errorf("as estimated: ranked %v, want b and e or f ahead of a", got)
	}
	// At 1.25 b-e counts 47.5 and falls behind a; b-f, published, does
	// not.
	got := rank(1.25)
	if want := []string{"b", "f", "a", "e"}; !slices.Equal(got, want) {
		t.Errorf("with caution 1.25: ranked %v, want %v", got, want)
	}
}

// However few the rounds, the plan chosen stands on measurements (direct
// is always measured): an estimate the rounds did not get to is no
// segment of it.
func TestPlanChoosesAmongMeasuredChainsWhenRoundsRunOut(t *testing.T) {
	var sawEstimate bool
	for seed := uint64(1); seed <= 8; seed++ {
		p, in := newPlane(60, seed)
		// Every route between relays twice what the coordinates say:
		// one round cannot measure every promising pair away.
		for i := 0; i < 60; i++ {
			for j := i + 1; j < 60; j++ {
				a, b := fmt.Sprintf("r%02d", i), fmt.Sprintf("r%02d", j)
				p.detour[key(a, b)] = p.trueMs(a, b)
			}
		}
		blind, _, blindSt, err := Plan(context.Background(), Config{Rounds: -1}, in, &plane{pos: p.pos, detour: p.detour})
		if err != nil {
			t.Fatal(err)
		}
		sawEstimate = sawEstimate || blindSt.Estimated > 0 && len(blind.Best.Chain) > 0
		res, _, st, err := Plan(context.Background(), Config{Rounds: 1, ExplorePerRound: 4}, in, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Estimated > 0 || hasEstimate(res.Best) {
			t.Fatalf("seed %d: plan %v stands on %d estimated segments: %+v", seed, res.Best.Chain, st.Estimated, res.Best.Segments)
		}
	}
	if !sawEstimate {
		t.Fatal("no plan on estimates alone used an estimated segment: the test proves nothing")
	}
}

// reach splits its relays among goroutines from parallelFrom relays on,
// and keeps the pairs' estimates between hops up to segCacheRelays: the
// costs are the same on one core, on many, without the kept estimates,
// and as defined.
func TestReachIsTheSameOnEveryCore(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	n := parallelFrom + 37
	sp := &space{dim: 2}
	from, to := make([]float64, n), make([]float64, n)
	for i := range n {
		x := rnd.Float64() * 1500
		sp.vec = append(sp.vec, x, rnd.Float64()*100)
		sp.hgt, sp.adj = append(sp.hgt, rnd.Float64()*5), append(sp.adj, rnd.Float64()*4-2)
		sp.name = append(sp.name, fmt.Sprintf("r%d", i))
		// The endpoints at either end of the line: the far relays' ends,
		// and their nearer relays', are beyond the bound.
		from[i], to[i] = 5+x/5+rnd.Float64()*20, 5+(1500-x)/5+rnd.Float64()*20
	}
	for range 200 {
		sp.addExact(rnd.IntN(n), rnd.IntN(n), 1+rnd.Float64()*20)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	oneFrom, oneTo := sp.reach(from, to, 4, 200, nil)
	runtime.GOMAXPROCS(7)
	manyFrom, manyTo := sp.reach(from, to, 4, 200, nil)
	// A plan costs its placed relays' pairs before its first round and
	// ranks those the round left reachable: the others are off, and the
	// costs are the same as without them at all.
	var idx []int
	var subFrom, subTo []float64
	offSp := *sp
	offSp.off = make([]bool, n)
	for i := range n {
		if offSp.off[i] = i%7 == 3; !offSp.off[i] {
			idx, subFrom, subTo = append(idx, i), append(subFrom, from[i]), append(subTo, to[i])
		}
	}
	offFrom, offTo := offSp.reach(from, to, 4, 200, offSp.pairCosts())
	ownFrom, ownTo := sp.subset(idx, 1).reach(subFrom, subTo, 4, 200, nil)
	for k := range 4 {
		for i, u := range idx {
			if offFrom[k][u] != ownFrom[k][i] || offTo[k][u] != ownTo[k][i] {
				t.Fatalf("hop %d, relay %d: the costs with relays off differ from those without them", k+1, u)
			}
		}
		for u := range n {
			if offSp.off[u] && !(math.IsInf(offFrom[k][u], 1) && math.IsInf(offTo[k][u], 1)) {
				t.Fatalf("hop %d: relay %d is off but costs %v and %v", k+1, u, offFrom[k][u], offTo[k][u])
			}
		}
	}
	defer func(n int) { segCacheRelays = n }(segCacheRelays)
	segCacheRelays = 0
	uncachedFrom, uncachedTo := sp.reach(from, to, 4, 200, nil)
	// The definition, written plainly: one more hop from any relay whose
	// cost is within the bound, over a segment within it (u to v, as
	// estimated from u, rounded to float32, its cost rounded again) or a
	// published pair.
	bound := normCost(200)
	ref := func(end []float64) [][]float64 {
		out := [][]float64{make([]float64, n)}
		for v := range n {
			out[0][v] = normCost(end[v])
		}
		for k := 1; k < 4; k++ {
			prev, cur := out[k-1], slices.Clone(out[k-1])
			for u := range n {
				if prev[u] > bound {
					continue
				}
				for v := range n {
					if c := float32(normCost(float64(float32(sp.ms(u, v))))); c <= float32(bound) {
						cur[v] = math.Min(cur[v], prev[u]+float64(c))
					}
				}
				for _, e := range sp.exact[u] {
					cur[e.v] = math.Min(cur[e.v], prev[u]+normCost(e.ms))
				}
			}
			out = append(out, cur)
		}
		return out
	}
	for side, got := range map[string][4][][]float64{
		"from": {oneFrom, manyFrom, ref(from), uncachedFrom},
		"to":   {oneTo, manyTo, ref(to), uncachedTo},
	} {
		for k := range got[0] {
			if !slices.Equal(got[0][k], got[1][k]) {
				t.Fatalf("%s, hop %d: the costs differ between one goroutine and seven", side, k+1)
			}
			if !slices.Equal(got[0][k], got[3][k]) {
				t.Fatalf("%s, hop %d: the costs differ without the estimates kept between hops", side, k+1)
			}
			if !slices.Equal(got[0][k], got[2][k]) {
				t.Fatalf("%s, hop %d: the costs differ from the definition's", side, k+1)
			}
		}
	}
}

// A replan from the first plan's Prior places nobody again (no
// landmarks), measures the chains the first plan ranked in its first
// round, costs fewer rounds and probes, and finds the same chain.
func TestReplanStartsFromThePrior(t *testing.T) {
	for seed := range uint64(10) {
		p, in := newPlane(30, seed)
		first, _, st, err := Plan(context.Background(), Config{}, in, p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Prior == nil || len(st.Prior.Pairs) == 0 || len(st.Prior.Chains) == 0 && len(first.Best.Chain) > 0 {
			t.Fatalf("seed %d: no prior to replan from: %+v", seed, st.Prior)
		}
		again := &plane{pos: p.pos, detour: p.detour}
		rin := in
		rin.Prior = st.Prior
		res, _, rst, err := Plan(context.Background(), Config{}, rin, again)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Best.Chain, first.Best.Chain) {
			t.Errorf("seed %d: the replan chose %v, the plan %v", seed, res.Best.Chain, first.Best.Chain)
		}
		// The first round: the direct path and the ranked chains'
		// segments, nothing else.
		want := map[[2]string]bool{key("client", "destination"): true}
		for _, c := range st.Prior.Chains {
			hops := slices.Concat([]string{"client"}, c, []string{"destination"})
			for i := 1; i < len(hops); i++ {
				want[key(hops[i-1], hops[i])] = true
			}
		}
		got := map[[2]string]bool{}
		for _, pr := range again.asked[0] {
			got[key(pr.From, pr.To)] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("seed %d: the replan's first round probed %v, want %v", seed, got, want)
		}
		if rst.Rounds >= st.Rounds || rst.Probes >= st.Probes {
			t.Errorf("seed %d: the replan took %d rounds and %d probes, the plan %d and %d", seed, rst.Rounds, rst.Probes, st.Rounds, st.Probes)
		}
		if rst.Estimated != 0 {
			t.Errorf("seed %d: the replan's plan stands on %d estimated segments", seed, rst.Estimated)
		}
	}
}

// What a replan's answer rests on is measured in it, not taken from the
// Prior: when every chain the first plan ranked slowed since, the replan
// moves off them, to a chain whose every segment it measured.
func TestReplanMeasuresWhatItRestsOn(t *testing.T) {
	p, in := newPlane(30, 3)
	first, _, st, err := Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Best.Chain) == 0 || len(st.Prior.Chains) < 2 {
		t.Fatalf("want a chain and runners-up to break, got %v and %v", first.Best.Chain, st.Prior.Chains)
	}
	broken := map[[2]string]bool{}
	for _, c := range st.Prior.Chains {
		// Its first segment slows by 150 ms: estimates, and the Prior,
		// still say it is short.
		k := key("client", c[0])
		p.detour[k], broken[k] = 150, true
	}
	rin := in
	rin.Prior = st.Prior
	again := &plane{pos: p.pos, detour: p.detour}
	res, _, _, err := Plan(context.Background(), Config{}, rin, again)
	if err != nil {
		t.Fatal(err)
	}
	probed := map[[2]string]bool{}
	for _, b := range again.asked {
		for _, pr := range b {
			probed[key(pr.From, pr.To)] = true
		}
	}
	for _, seg := range res.Best.Segments {
		k := key(seg.From, seg.To)
		if broken[k] {
			t.Errorf("the replan chose %v, through the slowed segment %s–%s", res.Best.Chain, seg.From, seg.To)
		}
		if !probed[k] {
			t.Errorf("the replan's plan %v rests on %s–%s, which it did not measure", res.Best.Chain, seg.From, seg.To)
		}
	}
	if want := p.oracle(t, in); !slices.Equal(res.Best.Chain, want.Best.Chain) {
		t.Errorf("the replan chose %v, the oracle %v", res.Best.Chain, want.Best.Chain)
	}
}

// A replan keeps the relays of the chains its Prior ranked among its
// candidates, whatever their coordinates say: the last plan's chain was
// often found by its rounds, not by the ranking, and measuring it again
// is no use if the planner may not choose it.
func TestReplanKeepsThePriorsChains(t *testing.T) {
	p, in := newPlane(30, 5)
	// za, zb and zc lie on the direct path, a quarter of it apart (the
	// best chain there is: 50 ms a segment), but publish coordinates a
	// second away, so no ranking takes them.
	for i, name := range []string{"za", "zb", "zc"} {
		p.pos[name] = [2]float64{50 * float64(i+1), 50}
		in.Relays = append(in.Relays, Relay{Node: planner.Node{Name: name, Relay: true},
			Coord: exactCoord([2]float64{50 * float64(i+1), 1000})})
	}
	want := []string{"za", "zb", "zc"}
	if got := p.oracle(t, in).Best.Chain; !slices.Equal(got, want) {
		t.Fatalf("the oracle chose %v, want %v", got, want)
	}
	cfg := Config{FirstCut: 8, Candidates: 8}
	rin := in
	rin.Prior = &Prior{Client: exactCoord(p.pos["client"]), Destination: exactCoord(p.pos["destination"]),
		Chains: [][]string{want}}
	res, _, _, err := Plan(context.Background(), cfg, rin, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Best.Chain, want) {
		t.Errorf("the replan chose %v, not the Prior's chain (the oracle's) %v", res.Best.Chain, want)
	}
}

// latePlane answers every probe that touches a slow relay late (NaN in its
// round, the value at the next Late), as a LateProber whose quorum leaves
// the slow relays' requests behind; twice counts pairs asked again while
// in flight.
type latePlane struct {
	*plane
	slow      map[string]bool
	held      []Answer
	pending   map[[2]string]bool
	twice     int
	delivered int
}

func (l *latePlane) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	out, err := l.plane.Probe(ctx, probes)
	for i, pr := range probes {
		k := key(pr.From, pr.To)
		if l.pending[k] {
			l.twice++
		}
		if l.slow[pr.From] || l.slow[pr.To] {
			l.held = append(l.held, Answer{Probe: pr, RTTMs: out[i]})
			l.pending[k] = true
			out[i] = math.NaN()
		}
	}
	return out, err
}

func (l *latePlane) Late(_ context.Context, wait bool) ([]Answer, error) {
	out := l.held
	l.held = nil
	for _, a := range out {
		delete(l.pending, key(a.Probe.From, a.Probe.To))
	}
	l.delivered += len(out)
	return out, nil
}

// With a third of the relays answering a round late, the plan takes their
// figures in later rounds, never asks a pair again while it is in flight,
// and still finds the oracle's chain on measurements.
func TestPlanTakesLateAnswers(t *testing.T) {
	for seed := range uint64(20) {
		p, in := newPlane(30, seed)
		l := &latePlane{plane: p, slow: map[string]bool{}, pending: map[[2]string]bool{}}
		for i := range 10 {
			l.slow[fmt.Sprintf("r%02d", i)] = true
		}
		res, _, st, err := Plan(context.Background(), Config{}, in, l)
		if err != nil {
			t.Fatal(err)
		}
		p.wantOracle(t, seed, in, res)
		if st.Estimated != 0 {
			t.Errorf("seed %d: best plan stands on %d estimated segments", seed, st.Estimated)
		}
		if l.twice != 0 || l.delivered == 0 {
			t.Errorf("seed %d: %d pairs asked again in flight, %d late answers taken", seed, l.twice, l.delivered)
		}
	}
}

// lateLandmarks holds back the first round's answers of its first held
// landmarks' probes of the destination (a LateProber whose quorum left
// them in flight), and records whether the plan waited for them before
// its second round.
type lateLandmarks struct {
	*plane
	held    int
	rounds  int
	waited  bool // Late(wait) before the second round
	pending []Answer
}

func (l *lateLandmarks) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	out, err := l.plane.Probe(ctx, probes)
	if l.rounds == 0 {
		for i, pr := range probes {
			if pr.To == "destination" && pr.From != "client" && len(l.pending) < l.held {
				l.pending = append(l.pending, Answer{Probe: pr, RTTMs: out[i]})
				out[i] = math.NaN()
			}
		}
	}
	l.rounds++
	return out, err
}

func (l *lateLandmarks) Late(_ context.Context, wait bool) ([]Answer, error) {
	if wait && l.rounds == 1 {
		l.waited = true
	}
	out := l.pending
	l.pending = nil
	return out, nil
}

// The landmarks' round goes on without its slowest landmarks while each
// end has minFitLandmarks of them answered, and waits for them below.
func TestTheLandmarksRoundWaitsOnlyForTheFits(t *testing.T) {
	for _, tc := range []struct {
		held     int
		wantWait bool
	}{{0, false}, {16 - minFitLandmarks, false}, {16 - minFitLandmarks + 1, true}} {
		p, in := newPlane(30, 3)
		l := &lateLandmarks{plane: p, held: tc.held}
		if _, _, _, err := Plan(context.Background(), Config{Landmarks: 16}, in, l); err != nil {
			t.Fatal(err)
		}
		if l.waited != tc.wantWait {
			t.Errorf("%d of 16 landmarks' probes of the destination in flight: waited for them %v, want %v", tc.held, l.waited, tc.wantWait)
		}
	}
}

// Stats.FirstCut are the relays whose ends the first two rounds measured
// (the landmarks' the first, the rest the second): FirstCut of them,
// sorted.
func TestStatsNameTheFirstCut(t *testing.T) {
	p, in := newPlane(30, 5)
	_, _, st, err := Plan(context.Background(), Config{FirstCut: 12, Candidates: 6}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.FirstCut) != 12 || !slices.IsSorted(st.FirstCut) {
		t.Fatalf("first cut %v: want 12 relays, sorted", st.FirstCut)
	}
	ends := map[Probe]bool{}
	for _, pr := range slices.Concat(p.asked[0], p.asked[1]) {
		ends[Probe{From: pr.From, To: pr.To}] = true
	}
	for _, r := range st.FirstCut {
		if !ends[Probe{From: "client", To: r}] || !ends[Probe{From: r, To: "destination"}] {
			t.Errorf("first cut relay %s: its ends were not both probed in the first two rounds", r)
		}
	}
}

// clocked is a plane whose rounds each take per on a modelled clock (a
// shortlist.Clock, as the simulator's prober).
type clocked struct {
	*plane
	per, waited time.Duration
}

func (c *clocked) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	c.waited += c.per
	return c.plane.Probe(ctx, probes)
}

func (c *clocked) Waited() time.Duration { return c.waited }

// A plan computes its relay pairs' costs while its first round is out;
// on a Clock, which does not wait, what the plan then waited for them is
// Hidden, never more than the round's time on the clock. A Prober that
// takes its time hides it itself: nothing is Hidden.
func TestPlanHidesNoMoreThanItsFirstRound(t *testing.T) {
	p, in := newPlane(parallelFrom+20, 5)
	_, _, st, err := Plan(context.Background(), Config{}, in, &clocked{plane: p, per: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if st.Hidden < 0 || st.Hidden > time.Microsecond {
		t.Errorf("rounds of 1µs on the clock: %v hidden, want at most the first round's 1µs", st.Hidden)
	}
	_, _, st, err = Plan(context.Background(), Config{}, in, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Hidden != 0 {
		t.Errorf("no Clock: %v hidden, want none", st.Hidden)
	}
}

// A deadline stops the rounds before one that would end past it (its
// length foreseen from the figures known, on the Prober's clock when it
// keeps one), and the plan stands on measurements: the best of the chains
// measured by then. A deadline the rounds do not reach changes nothing.
func TestPlanStopsItsRoundsAtTheDeadline(t *testing.T) {
	p, in := newPlane(40, 3)
	// Each round takes 1 s on the clock; the third (the first shortlist
	// round) would start at 2 s and last its longest request, some
	// 100 ms on this plane. (The answer is not re-measured here: that
	// would be a round more, below.)
	free, _, freeSt, err := Plan(context.Background(), Config{Deadline: 3500 * time.Millisecond, VerifyHandshakes: 1}, in, &clocked{plane: p, per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if freeSt.Rounds != 3 || freeSt.Deadlined || freeSt.Estimated != 0 {
		t.Fatalf("a deadline of 3.5 s: %d rounds (deadlined %v, %d estimated segments), want the 3 the plan makes without one", freeSt.Rounds, freeSt.Deadlined, freeSt.Estimated)
	}
	res, _, st, err := Plan(context.Background(), Config{Deadline: 2050 * time.Millisecond}, in, &clocked{plane: p, per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Deadlined || st.Rounds != 2 || st.Verified != 0 {
		t.Errorf("a deadline of 2.05 s: %d rounds (deadlined %v, %d re-probes), want 2, deadlined, and no re-probes past it", st.Rounds, st.Deadlined, st.Verified)
	}
	for _, seg := range res.Best.Segments {
		if seg.Estimated {
			t.Errorf("the plan at the deadline %v rests on the estimate of %s-%s: want a chain measured throughout", res.Best.Chain, seg.From, seg.To)
		}
	}
	t.Logf("with the third round %v; without it %v", free.Best.Chain, res.Best.Chain)
}

// The search budget counts from the first cut's ends: rounds of 1 s on the
// clock, the first two done at 2 s, leave a budget of 1 s room for the
// third (some 100 ms foreseen), where a deadline of 1 s leaves none; a
// budget of 50 ms leaves none either. The zero Config keeps
// DefaultSearchBudget, a negative one none.
func TestPlanStopsItsRoundsAtTheSearchBudget(t *testing.T) {
	p, in := newPlane(40, 3)
	for _, tc := range []struct {
		budget time.Duration
		rounds int
		out    bool
	}{{time.Second, 3, false}, {0, 3, false}, {50 * time.Millisecond, 2, true}} {
		res, _, st, err := Plan(context.Background(), Config{SearchBudget: tc.budget, VerifyHandshakes: 1}, in, &clocked{plane: p, per: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if st.Rounds != tc.rounds || st.OutOfBudget != tc.out || st.Deadlined {
			t.Errorf("a search budget of %s: %d rounds (out of budget %v, deadlined %v), want %d (%v)", tc.budget, st.Rounds, st.OutOfBudget, st.Deadlined, tc.rounds, tc.out)
		}
		if hasEstimate(res.Best) {
			t.Errorf("a search budget of %s: the plan %v rests on an estimate", tc.budget, res.Best.Chain)
		}
	}
	if got := (Config{}).PlanSearchBudget(); got != DefaultSearchBudget {
		t.Errorf("the zero Config's search budget %s, want %s", got, DefaultSearchBudget)
	}
	if got := (Config{SearchBudget: -1}).PlanSearchBudget(); got != 0 {
		t.Errorf("a negative search budget keeps %s, want none", got)
	}
}

// A round's quorum: FirstQuorum for a plan's first round, Quorum for its
// second, LaterQuorum for the rest (or their defaults).
func TestRoundNeedsAt(t *testing.T) {
	c := Config{FirstQuorum: 0.5, Quorum: 0.9, LaterQuorum: 0.7}
	for _, tc := range []struct{ round, n, want int }{
		{0, 10, 5}, {1, 10, 9}, {2, 10, 7}, {5, 10, 7}, {2, 1, 1}, {2, 0, 0}, {0, 1, 1},
	} {
		if got := c.RoundNeedsAt(tc.round, tc.n); got != tc.want {
			t.Errorf("round %d of %d requests: needs %d, want %d", tc.round, tc.n, got, tc.want)
		}
	}
	// A negative quorum is its default, as 0 is.
	negative := Config{FirstQuorum: -1, Quorum: -1, LaterQuorum: -1}
	for _, round := range []int{0, 1, 4} {
		if got, want := negative.RoundNeedsAt(round, 33), (Config{}).RoundNeedsAt(round, 33); got != want {
			t.Errorf("negative quorums: round %d of 33 requests needs %d, want the default's %d", round, got, want)
		}
	}
	var defaults Config
	for _, tc := range []struct {
		round int
		q     float64
	}{{0, DefaultFirstQuorum}, {1, DefaultQuorum}, {4, DefaultLaterQuorum}} {
		if got, want := defaults.RoundNeedsAt(tc.round, 33), int(math.Ceil(tc.q*33)); got != want {
			t.Errorf("the defaults: round %d of 33 requests needs %d, want %d", tc.round, got, want)
		}
	}
	// The landmarks' round of the defaults: this host's probes (the
	// direct path and one a landmark) and most landmarks' probes of the
	// destination, at least minFitLandmarks.
	if got := defaults.RoundNeedsAt(0, 2*DefaultLandmarks+1) - (DefaultLandmarks + 1); got < minFitLandmarks || got >= DefaultLandmarks {
		t.Errorf("the landmarks' round waits for %d of the %d landmarks' probes of the destination: want at least %d, not all",
			got, DefaultLandmarks, minFitLandmarks)
	}
	if got := (Config{Quorum: 1, LaterQuorum: 1}).RoundNeedsAt(4, 10); got != 10 {
		t.Errorf("LaterQuorum 1: round 4 of 10 requests needs %d, want 10", got)
	}
}

// Settle ends the rounds once a chain measured throughout predicts within
// its share of the best plan on estimates, and not before.
func TestPlanSettlesWithinItsShare(t *testing.T) {
	// a alone makes a chain of 100 ms segments; b and c one of about
	// 67 ms, whose middle segment (b–c) only the coordinates know, 3 ms
	// short of its true RTT. The ends are measured in the plan's second
	// round, so after it [a] is measured throughout and [b c] is not: at
	// a relay's 2 %, [a] predicts 0.68 of [b c]'s estimated rate.
	p := &plane{
		pos:    map[string][2]float64{"client": {0, 50}, "destination": {200, 50}, "a": {100, 50}, "b": {66, 50}, "c": {133, 50}},
		detour: map[[2]string]float64{key("b", "c"): 3},
	}
	in := Input{
		Client:      planner.Node{Name: "client"},
		Destination: planner.Node{Name: "destination"},
		Request:     planner.Request{Constraints: planner.Constraints{MaxHops: 2}}, // not b, a, c: a chain of 67 ms segments
	}
	for _, name := range []string{"a", "b", "c"} {
		in.Relays = append(in.Relays, Relay{Node: planner.Node{Name: name, Relay: true}, Coord: exactCoord(p.pos[name])})
	}
	askedBC := func(p *plane) bool {
		for _, round := range p.asked {
			if slices.ContainsFunc(round, func(pr Probe) bool { return key(pr.From, pr.To) == key("b", "c") }) {
				return true
			}
		}
		return false
	}
	// Without the neighbourhood search: a settled chain's bottleneck
	// must have had its neighbourhood searched, which here asks b–c (below).
	loose := &plane{pos: p.pos, detour: p.detour}
	res, m, st, err := Plan(context.Background(), Config{Settle: 0.4, Neighbours: -1}, in, loose)
	if err != nil {
		t.Fatal(err)
	}
	// The matrix returned is the one the settled plan stands on: each
	// pair once, none estimated, and planning on it chooses the plan.
	seen := map[[2]string]bool{}
	for _, pr := range m.Pairs {
		if k := key(pr.A, pr.B); seen[k] || pr.Estimated {
			t.Errorf("Settle 0.4: the matrix holds %s–%s twice or estimated (%+v)", pr.A, pr.B, pr)
		} else {
			seen[k] = true
		}
	}
	req := in.Request
	req.Client, req.Destination = "client", "destination"
	if again, err := planner.Search(m, req); err != nil || !slices.Equal(again.Best.Chain, res.Best.Chain) {
		t.Errorf("Settle 0.4: planning on the matrix returned chose %v (err %v), the plan %v", again.Best.Chain, err, res.Best.Chain)
	}
	if !st.Settled || st.Rounds > 2 || !slices.Equal(res.Best.Chain, []string{"a"}) || askedBC(loose) {
		t.Errorf("Settle 0.4: chain %v after %d rounds (settled %v, b–c asked %v), want [a] once the ends are measured, settled, b–c never asked",
			res.Best.Chain, st.Rounds, st.Settled, askedBC(loose))
	}
	if hasEstimate(res.Best) {
		t.Errorf("Settle 0.4: the plan rests on an estimate: %+v", res.Best.Segments)
	}
	for _, cfg := range []Config{{Settle: 0.2, Neighbours: -1}, {Settle: 0.4}} {
		tight := &plane{pos: p.pos, detour: p.detour}
		res, _, st, err = Plan(context.Background(), cfg, in, tight)
		if err != nil {
			t.Fatal(err)
		}
		if st.Settled || !slices.Equal(res.Best.Chain, []string{"b", "c"}) || !askedBC(tight) {
			t.Errorf("Settle %g, %d neighbours: chain %v after %d rounds (settled %v, b–c asked %v), want [b c], b–c measured, not settled",
				cfg.Settle, cfg.Neighbours, res.Best.Chain, st.Rounds, st.Settled, askedBC(tight))
		}
		p.wantOracle(t, 0, in, res)
	}
}

// A relay that says its coordinate was measured for less than YoungFor is
// young: the rounds probe its estimated pairs more readily. One measured
// for longer, or that does not say, is planned as before.
func TestPlanProbesAYoungRelaysPairsMoreReadily(t *testing.T) {
	probesOf := func(measuredFor time.Duration) (int, int) {
		p, in := newPlane(30, 5)
		young := in.Relays[7].Node.Name
		in.Relays[7].MeasuredFor = measuredFor
		// Against the best plan's bar (the lower): on this plane the best
		// measured chain's lets every pair of the relay in at either
		// optimism.
		if _, _, _, err := Plan(context.Background(), Config{Rounds: 1, ExploreBar: ExploreBarPlan}, in, p); err != nil {
			t.Fatal(err)
		}
		all, its := 0, 0
		for _, round := range p.asked {
			for _, pr := range round {
				all++
				if pr.From == young || pr.To == young {
					its++
				}
			}
		}
		return all, its
	}
	allNot, itsNot := probesOf(0)
	allOld, itsOld := probesOf(DefaultYoungFor)
	allYoung, itsYoung := probesOf(time.Minute)
	t.Logf("probes of the relay's pairs: %d of %d not said, %d of %d measured for 10 min, %d of %d young", itsNot, allNot, itsOld, allOld, itsYoung, allYoung)
	if allOld != allNot || itsOld != itsNot {
		t.Errorf("measured for %v: %d of %d probes, not said: %d of %d: want the same plan", DefaultYoungFor, itsOld, allOld, itsNot, allNot)
	}
	if itsYoung <= itsNot {
		t.Errorf("young: %d probes of its pairs, settled %d: want more", itsYoung, itsNot)
	}
}

// underReading is a plane where one handshake of a pair with liar at an
// end reads a quarter low (a timer's granularity, a path that changed);
// the median of three handshakes reads true.
type underReading struct {
	*plane
	liar string
}

func (u *underReading) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	out, err := u.plane.Probe(ctx, probes)
	for i, pr := range probes {
		if (pr.From == u.liar || pr.To == u.liar) && pr.Handshakes < 3 && out[i] > 0 {
			out[i] *= 0.75
		}
	}
	return out, err
}

// lowReadingsThatDecide are the relays off the oracle's chain (want) whose
// low readings (underReading) decide the plan made without the check,
// with that plan: its chain goes through the liar.
func lowReadingsThatDecide(t *testing.T, p *plane, in Input, want []string) map[string]*planner.Result {
	t.Helper()
	out := map[string]*planner.Result{}
	for _, rl := range in.Relays {
		liar := rl.Node.Name
		if slices.Contains(want, liar) {
			continue
		}
		blind, _, _, err := Plan(context.Background(), Config{VerifyHandshakes: 1}, in, &underReading{&plane{pos: p.pos}, liar})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(blind.Best.Chain, liar) {
			out[liar] = blind
		}
	}
	return out
}

// A chain chosen on a handshake that read low is measured again before it
// is the answer: its bottleneck, re-probed with three handshakes, reads
// true, and the oracle's chain wins.
func TestPlanVerifiesTheBottleneckItChoseOn(t *testing.T) {
	p, in := newPlane(30, 5)
	want := p.oracle(t, in).Best.Chain
	fooled := 0
	for liar, blind := range lowReadingsThatDecide(t, p, in, want) {
		fooled++
		res, _, st, err := Plan(context.Background(), Config{}, in, &underReading{&plane{pos: p.pos}, liar})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Best.Chain, want) || st.Verified == 0 {
			t.Errorf("liar %s: chose %v after %d re-probes, want the oracle's %v (unverified: %v)",
				liar, res.Best.Chain, st.Verified, want, blind.Best.Chain)
		}
	}
	if fooled == 0 {
		t.Fatal("no low reading decided a plan: the test shows nothing")
	}
	t.Logf("%d of %d liars decided the unverified plan", fooled, len(in.Relays)-len(want))
}

// lateReprobes is underReading as a LateProber whose quorum leaves every
// probe of three handshakes or more behind unless it is awaited, and hands
// the held ones over only to a Late that waits: a verify pass's longest
// probe, the bottleneck it is made for, is its round's last.
type lateReprobes struct {
	underReading
	held []Answer
}

func (l *lateReprobes) Probe(ctx context.Context, probes []Probe) ([]float64, error) {
	out, err := l.underReading.Probe(ctx, probes)
	for i, pr := range probes {
		if pr.Handshakes >= 3 && !pr.Awaited && out[i] > 0 {
			l.held = append(l.held, Answer{Probe: pr, RTTMs: out[i]})
			out[i] = math.NaN()
		}
	}
	return out, err
}

func (l *lateReprobes) Late(_ context.Context, wait bool) ([]Answer, error) {
	if !wait {
		return nil, nil
	}
	out := l.held
	l.held = nil
	return out, nil
}

// verify waits for its own re-probes, whatever the round's quorum: the
// chain a low reading put first is measured again before it is the
// answer, even where a quorum would have left that re-probe late.
func TestPlanWaitsForItsReprobes(t *testing.T) {
	p, in := newPlane(30, 5)
	want := p.oracle(t, in).Best.Chain
	fooled := 0
	for liar := range lowReadingsThatDecide(t, p, in, want) {
		fooled++
		res, _, _, err := Plan(context.Background(), Config{}, in, &lateReprobes{underReading: underReading{&plane{pos: p.pos}, liar}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Best.Chain, want) {
			t.Errorf("liar %s: chose %v, want the oracle's %v: the re-probes were not waited for", liar, res.Best.Chain, want)
		}
	}
	if fooled == 0 {
		t.Fatal("no low reading decided a plan: the test shows nothing")
	}
}

// The pairs a round explores are those on chains that could beat the best
// chain measured throughout (ExploreBarMeasured), not the best plan on
// estimates, which is faster than anything real when an estimate it rests
// on lies low: the measured bar is the higher, so a round explores every
// pair the plan's bar would, and more.
func TestPlanExploresAgainstTheBestMeasuredChain(t *testing.T) {
	p, in, _ := planeWithALyingEstimate(t)
	explored := func(bar int) map[[2]string]bool {
		pl := &plane{pos: p.pos, detour: p.detour}
		if _, _, _, err := Plan(context.Background(), Config{Rounds: 1, ExploreBar: bar, VerifyHandshakes: 1}, in, pl); err != nil {
			t.Fatal(err)
		}
		out := map[[2]string]bool{}
		for _, pr := range pl.asked[len(pl.asked)-1] {
			out[key(pr.From, pr.To)] = true
		}
		return out
	}
	byPlan, byMeasured := explored(ExploreBarPlan), explored(ExploreBarMeasured)
	for k := range byPlan {
		if !byMeasured[k] {
			t.Errorf("%v explored against the best plan, not against the best measured chain", k)
		}
	}
	if len(byMeasured) <= len(byPlan) {
		t.Errorf("explored %d pairs against the best measured chain, %d against the best plan: want more", len(byMeasured), len(byPlan))
	}
	t.Logf("explored %d pairs against the best plan, %d against the best measured chain", len(byPlan), len(byMeasured))
}
