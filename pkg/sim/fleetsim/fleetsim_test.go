package fleetsim

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/netsim"
)

// small is a small world planned without a search budget: a budget counts
// this machine's computation, and the tests compare plans run to run.
func small() Config {
	cfg := Config{Relays: 80, Seed: 3, Warmup: 10 * time.Minute, Pairs: 20}
	cfg.Shortlist.SearchBudget = -1
	return cfg
}

func TestRunReportsTheBudgetAndPlansNoBetterThanTheOptimum(t *testing.T) {
	rep, err := Run(context.Background(), small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *rep)
	// Every relay alive the whole run probes once per interval: the
	// budget, exactly (12 a minute by default).
	if math.Abs(rep.ProbesPerMin-12) > 0.01 {
		t.Errorf("probes per relay per minute %.3f, want 12", rep.ProbesPerMin)
	}
	if rep.BytesPerMin < 12*ProbeBytes {
		t.Errorf("bytes per relay per minute %.0f: less than the probes alone", rep.BytesPerMin)
	}
	p := rep.Plans
	if p.Count != 20 {
		t.Fatalf("%d plans, want 20", p.Count)
	}
	// Quality is the optimum over the chosen: never above 1, or the
	// optimum is not one.
	if p.QualityMedian > 1 || p.QualityP5 > p.QualityMedian || p.QualityP5 <= 0 {
		t.Errorf("quality median %.3f, p5 %.3f: want 0 < p5 <= median <= 1", p.QualityMedian, p.QualityP5)
	}
	// Looser bands hold at least as many plans.
	if p.Within15 < p.Within10 || p.Within20 < p.Within15 || p.Within20 > 1 {
		t.Errorf("within 10 %%, 15 %%, 20 %% of the optimum: %.2f, %.2f, %.2f: want 10 <= 15 <= 20 <= 1", p.Within10, p.Within15, p.Within20)
	}
	// A chosen chain is made of candidates: the candidates' best is at
	// least as good.
	if p.CandidatesWithin10 < p.Within10 {
		t.Errorf("candidates within 10 %% of the optimum %.2f, plans %.2f: the plans beat their own candidates", p.CandidatesWithin10, p.Within10)
	}
	// The planner over the candidates' true RTTs chooses one of them.
	if p.TrueChoiceWithin10 > p.CandidatesWithin10 || p.TrueChoiceWithin10 <= 0 {
		t.Errorf("the planner on the candidates' true RTTs within 10 %% of the optimum %.2f, the candidates %.2f: want above 0, at most the candidates",
			p.TrueChoiceWithin10, p.CandidatesWithin10)
	}
	// Every relay of the first cut is in one of its cities. The small
	// world's first cut is every placed relay (it is smaller than the
	// least first cut), the candidates a part of it: it holds what they
	// hold.
	if p.FirstCutCitiesWithin10 < p.FirstCutWithin10 || p.FirstCutWithin10 < p.CandidatesWithin10 {
		t.Errorf("within 10 %% of the optimum: candidates %.2f, first cut %.2f, its cities %.2f: want candidates <= first cut <= its cities",
			p.CandidatesWithin10, p.FirstCutWithin10, p.FirstCutCitiesWithin10)
	}
	// Every plan has the landmarks' round and the first cut's; each round
	// is a part of the plan's wall time.
	for name, ms := range map[string]float64{"first": p.FirstRoundMsMedian, "second": p.SecondRoundMsMedian, "later": p.LaterRoundMsMedian} {
		if ms <= 0 || ms > p.WallMsP95 {
			t.Errorf("the %s rounds' median %.0f ms: want more than 0, at most the plans' wall time p95 (%.0f ms)", name, ms, p.WallMsP95)
		}
	}
	if p.OptimumGainMedian < 1 {
		t.Errorf("the optimum's gain over direct %.2f: below 1, but direct is a candidate", p.OptimumGainMedian)
	}
	if rep.CoordErrMedian <= 0 || rep.CoordErrMedian > 0.5 {
		t.Errorf("coordinate error %.3f: not learning", rep.CoordErrMedian)
	}
	// Each relay reads every relay's coordinate every
	// coord.FleetViewEvery by default.
	if want := float64(rep.AliveRelays*FleetViewBytesPerRelay) * time.Minute.Seconds() / coord.FleetViewEvery(small().Relays).Seconds(); math.Abs(rep.FleetViewBytesPerMin-want) > 1e-6 {
		t.Errorf("fleet view bytes a relay a minute %.0f, want %.0f", rep.FleetViewBytesPerMin, want)
	}
}

// A relay that reads the fleet's coordinates seldom still measures its
// budget and learns its coordinate (it reads the probed peer's fresh),
// and reads less.
func TestRunWithASeldomFleetView(t *testing.T) {
	cfg := small()
	if coord.FleetViewEvery(cfg.Relays) == 10*time.Minute {
		t.Fatal("the small world's default fleet view is already every 10 minutes")
	}
	cfg.FleetViewEvery = 10 * time.Minute
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rep.ProbesPerMin-12) > 0.01 || rep.CoordErrMedian <= 0 || rep.CoordErrMedian > 0.5 {
		t.Errorf("probes a relay a minute %.3f, coordinate error %.3f: want 12, and learning", rep.ProbesPerMin, rep.CoordErrMedian)
	}
	if want := float64(rep.AliveRelays*FleetViewBytesPerRelay) / 10; math.Abs(rep.FleetViewBytesPerMin-want) > 1e-6 {
		t.Errorf("fleet view bytes a relay a minute %.0f, want %.0f", rep.FleetViewBytesPerMin, want)
	}
}

func TestRunIsFixedBySeed(t *testing.T) {
	a, err := Run(context.Background(), small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Report{a, b} {
		untimed(&r.Plans)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two runs of one seed differ:\n%+v\n%+v", *a, *b)
	}
}

// untimed zeroes what is measured, not modelled: compute and wall time.
func untimed(p *Plans) {
	p.ComputeMsMedian, p.ComputeMsP95, p.WallMsMedian, p.WallMsP95, p.WallMsMedianCI95 = 0, 0, 0, 0, [2]float64{}
	p.WithReadMsMedian, p.WithReadMsMedianCI95 = 0, [2]float64{}
	p.ReplanWallMsMedian, p.ReplanWallMsP95 = 0, 0
}

// Variants plan the same pairs with the same probe noise as the run's own
// configuration: one that is that configuration reports the same plans,
// and one that plans otherwise reports its own.
func TestVariantsPlanTheSamePairs(t *testing.T) {
	cfg := small()
	cfg.Replan = true
	noRounds := cfg.Shortlist
	noRounds.Rounds = -1
	cfg.Variants = []Variant{{Name: "same", Planning: cfg.Planning}, {Name: "no rounds", Planning: Planning{Shortlist: noRounds}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Variants) != 2 || rep.Variants[0].Name != "same" || rep.Variants[1].Name != "no rounds" {
		t.Fatalf("variants %+v: want same, then no rounds", rep.Variants)
	}
	base, same, other := rep.Plans, rep.Variants[0].Plans, rep.Variants[1].Plans
	untimed(&base)
	untimed(&same)
	untimed(&other)
	if base != same {
		t.Errorf("the run's own configuration as a variant planned otherwise:\n%+v\n%+v", base, same)
	}
	if other.Count != base.Count || other.RoundsMedian >= base.RoundsMedian || other.ProbesMedian >= base.ProbesMedian {
		t.Errorf("without rounds: %d plans in %.0f rounds and %.0f probes; with: %d in %.0f and %.0f",
			other.Count, other.RoundsMedian, other.ProbesMedian, base.Count, base.RoundsMedian, base.ProbesMedian)
	}
}

func TestRunAppliesChurn(t *testing.T) {
	cfg := small()
	cfg.World = netsim.Config{FailPerHour: 2, JoinPerHour: 6, InitialDownShare: 0.3}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d alive at the end; %d joined and checked a minute later: median error %.3f", rep.AliveRelays, rep.Relays, rep.Joined, rep.JoinedErrMedian)
	// About a quarter fail in 10 minutes at 2 an hour; dead relays do
	// not probe.
	if rep.AliveRelays >= rep.Relays || rep.ProbesPerMin >= 12 {
		t.Errorf("with churn: %d of %d alive, %.2f probes a minute", rep.AliveRelays, rep.Relays, rep.ProbesPerMin)
	}
	// Relays that were down join (a new relayd each) and have placed
	// themselves a minute later: not the error of no coordinate (1).
	if rep.Joined == 0 || rep.JoinedErrMedian >= 1 || rep.JoinedErrMedian <= 0 {
		t.Errorf("joined %d, their error a minute later %.3f", rep.Joined, rep.JoinedErrMedian)
	}
}

// Rejoin restarts its relays a minute before the plans, and plans only
// pairs that need them; at the warm-up's length it restarts none and plans
// the same pairs.
func TestRunRejoinRestartsRelays(t *testing.T) {
	cfg := small()
	cfg.Rejoin = 40
	restarted, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RejoinAgo = cfg.Warmup
	control, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Run(context.Background(), small(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted: %d of %d relays (%d cities) %.0f s before, coordinate error %.3f, %d pairs of %d drawn, %.2f within 10 %%; control: %d, %.3f, %.2f; without: %.3f, %.2f",
		restarted.Rejoined, restarted.RejoinedRelays, restarted.RejoinedCities, restarted.RejoinedAgoS, restarted.CoordErrMedian, restarted.Plans.Count, restarted.RejoinDrawn, restarted.Plans.Within10,
		control.Rejoined, control.CoordErrMedian, control.Plans.Within10, plain.CoordErrMedian, plain.Plans.Within10)
	// Whole cities: 40 relays or a few more.
	if set := restarted.RejoinedRelays; set < 40 || set > 50 || restarted.Rejoined != set || restarted.RejoinedAgoS != 60 || control.Rejoined != 0 || control.RejoinedRelays != set {
		t.Errorf("restarted %d of %d relays %.0f s before, control %d of %d: want 40 to 50, all of them, 60 s, and none of the same", restarted.Rejoined, set, restarted.RejoinedAgoS, control.Rejoined, control.RejoinedRelays)
	}
	// Half the fleet a minute old: the coordinates are worse. Not
	// restarted, the fleet is the plain run's.
	if restarted.CoordErrMedian <= control.CoordErrMedian || control.CoordErrMedian != plain.CoordErrMedian {
		t.Errorf("coordinate error %.3f with half the relays a minute old, %.3f without, %.3f in a plain run: want the first higher, the others the same", restarted.CoordErrMedian, control.CoordErrMedian, plain.CoordErrMedian)
	}
	// Only pairs that need the restarted relays are planned: more were
	// drawn, the same in both runs.
	if restarted.Plans.Count != cfg.Pairs || restarted.RejoinDrawn <= cfg.Pairs || control.RejoinDrawn != restarted.RejoinDrawn || plain.RejoinDrawn != 0 {
		t.Errorf("%d pairs planned of %d drawn, control %d drawn, a plain run %d: want %d of more, the same, none", restarted.Plans.Count, restarted.RejoinDrawn, control.RejoinDrawn, plain.RejoinDrawn, cfg.Pairs)
	}
}

// threeRelays is a world of three relays, all alive, with a client and a
// destination drawn from it, and the relays' index by name.
func threeRelays(t *testing.T) (world *netsim.World, client, dst netsim.Point, relays []*relay, index map[string]int) {
	t.Helper()
	world, err := netsim.NewWorld(netsim.Config{Relays: 3}, 5)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(5, 5))
	client, dst = world.RandomEndpoint(rnd), world.RandomServer(rnd)
	relays = []*relay{{name: "r0", alive: true}, {name: "r1", alive: true}, {name: "r2", alive: true}}
	index = map[string]int{"r0": 0, "r1": 1, "r2": 2}
	return world, client, dst, relays, index
}

// A round's modelled time: its requests start in order, at most inFlight
// at a time, and the round ends with the last; the first request to a
// relay's admin API pays for its connection (TCP and TLS handshakes); a
// relay's probes of a round are one request; this host's probe of a relay
// it has no connection to opens one, and holds its slot till the relay's
// windows are read over it.
func TestProberWallCountsWavesAndConnections(t *testing.T) {
	world, client, dst, relays, index := threeRelays(t)
	newProber := func(inFlight int) *prober {
		return &prober{world: world, relays: relays, index: index, client: client, dst: dst,
			inFlight: inFlight, seed: 1, readyMs: map[string]float64{}, setupRTTs: AdminSetupRTTs}
	}
	// connected has a connection up to every relay.
	connected := func(inFlight int) *prober {
		p := newProber(inFlight)
		for _, r := range relays {
			p.readyMs[r.name] = 0
		}
		return p
	}
	rtt := func(a, b netsim.Point) float64 { return world.RTTMs(a, b) }
	own := []shortlist.Probe{{From: "client", To: "r0"}, {From: "client", To: "r1"}, {From: "client", To: "r2"}}
	ms := []float64{rtt(client, world.Relay(0)), rtt(client, world.Relay(1)), rtt(client, world.Relay(2))}
	for _, tc := range []struct {
		inFlight int
		want     float64
	}{
		{1, ms[0] + ms[1] + ms[2]},                   // one after another
		{3, math.Max(ms[0], math.Max(ms[1], ms[2]))}, // all at once
		{2, math.Max(ms[0]+ms[2], ms[1])},            // r2 takes r0's slot when r0 is done, if first
	} {
		if tc.inFlight == 2 && ms[1] < ms[0] {
			tc.want = math.Max(ms[1]+ms[2], ms[0])
		}
		p := connected(tc.inFlight)
		if _, err := p.Probe(context.Background(), own); err != nil {
			t.Fatal(err)
		}
		if math.Abs(p.wallMs-tc.want) > 1e-9 {
			t.Errorf("%d in flight: wall %.3f ms, want %.3f", tc.inFlight, p.wallMs, tc.want)
		}
	}
	// Without connections, this host's probes open them: each probe
	// answers after its handshake, its slot is held for the connection's
	// handshakes and the read after them, and the connection is up for
	// the next round after its handshakes.
	{
		p := newProber(1)
		if _, err := p.Probe(context.Background(), own[:2]); err != nil {
			t.Fatal(err)
		}
		want := (1+AdminSetupRTTs)*ms[0] + ms[1]
		if math.Abs(p.wallMs-want) > 1e-9 {
			t.Errorf("probes that open connections, one in flight: wall %.3f ms, want %.3f (the second waits for the first's read)", p.wallMs, want)
		}
		opened := AdminSetupRTTs*ms[1] + (1+AdminSetupRTTs)*ms[0]
		if got := p.readyMs["r1"]; math.Abs(got-opened) > 1e-9 {
			t.Errorf("r1's connection up at %.3f ms, want %.3f", got, opened)
		}
		// Asking r0 now costs a round trip and its probe: its connection
		// is up, the slot free when r1's read is done.
		before := p.wallMs
		if _, err := p.Probe(context.Background(), []shortlist.Probe{{From: "r0", To: "destination"}}); err != nil {
			t.Fatal(err)
		}
		free := (1+AdminSetupRTTs)*ms[0] + (1+AdminSetupRTTs)*ms[1]
		want = max(before, free) + ms[0] + rtt(world.Relay(0), dst)
		if math.Abs(p.wallMs-want) > 1e-9 {
			t.Errorf("asking r0 after its connection was opened: wall %.3f ms, want %.3f", p.wallMs, want)
		}
	}
	// r0 probes the destination: asking it costs 1 + AdminSetupRTTs round
	// trips the first time (1 + AdminSetupRTTsFastOpen with TCP Fast
	// Open), one after.
	for _, setup := range []float64{AdminSetupRTTs, AdminSetupRTTsFastOpen} {
		p := newProber(8)
		p.setupRTTs = setup
		ask := []shortlist.Probe{{From: "r0", To: "destination"}}
		for i, rtts := range []float64{1 + setup, 1} {
			before := p.wallMs
			if _, err := p.Probe(context.Background(), ask); err != nil {
				t.Fatal(err)
			}
			want := rtts*rtt(client, world.Relay(0)) + rtt(world.Relay(0), dst)
			if got := p.wallMs - before; math.Abs(got-want) > 1e-9 {
				t.Errorf("setup %v round trips, ask %d: %.3f ms, want %.3f", setup, i+1, got, want)
			}
		}
	}
	// A relay's probes of a round are one request: r0 probes r1 and r2
	// at once, one slot for the round trip of asking and the longer.
	p := newProber(1)
	two := []shortlist.Probe{{From: "r0", To: "r1"}, {From: "r0", To: "r2"}}
	if _, err := p.Probe(context.Background(), two); err != nil {
		t.Fatal(err)
	}
	want := (1+AdminSetupRTTs)*rtt(client, world.Relay(0)) + math.Max(rtt(world.Relay(0), world.Relay(1)), rtt(world.Relay(0), world.Relay(2)))
	if math.Abs(p.wallMs-want) > 1e-9 {
		t.Errorf("two probes by r0: %.3f ms, want %.3f", p.wallMs, want)
	}
}

// A variant with TCP Fast Open plans the same pairs with its new
// connections a round trip shorter: its first round (the landmarks',
// every request over a new connection) is shorter.
func TestFastOpenShortensTheFirstRound(t *testing.T) {
	cfg := small()
	cfg.Variants = []Variant{{Name: "tfo", Planning: Planning{Shortlist: cfg.Shortlist, FastOpen: true}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, tfo := rep.Plans.FirstRoundMsMedian, rep.Variants[0].Plans.FirstRoundMsMedian
	t.Logf("the landmarks' round: %.0f ms, with Fast Open %.0f ms", base, tfo)
	// Three round trips to a landmark and its probe become two and the
	// probe: between half and all of the round.
	if !(tfo < 0.95*base && tfo > 0.5*base) {
		t.Errorf("the landmarks' round with Fast Open %.0f ms against %.0f: want a round trip in three less", tfo, base)
	}
}

// A variant that asks each relay's first request in one UDP datagram
// plans with the landmarks' round two round trips shorter a landmark: a
// third of the round and the probe, where TCP Fast Open saves one.
func TestUDPAskShortensTheFirstRound(t *testing.T) {
	cfg := small()
	cfg.Variants = []Variant{
		{Name: "udp", Planning: Planning{Shortlist: cfg.Shortlist, UDPAsk: true}},
		{Name: "tfo", Planning: Planning{Shortlist: cfg.Shortlist, FastOpen: true}},
	}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, udp, tfo := rep.Plans.FirstRoundMsMedian, rep.Variants[0].Plans.FirstRoundMsMedian, rep.Variants[1].Plans.FirstRoundMsMedian
	t.Logf("the landmarks' round: %.0f ms, asked over UDP %.0f ms, with Fast Open %.0f ms", base, udp, tfo)
	if !(udp < tfo && udp < 0.7*base && udp > 0.2*base) {
		t.Errorf("the landmarks' round asked over UDP %.0f ms against %.0f (Fast Open %.0f): want two round trips in three less", udp, base, tfo)
	}
	// The first cut's ends: asked alone once the landmarks' asks were
	// acknowledged, and this host's probes open no connection beside.
	if s, su := rep.Plans.SecondRoundMsMedian, rep.Variants[0].Plans.SecondRoundMsMedian; !(su < 0.8*s) {
		t.Errorf("the first cut's ends asked over UDP %.0f ms against %.0f: want a fifth less at least", su, s)
	}
	if q, qu := rep.Plans.Within10, rep.Variants[0].Plans.Within10; qu < q-0.1 {
		t.Errorf("plans within 10 %%: %.2f asked over UDP against %.2f", qu, q)
	}
}

// Asks over UDP lost as the path's packets are (here a tenth each way):
// the relays whose ask, acknowledgement or reply was lost are asked over
// HTTPS, so the plans are as good, and take longer than when every ask
// gets through.
func TestLostUDPAsksAreAskedOverHTTPS(t *testing.T) {
	cfg := small()
	cfg.World.LossBase, cfg.World.LossPer100Ms = 0.1, -1
	cfg.UDPAsk = true
	cfg.Variants = []Variant{{Name: "lost", Planning: Planning{Shortlist: cfg.Shortlist, UDPAsk: true, UDPLoss: true}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, lost := rep.Plans, rep.Variants[0].Plans
	t.Logf("every ask through: within 10 %% %.2f, wall %.0f ms (p95 %.0f); asks lost: %.2f, %.0f ms (p95 %.0f)",
		all.Within10, all.WallMsMedian, all.WallMsP95, lost.Within10, lost.WallMsMedian, lost.WallMsP95)
	if lost.Within10 < all.Within10-0.1 || lost.ChainShare < all.ChainShare-0.1 {
		t.Errorf("asks lost: within 10 %% %.2f and chains %.2f, against %.2f and %.2f: lost asks lost their probes",
			lost.Within10, lost.ChainShare, all.Within10, all.ChainShare)
	}
	if !(lost.WallMsMedian > all.WallMsMedian) {
		t.Errorf("asks lost: a plan's wall %.0f ms against %.0f: want longer (each lost ask waits, then HTTPS)", lost.WallMsMedian, all.WallMsMedian)
	}
}

// Destinations at relays' hosts, placed by the relays' coordinates: the
// landmarks' round is the client's own handshakes, one round trip to the
// farthest landmark, not three and its probe of the destination; placed
// from the landmarks' probes of it instead, as any host (--fit-dst
// --relays-probe-dst), the same pairs' round is as for any host.
func TestDestinationsAtRelaysSkipTheLandmarksAsks(t *testing.T) {
	cfg := small()
	cfg.DstRelays = true
	cfg.Variants = []Variant{{Name: "fit", Planning: Planning{Shortlist: cfg.Shortlist, FitDst: true, RelaysProbeDst: true}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	placed, fitted := rep.Plans, rep.Variants[0].Plans
	t.Logf("the landmarks' round: %.0f ms by the relay's coordinate, %.0f ms fitted; within 10 %%: %.0f %% and %.0f %%",
		placed.FirstRoundMsMedian, fitted.FirstRoundMsMedian, 100*placed.Within10, 100*fitted.Within10)
	if !(placed.FirstRoundMsMedian < 0.6*fitted.FirstRoundMsMedian) {
		t.Errorf("the landmarks' round placed by the relay's coordinate %.0f ms against %.0f fitted: want under 0.6 of it",
			placed.FirstRoundMsMedian, fitted.FirstRoundMsMedian)
	}
	if placed.ChainShare == 0 || placed.QualityMedian > 1+1e-9 {
		t.Errorf("plans %+v: want chains, none better than the optimum", placed)
	}
}

// The destination's relay probes the first cut's ends (a request to it for
// every probe.MaxTargets of them), where each relay of the first cut would
// be asked over a new connection: that round is shorter, and this host's
// probes of the first cut open the connections the later rounds ask over.
func TestTheDestinationsRelayProbesTheFirstCut(t *testing.T) {
	cfg := small()
	cfg.DstRelays = true
	cfg.Variants = []Variant{{Name: "relays", Planning: Planning{Shortlist: cfg.Shortlist, RelaysProbeDst: true}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst, relays := rep.Plans, rep.Variants[0].Plans
	t.Logf("the first cut's ends: %.0f ms by the destination's relay, %.0f ms by the relays; wall %.0f and %.0f ms; within 10 %%: %.0f %% and %.0f %%",
		dst.SecondRoundMsMedian, relays.SecondRoundMsMedian, dst.WallMsMedian, relays.WallMsMedian, 100*dst.Within10, 100*relays.Within10)
	if !(dst.SecondRoundMsMedian < 0.7*relays.SecondRoundMsMedian) {
		t.Errorf("the first cut's ends by the destination's relay %.0f ms against %.0f by the relays: want under 0.7 of it",
			dst.SecondRoundMsMedian, relays.SecondRoundMsMedian)
	}
	// The wall time counts the planning code's compute time, measured on
	// this machine, and the rounds start when it ends: under -race on a
	// busy machine its noise is larger than the gain. The rounds' own
	// times are on the model's clock (compute aside), fixed by the seed.
	dstRounds := dst.FirstRoundMsMedian + dst.SecondRoundMsMedian + dst.LaterRoundMsMedian
	relaysRounds := relays.FirstRoundMsMedian + relays.SecondRoundMsMedian + relays.LaterRoundMsMedian
	t.Logf("rounds (medians, summed): %.0f and %.0f ms", dstRounds, relaysRounds)
	if !(dstRounds < relaysRounds) {
		t.Errorf("a plan's rounds %.0f ms with the destination's probes against %.0f: want shorter", dstRounds, relaysRounds)
	}
	if dst.ChainShare == 0 || dst.QualityMedian > 1+1e-9 {
		t.Errorf("plans %+v: want chains, none better than the optimum", dst)
	}
}

// A deadline reads the model's clock (the prober is a shortlist.Clock):
// plans stop their rounds at it, and take no longer than without it.
func TestADeadlineStopsPlansOnTheModelsClock(t *testing.T) {
	cfg := small()
	short := cfg.Shortlist
	short.Deadline = 1200 * time.Millisecond
	cfg.Variants = []Variant{{Name: "deadline", Planning: Planning{Shortlist: short}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	free, bound := rep.Plans, rep.Variants[0].Plans
	t.Logf("wall %.0f ms without a deadline, %.0f ms with 1.2 s (%.0f %% stopped at it); within 10 %%: %.0f %% and %.0f %%",
		free.WallMsMedian, bound.WallMsMedian, 100*bound.DeadlinedShare, 100*free.Within10, 100*bound.Within10)
	if free.DeadlinedShare != 0 || bound.DeadlinedShare == 0 {
		t.Errorf("stopped at the deadline: %.2f without one, %.2f with 1.2 s: want none, and some", free.DeadlinedShare, bound.DeadlinedShare)
	}
	if bound.WallMsMedian > free.WallMsMedian {
		t.Errorf("wall %.0f ms with a deadline against %.0f without: want no longer", bound.WallMsMedian, free.WallMsMedian)
	}
}

// A later quorum ends the rounds after a plan's first two sooner on the
// model's clock, and leaves the first two as they were.
func TestALaterQuorumShortensTheLaterRounds(t *testing.T) {
	cfg := small()
	cfg.Shortlist.LaterQuorum = 0.9
	lower := cfg.Shortlist
	lower.LaterQuorum = 0.5
	cfg.Variants = []Variant{{Name: "later", Planning: Planning{Shortlist: lower}}}
	rep, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, later := rep.Plans, rep.Variants[0].Plans
	t.Logf("each later round %.0f ms at 0.9, %.0f ms at 0.5", base.LaterRoundMsMedian, later.LaterRoundMsMedian)
	if !(later.LaterRoundMsMedian < base.LaterRoundMsMedian) {
		t.Errorf("later rounds %.0f ms at 0.5 against %.0f: want shorter", later.LaterRoundMsMedian, base.LaterRoundMsMedian)
	}
	if later.FirstRoundMsMedian != base.FirstRoundMsMedian || later.SecondRoundMsMedian != base.SecondRoundMsMedian {
		t.Errorf("the first two rounds %.0f and %.0f ms at 0.5 against %.0f and %.0f: want them as they were",
			later.FirstRoundMsMedian, later.SecondRoundMsMedian, base.FirstRoundMsMedian, base.SecondRoundMsMedian)
	}
}

// A round waits for an awaited probe whatever its quorum, and a pair
// probed again draws handshakes of its own.
func TestProberAwaitsAndDrawsAfresh(t *testing.T) {
	world, client, dst, relays, index := threeRelays(t)
	newProber := func() *prober {
		p := &prober{world: world, relays: relays, index: index, client: client, dst: dst,
			inFlight: 3, seed: 1, readyMs: map[string]float64{}, setupRTTs: AdminSetupRTTs,
			shortlist: shortlist.Config{FirstQuorum: 0.3}}
		for _, r := range relays {
			p.readyMs[r.name] = 0
		}
		return p
	}
	longest, shortest := 0, 0
	for i := range relays {
		if world.RTTMs(client, world.Relay(i)) > world.RTTMs(client, world.Relay(longest)) {
			longest = i
		}
		if world.RTTMs(client, world.Relay(i)) < world.RTTMs(client, world.Relay(shortest)) {
			shortest = i
		}
	}
	probes := func(awaited bool) []shortlist.Probe {
		var out []shortlist.Probe
		for i, r := range relays {
			out = append(out, shortlist.Probe{From: "client", To: r.name, Awaited: awaited && i == longest})
		}
		return out
	}
	for _, awaited := range []bool{false, true} {
		p := newProber()
		got, err := p.Probe(context.Background(), probes(awaited))
		if err != nil {
			t.Fatal(err)
		}
		if pending := shortlist.Pending(got[longest]); pending == awaited {
			t.Errorf("awaited %v: the longest probe pending %v, want %v", awaited, pending, !awaited)
		}
		want := world.RTTMs(client, world.Relay(shortest)) // the quorum: one of three
		if awaited {
			want = world.RTTMs(client, world.Relay(longest))
		}
		if math.Abs(p.wallMs-want) > 1e-9 {
			t.Errorf("awaited %v: the round ended at %.3f ms, want %.3f", awaited, p.wallMs, want)
		}
	}
	p := newProber()
	one := []shortlist.Probe{{From: "client", To: "r0", Awaited: true}}
	first, err := p.Probe(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Probe(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	if first[0] == again[0] {
		t.Errorf("r0 probed twice read %.4f ms both times: a probe again drew the first one's handshake", first[0])
	}
}
