// Package fleetsim runs relaymesh's own measurement and planning code
// against a modelled internet (pkg/sim/netsim) of hundreds to thousands of
// relays, and reports what the fleet would cost and how good its plans
// would be.
//
// Every relay is a coord.Node, the code relayd runs: it probes whom
// NextTarget says, once per coord interval, and feeds the modelled RTT to
// Observe with the peer's coordinate as last published. Relays publish
// their coordinate and their own exact measurements every PublishEvery.
// Then, for random (client, destination) pairs, shortlist.Plan, the code
// relayctl plan runs, plans each path with targeted probes answered by the
// model, and the chosen chain is judged by its true bottleneck (its
// longest segment under the model's true RTTs) against the best any chain
// of the alive relays could have (a minimax dynamic program over all of
// them).
//
// Nothing here reads a clock or the network: a run is fixed by its Config
// (seed included), except the plan's compute time, which is measured.
package fleetsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/netsim"
	"github.com/relaymesh/relaymesh/planner"
)

// Wire costs, bytes: what one probe and one published record cost on the
// wire, headers included, both directions together.
const (
	// ProbeBytes is one TCP handshake and close (SYN, SYN-ACK, ACK, FIN,
	// ACK, FIN, ACK: 7 packets of about 64 bytes), as pkg/probe counts it.
	ProbeBytes = 450
	// CoordinateBytes is one relay's coordinate as published (JSON: 8
	// floats, error, height, adjustment, name, age) plus its share of the
	// request that carries it.
	CoordinateBytes = 300
	// CoordinateReadBytes is a relay's read of the coordinate of the peer
	// it probes, alone, at each probe: the request and Consul's answer,
	// headers included, as measured against Consul 1.14.8
	// (docs/defaults.md#what-a-registry-read-costs).
	CoordinateReadBytes = 1000
	// MeasurementBytes is one exact pair as published (peer name, median,
	// min, samples, failures, age).
	MeasurementBytes = 90
	// FleetViewBytesPerRelay is each relay's share of a relay's view of
	// the fleet: its coordinate and its instance with health, in the
	// whole reads of each (gzip on the wire), measured against Consul
	// 1.14.8 (make bench-consul-costs;
	// docs/defaults.md#what-a-registry-read-costs).
	FleetViewBytesPerRelay = 295
)

// Config is one simulation. The zero value of each field is its default.
type Config struct {
	Relays int    // relays in the world; default 1000
	Seed   uint64 // the world's and the run's seed
	// Warmup is how long the relays measure before planning starts,
	// simulated time; default 30 min.
	Warmup time.Duration
	// Pairs is how many random (client, destination) pairs are planned;
	// default 200.
	Pairs int
	// PublishEvery is how often a relay publishes its coordinate and
	// exact pairs; default 30 s.
	PublishEvery time.Duration
	// FleetViewEvery is how often a relay reads every relay's published
	// coordinate: its view of the fleet, from which it chooses the peers
	// it probes (coord.Node.NextTarget). The coordinate of the peer it
	// probes it reads fresh, as published, for each probe. Default
	// coord.FleetViewEvery(Relays), as relayd on Consul reads them.
	FleetViewEvery time.Duration
	MaxHops        int // default planner.DefaultMaxHops
	// WindowBytes is the client's and the destination's receive window,
	// and every relay's unless MixedWindows; default
	// planner.DefaultWindowBytes (with equal windows the plans depend on
	// RTTs only), or with MixedWindows a stock host's (mixedRmem's first).
	WindowBytes int64
	// MixedWindows gives each relay the receive window of one of three
	// hosts' buffers (mixedRmem), as the planner learns them from
	// /v1/info: the chain fastest in throughput is then not always the
	// one with the lowest bottleneck RTT, and plans are judged by both.
	MixedWindows bool
	Coord        coord.Config
	World        netsim.Config // Relays is set from Relays
	// Planning is how the pairs are planned (Variants plan them other
	// ways too).
	Planning
	// Replan plans each pair a second time, as relayctl connect replans
	// a destination: over the admin connections the first plan opened
	// (its admin client keeps idle connections 90 s, longer than its
	// replan interval of a minute) and from the first plan's
	// shortlist.Prior, with fresh probe noise. The report's Replan*
	// figures are those plans'.
	Replan bool
	// ReplanFresh makes Replan's second plans without the Prior (over
	// the kept connections still): what the Prior saves.
	ReplanFresh bool
	// ReplanCold makes Replan's second plans over new connections, as
	// a relayctl plan run later in a new process makes them from the
	// Prior its last run kept (--plans-dir).
	ReplanCold bool
	// DstRelays makes each pair's destination a random alive relay's
	// host (relayctl plan --dst REGION), placed by that relay's published
	// coordinate (shortlist.Input.DestinationCoord) unless FitDst, and
	// whose relay makes the probes to it (shortlist.Input.DestinationProbes)
	// unless RelaysProbeDst: its landmarks' round is then the client's
	// probes alone, and the first cut's ends are the destination's probes.
	// Default: a random server, placed by the landmarks.
	DstRelays bool
	// Rejoin restarts at least this many relays RejoinAgo before the
	// warm-up ends, each a new relayd (no coordinate, no measurements):
	// every relay of random cities, until there are that many. The
	// pairs planned are then only those that need one of them: whose
	// every chain within 10 % of the optimum goes through one (random
	// pairs drawn until Pairs of them do, Report.RejoinDrawn). Whole
	// cities, because a relay's city-mates stand in for it: of 400
	// random pairs, one needed 100 random relays of 1,000. A relay that
	// joins should be usable in plans within a minute. With RejoinAgo at
	// Warmup or more they are not restarted: the same relays and pairs,
	// as placed as the rest.
	Rejoin int
	// RejoinAgo is how long before the warm-up's end Rejoin's relays
	// restart; default 1 min.
	RejoinAgo time.Duration
	// Variants plan the same pairs again, each its own way, over the
	// same warmed-up fleet: the report's Variants, side by side with
	// Plans. Each pair is planned by Planning and then by each variant in
	// turn, so the machine's speed drifting during a run weighs on them
	// alike.
	Variants []Variant
}

// Planning is how a run plans its pairs: the shortlist's configuration,
// and what the planning host and the destinations can do.
type Planning struct {
	Shortlist shortlist.Config
	// FastOpen models a host that holds a TCP Fast Open cookie for every
	// relay (it asked each of them before, in an earlier plan; the kernel
	// keeps the cookies across processes) and relays that accept Fast
	// Open (net.ipv4.tcp_fastopen=3): a new admin connection then costs
	// AdminSetupRTTsFastOpen round trips before its request, not
	// AdminSetupRTTs. An upper bound for a host that has planned before:
	// it holds cookies only for the relays it asked.
	FastOpen bool
	// UDPAsk asks relays in one UDP datagram (relayctl plan --udp-ask,
	// the default; pkg/udpask): one round trip and the relay's probes.
	// Until an ask of the plan has been acknowledged (in the model: after
	// its first round with one), each opens the HTTPS connection beside
	// it and the relay's windows are read over it, in the ask's slot, and
	// so do this host's probes of relays not asked; after, asks go alone,
	// their windows with the reply, and a relay with an HTTPS connection
	// up is asked over it. An ask's slot is free once it is acknowledged
	// (and the read beside it has answered), and this host's probe of a
	// relay asked over UDP in the same round is that acknowledgement. Every
	// ask gets through in the model unless UDPLoss.
	UDPAsk bool
	// UDPLoss, with UDPAsk: asks and their answers are lost as the path's
	// packets are (netsim's loss rate, each way), and the plan goes on as
	// relayctl's does: an ask not acknowledged is asked over HTTPS once
	// the connection opening beside it is up, or (alone) after the ask's
	// wait (twice the plan's slowest acknowledgement and 50 ms, within
	// 100 ms and the survey's timeout), over a new connection; this host's
	// probe of that relay is then made as ever; a reply lost after its
	// acknowledgement is asked over HTTPS once it is overdue (twice the
	// plan's slowest reply after its acknowledgement and 50 ms, within
	// 100 ms and the relay's probes' bound: the survey's timeout, twice
	// with one handshake; that bound before any reply).
	UDPLoss bool
	// FitDst places a relay-hosted destination (Config.DstRelays) from
	// the landmarks, as any host, not by its relay's coordinate.
	FitDst bool
	// RelaysProbeDst has each relay of a relay-hosted destination's
	// (Config.DstRelays) first cut probe it, as for any host, where
	// relayctl asks the destination's relay to probe them.
	RelaysProbeDst bool
}

// Variant is a way of planning the pairs beside Config.Planning.
type Variant struct {
	Name string
	Planning
}

func (c Config) withDefaults() (Config, error) {
	c.Relays = cmp.Or(c.Relays, 1000)
	c.Warmup = cmp.Or(c.Warmup, 30*time.Minute)
	c.Pairs = cmp.Or(c.Pairs, 200)
	c.PublishEvery = cmp.Or(c.PublishEvery, 30*time.Second)
	c.FleetViewEvery = cmp.Or(c.FleetViewEvery, coord.FleetViewEvery(c.Relays))
	c.MaxHops = cmp.Or(c.MaxHops, planner.DefaultMaxHops)
	c.RejoinAgo = cmp.Or(c.RejoinAgo, time.Minute)
	if c.MixedWindows && c.WindowBytes == 0 {
		// The ends are hosts on a stock kernel, as half the relays are:
		// one ratio of window to buffer throughout.
		c.WindowBytes = mixedRmem[0].windowBytes()
	}
	c.WindowBytes = cmp.Or(c.WindowBytes, planner.DefaultWindowBytes)
	var err error
	if c.Coord, err = c.Coord.WithDefaults(); err != nil {
		return c, err
	}
	switch {
	case c.Relays < 2:
		return c, fmt.Errorf("relays %d: want at least 2", c.Relays)
	case c.Warmup < 0, c.PublishEvery < 0, c.FleetViewEvery < 0:
		return c, errors.New("warmup, publish and fleet view intervals: want durations >= 0")
	case c.Pairs < 0, c.MaxHops < 1:
		return c, errors.New("pairs >= 0, max hops >= 1")
	case c.Rejoin < 0 || c.Rejoin > c.Relays, c.RejoinAgo < 0:
		return c, fmt.Errorf("rejoin %d relays %v before the end: want 0 to %d relays and a duration >= 0", c.Rejoin, c.RejoinAgo, c.Relays)
	}
	c.World.Relays = c.Relays
	return c, nil
}

// Report is what a run found.
type Report struct {
	Relays       int     `json:"relays"`
	WarmupMin    float64 `json:"warmup_min"`
	AliveRelays  int     `json:"alive_relays"` // at the end of the warm-up
	ProbesPerMin float64 `json:"probes_per_relay_min"`
	// BytesPerMin is a relay's measurement traffic per minute, bytes:
	// probes sent and answered, its publications, and the coordinates it
	// reads of the peers it probes.
	BytesPerMin float64 `json:"bytes_per_relay_min"`
	// FleetViewBytesPerMin is a relay's reads of every relay's coordinate
	// and instance (Config.FleetViewEvery) per minute, bytes: registry
	// traffic that grows with the fleet, apart from BytesPerMin.
	FleetViewBytesPerMin float64 `json:"fleet_view_bytes_per_relay_min"`
	// CoordErrMedian and CoordErrP90 are |estimate − true| / true over
	// random pairs of alive relays.
	CoordErrMedian float64 `json:"coord_rel_err_median"`
	CoordErrP90    float64 `json:"coord_rel_err_p90"`
	TIVShare       float64 `json:"tiv_share"` // pairs with a shorter detour through a relay
	// RegistryReadMs is a planner's read of the registry before each
	// plan (RegistryReadAt the alive relays), ms: until the plan starts;
	// RegistryPairsMs until the measured pairs are in, which the plan
	// reads after its first round. A plan's wall time includes neither;
	// Plans.WithReadMsMedian does.
	RegistryReadMs  float64 `json:"registry_read_ms"`
	RegistryPairsMs float64 `json:"registry_pairs_ms"`
	// Joined counts the relays that joined (churn, World's JoinPerHour)
	// early enough to be checked a minute later; JoinedErrMedian is the
	// median, over them, of their published coordinate's median relative
	// error to 100 random alive relays 60 s after joining (a new relayd:
	// its coordinate starts at the origin).
	Joined          int     `json:"joined"`
	JoinedErrMedian float64 `json:"joined_coord_rel_err_median_60s"`
	// RejoinedRelays and RejoinedCities are Config.Rejoin's relays and
	// their cities; Rejoined counts those it restarted, RejoinedAgoS
	// seconds before the plans (0: none restarted).
	RejoinedRelays int     `json:"rejoin_relays,omitempty"`
	RejoinedCities int     `json:"rejoin_cities,omitempty"`
	Rejoined       int     `json:"rejoined,omitempty"`
	RejoinedAgoS   float64 `json:"rejoined_ago_s,omitempty"`
	// RejoinDrawn counts the random pairs drawn to find the Pairs that
	// need Config.Rejoin's relays.
	RejoinDrawn int   `json:"rejoin_drawn,omitempty"`
	Plans       Plans `json:"plans"`
	// Variants are Config.Variants' plans of the same pairs, in order.
	Variants []VariantPlans `json:"variants,omitempty"`
}

// VariantPlans are one variant's plans.
type VariantPlans struct {
	Name  string `json:"name"`
	Plans Plans  `json:"plans"`
}

// Plans summarises the planned pairs.
type Plans struct {
	Count int `json:"count"`
	// Quality is the chosen plan's true rate over the best possible
	// (optimum bottleneck RTT / chosen bottleneck RTT: 1 = optimal).
	QualityMedian float64 `json:"quality_median"`
	QualityP5     float64 `json:"quality_p5"`
	Within10      float64 `json:"within_10pct"` // share of plans with quality >= 0.9
	// Within10CI95 is Within10's 95 % Wilson interval over these plans:
	// what the pairs drawn leave uncertain, for this world and seed.
	Within10CI95 [2]float64 `json:"within_10pct_ci95"`
	// Within15 and Within20 are the shares with quality >= 0.85 and 0.8:
	// whether the plans outside 10 % miss by little or by much.
	Within15 float64 `json:"within_15pct"`
	Within20 float64 `json:"within_20pct"`
	// ModelQuality is the chosen plan's rate over the best possible by
	// the planner's model with equal windows (planner.Model: the
	// bottleneck's rate times 1 − RelayOverhead for each relay), under
	// the true RTTs. The planner ranks chains so, and takes the one with
	// fewer relays among chains within its ErrorMargin; a bottleneck a
	// few percent lower through more relays is no faster by that model.
	ModelQualityMedian float64 `json:"model_quality_median"`
	ModelWithin10      float64 `json:"model_within_10pct"` // share of plans with ModelQuality >= 0.9
	// CandidatesWithin10 is the share of plans whose candidates held a
	// chain within 10 % of the optimum (under the true RTTs): what the
	// coordinate search left the measured rounds to find. Within10 can be
	// no higher.
	CandidatesWithin10 float64 `json:"candidates_within_10pct"`
	// TrueChoiceWithin10 is the share of plans for which the planner,
	// given the true RTT of every pair among the plan's candidates and
	// endpoints, chooses a chain within 10 % of the optimum (by its own
	// rule: the fewest relays among chains within its ErrorMargin):
	// what the measured rounds could have chosen with every figure
	// exact. Between it and CandidatesWithin10 is the planner's rule;
	// between it and Within10, the figures the plan had (estimates,
	// probes' noise). TrueChoiceModelWithin10 is the same by the model.
	TrueChoiceWithin10      float64 `json:"true_choice_within_10pct"`
	TrueChoiceModelWithin10 float64 `json:"true_choice_model_within_10pct"`
	// MeasuredChoiceWithin10 is the same share with only the pairs the
	// plan measured (its matrix's), each at its true RTT: between
	// TrueChoiceWithin10 and it are the pairs the rounds did not measure;
	// between it and Within10, the probes' noise.
	MeasuredChoiceWithin10 float64 `json:"measured_choice_within_10pct"`
	// FirstCutWithin10 is the share of plans whose first cut (the relays
	// picked on coordinates, their ends then measured) held such a chain;
	// FirstCutCitiesWithin10 the share whose first cut's cities did, every
	// alive relay of those cities counted: whether a miss is a city the
	// coordinates did not pick or a relay of a city they did.
	FirstCutWithin10       float64 `json:"first_cut_within_10pct"`
	FirstCutCitiesWithin10 float64 `json:"first_cut_cities_within_10pct"`
	ChainShare             float64 `json:"chain_share"` // share of plans that chose a chain
	// OptimumGainMedian is the median of the optimum's rate over direct's.
	OptimumGainMedian float64 `json:"optimum_gain_median"`
	ProbesMedian      float64 `json:"probes_per_plan_median"`
	RoundsMedian      float64 `json:"rounds_median"`
	EstimatedSegments int     `json:"estimated_segments"` // in chosen plans, all pairs together
	// DeadlinedShare is the share of plans whose rounds the shortlist's
	// Deadline stopped.
	DeadlinedShare float64 `json:"deadlined_share,omitempty"`
	// OutOfBudgetShare is the share of plans whose rounds the
	// shortlist's SearchBudget stopped.
	OutOfBudgetShare float64 `json:"out_of_budget_share,omitempty"`
	// SettledShare is the share of plans whose rounds the shortlist's
	// Settle ended.
	SettledShare float64 `json:"settled_share"`
	// ComputeMs is the planning code's own time per plan, milliseconds
	// (measured on this machine), less what a real round's wait would
	// have hidden (shortlist's Stats.Hidden: the relay pairs' costs,
	// computed during the first round); WallMs adds the probes' round trips as
	// the model times them (each round: the slowest probe, asked over the
	// client's path to the relay that makes it, its handshakes back to
	// back as the survey's shortlist asks).
	ComputeMsMedian float64 `json:"compute_ms_median"`
	ComputeMsP95    float64 `json:"compute_ms_p95"`
	WallMsMedian    float64 `json:"wall_ms_median"`
	WallMsP95       float64 `json:"wall_ms_p95"`
	// WallMsMedianCI95 is WallMsMedian's distribution-free 95 % interval
	// (MedianCI95).
	WallMsMedianCI95 [2]float64 `json:"wall_ms_median_ci95"`
	// WithReadMsMedian is the plans' wall time with the registry read
	// before each (Report.RegistryReadMs, RegistryRead.WithPlanMs), and
	// WithReadMsMedianCI95 its 95 % interval.
	WithReadMsMedian     float64    `json:"with_read_ms_median"`
	WithReadMsMedianCI95 [2]float64 `json:"with_read_ms_median_ci95"`
	// Where the modelled wall time goes, ms on the model's clock (compute
	// aside), medians: the first round (the landmarks' and the direct
	// path's probes), the second (the first cut's ends), and any later
	// round (over every later round of every plan).
	FirstRoundMsMedian  float64 `json:"first_round_ms_median"`
	SecondRoundMsMedian float64 `json:"second_round_ms_median"`
	LaterRoundMsMedian  float64 `json:"later_round_ms_median"`
	// Replan* are the second plans of Config.Replan: the share within
	// 10 % of the optimum (by the bottleneck, and by the model as
	// ModelWithin10) and the modelled wall time, milliseconds (0 without
	// Replan).
	ReplanWithin10      float64 `json:"replan_within_10pct,omitempty"`
	ReplanModelWithin10 float64 `json:"replan_model_within_10pct,omitempty"`
	ReplanWallMsMedian  float64 `json:"replan_wall_ms_median,omitempty"`
	ReplanWallMsP95     float64 `json:"replan_wall_ms_p95,omitempty"`
	ReplanProbesMedian  float64 `json:"replan_probes_per_plan_median,omitempty"`
	ReplanRoundsMedian  float64 `json:"replan_rounds_median,omitempty"`
}

type relay struct {
	name  string
	node  *coord.Node
	alive bool
	// published is what readers see: the coordinate and exact pairs as of
	// the last publication.
	coord    *coordinate.Coordinate
	measured []coord.Measurement
	// view is the fleet's coordinates as this relay last read them, at
	// viewAt (Config.FleetViewEvery); nil: not read yet.
	view   []coord.Peer
	viewAt time.Duration
	// since is when its relayd started, simulated time: its coordinate
	// has been measured since (shortlist.Relay.MeasuredFor).
	since time.Duration
	// windowBytes is its receive window (Config.MixedWindows).
	windowBytes int64
}

// pairCase is one (client, destination) pair as the model has it: the
// true RTTs from the client to each relay (to) and from each relay to the
// destination (from), by relay index, and the best any chain could do.
type pairCase struct {
	world       *netsim.World
	relays      []*relay
	index       map[string]int
	truth       *trueMatrix
	client, dst netsim.Point
	to, from    []float64
	directMs    float64
	maxHops     int
	optMs       float64 // the optimum's bottleneck RTT
	optRate     float64 // the optimum's rate by the planner's model
	// recvScale is, by relay index, the client's window over the
	// relay's: a segment's RTT times its receiver's scale is the RTT of a
	// segment as fast with the client's window (all 1 with equal windows).
	recvScale []float64
	hosting   int // the relay whose host is the destination (Config.DstRelays), else -1
}

// pairResult is what one configuration's plan of a pair did.
type pairResult struct {
	quality, modelQuality float64
	chain, candsWithin    bool
	// the planner's choice over the candidates' true RTTs (see Plans)
	trueChoiceWithin, trueChoiceModelWithin bool
	// over the pairs it measured, at their true RTTs (see Plans)
	measuredChoiceWithin bool
	// the first cut's relays', and its cities' (see Plans)
	cutWithin, cutCitiesWithin bool
	gain                       float64 // the optimum's rate over direct's
	probes, rounds             int
	estimated                  int
	deadlined                  bool // the shortlist's Deadline stopped its rounds
	outOfBudget                bool // its SearchBudget did
	settled                    bool // the shortlist's Settle ended its rounds
	computeMs, wallMs          float64
	// roundMs are the plan's rounds' lengths on the model's clock, ms:
	// from the end of the round before (the clock's start, for the
	// first), waits for late answers in between included.
	roundMs []float64
	// the replan's (Config.Replan)
	replanWithin, replanModelWithin bool
	replanProbes, replanRounds      int
	replanWallMs                    float64
}

// trueMs is a chain's true bottleneck RTT (direct's when empty).
func (pc *pairCase) trueMs(chain []string) float64 {
	if len(chain) == 0 {
		return pc.directMs
	}
	n := len(pc.relays)
	ms := math.Max(pc.to[pc.index[chain[0]]], pc.from[pc.index[chain[len(chain)-1]]])
	for h := 1; h < len(chain); h++ {
		ms = math.Max(ms, float64(pc.truth.rtt[pc.index[chain[h-1]]*n+pc.index[chain[h]]]))
	}
	return ms
}

// windowedMs is a chain's bottleneck in throughput, as the RTT of the
// segment as slow with the client's window: each segment's true RTT times
// its receiver's recvScale (the client-side end's, for a download). It is
// trueMs with equal windows.
func (pc *pairCase) windowedMs(chain []string) float64 {
	if len(chain) == 0 {
		return pc.directMs
	}
	n, last := len(pc.relays), pc.index[chain[len(chain)-1]]
	ms := math.Max(pc.to[pc.index[chain[0]]], pc.from[last]*pc.recvScale[last])
	for h := 1; h < len(chain); h++ {
		u := pc.index[chain[h-1]]
		ms = math.Max(ms, float64(pc.truth.rtt[u*n+pc.index[chain[h]]])*pc.recvScale[u])
	}
	return ms
}

// modelQuality is a chain's model rate (its throughput, with each relay's
// window) over the best's.
func (pc *pairCase) modelQuality(chain []string) float64 {
	return modelRate(pc.windowedMs(chain), len(chain), planner.DefaultRelayOverhead) / pc.optRate
}

// plan plans the pair as v says (and replans it, with cfg.Replan), its
// probes' noise from seed.
func (pc *pairCase) plan(ctx context.Context, cfg Config, v Variant, in shortlist.Input, seed uint64) (pairResult, error) {
	var r pairResult
	scfg := v.Shortlist
	p := &prober{world: pc.world, relays: pc.relays, index: pc.index, client: pc.client, dst: pc.dst,
		inFlight: scfg.InFlightProbes(), shortlist: scfg, seed: seed, readyMs: map[string]float64{},
		setupRTTs: AdminSetupRTTs}
	if v.FastOpen {
		p.setupRTTs = AdminSetupRTTsFastOpen
	}
	p.udpAsk, p.udpLoss = v.UDPAsk, v.UDPLoss
	t0 := time.Now()
	var (
		res *planner.Result
		m   *planner.Matrix
		st  shortlist.Stats
		err error
	)
	// Labelled for a CPU profile of the run (relayctl sim --cpuprofile):
	// the plans' computation apart from the warm-up's.
	pprof.Do(ctx, pprof.Labels("sim", "plan"), func(ctx context.Context) {
		res, m, st, err = shortlist.Plan(ctx, scfg, in, p)
	})
	if err != nil {
		return r, err
	}
	r.computeMs = float64(time.Since(t0)-st.Hidden) / 1e6
	r.wallMs = r.computeMs + p.wallMs
	for i, end := range p.roundEndsMs {
		if i == 0 {
			r.roundMs = append(r.roundMs, end)
		} else {
			r.roundMs = append(r.roundMs, end-p.roundEndsMs[i-1])
		}
	}
	r.probes, r.rounds, r.estimated, r.deadlined, r.outOfBudget, r.settled = st.Probes, st.Rounds, st.Estimated, st.Deadlined, st.OutOfBudget, st.Settled
	r.chain = len(res.Best.Chain) > 0
	r.quality = pc.optMs / pc.trueMs(res.Best.Chain)
	r.modelQuality = pc.modelQuality(res.Best.Chain)
	r.gain = pc.directMs / pc.optMs
	if cfg.Replan {
		// The same pair again over the connections kept (see
		// Config.Replan), its probes' noise drawn afresh.
		p.restart()
		p.seed ^= 0x2e91a7
		if cfg.ReplanCold {
			p.readyMs = map[string]float64{}
		}
		rin := in
		if !cfg.ReplanFresh {
			rin.Prior = st.Prior
		}
		t0 := time.Now()
		again, _, rst, err := shortlist.Plan(ctx, scfg, rin, p)
		if err != nil {
			return r, fmt.Errorf("replan: %w", err)
		}
		r.replanWallMs = float64(time.Since(t0))/1e6 + p.wallMs
		r.replanProbes, r.replanRounds = rst.Probes, rst.Rounds
		r.replanWithin = pc.optMs/pc.trueMs(again.Best.Chain) >= 0.9
		r.replanModelWithin = pc.modelQuality(again.Best.Chain) >= 0.9
	}
	var cands []int
	for _, node := range m.Nodes {
		if node.Relay {
			cands = append(cands, pc.index[node.Name])
		}
	}
	r.candsWithin = pc.holdsWithin10(cands)
	choice, err := pc.trueChoice(m.Nodes, in.Request, in.Client.Name, in.Destination.Name, nil)
	if err != nil {
		return r, fmt.Errorf("the planner over the candidates' true RTTs: %w", err)
	}
	r.trueChoiceWithin = pc.optMs/pc.trueMs(choice) >= 0.9
	r.trueChoiceModelWithin = pc.modelQuality(choice) >= 0.9
	measured := map[[2]string]bool{}
	for _, p := range m.Pairs {
		if !p.Estimated {
			measured[[2]string{p.A, p.B}], measured[[2]string{p.B, p.A}] = true, true
		}
	}
	choice, err = pc.trueChoice(m.Nodes, in.Request, in.Client.Name, in.Destination.Name, measured)
	if err != nil {
		return r, fmt.Errorf("the planner over the measured pairs' true RTTs: %w", err)
	}
	r.measuredChoiceWithin = pc.optMs/pc.trueMs(choice) >= 0.9
	cut := make([]int, 0, len(st.FirstCut))
	inCity := map[int]bool{}
	for _, name := range st.FirstCut {
		i := pc.index[name]
		cut = append(cut, i)
		inCity[pc.world.Relay(i).City()] = true
	}
	r.cutWithin = pc.holdsWithin10(cut)
	var cities []int
	for i, rl := range pc.relays {
		if inCity[pc.world.Relay(i).City()] && rl.alive && i != pc.hosting {
			cities = append(cities, i)
		}
	}
	r.cutCitiesWithin = pc.holdsWithin10(cities)
	return r, nil
}

// trueChoice is the chain the planner chooses (req's constraints and
// model) over nodes, the plan's endpoints (client and dst, by name) and
// candidates, with every pair between them at its true RTT; with only
// (non-nil), the pairs it holds (both ways).
func (pc *pairCase) trueChoice(nodes []planner.Node, req planner.Request, client, dst string, only map[[2]string]bool) ([]string, error) {
	// at is a node's RTT figures: a relay's row of the true matrix, or
	// an endpoint's to every relay.
	type at struct {
		relay      int // -1: an endpoint
		toRelaysMs []float64
	}
	ends := 0
	spots := make([]at, len(nodes))
	for i, node := range nodes {
		switch {
		case node.Relay:
			spots[i] = at{relay: pc.index[node.Name]}
		case node.Name == client:
			spots[i] = at{relay: -1, toRelaysMs: pc.to}
			ends++
		case node.Name == dst:
			spots[i] = at{relay: -1, toRelaysMs: pc.from}
			ends++
		default:
			return nil, fmt.Errorf("node %q is neither a relay nor an endpoint", node.Name)
		}
	}
	if ends != 2 {
		return nil, fmt.Errorf("want the two endpoints among the plan's nodes, found %d", ends)
	}
	req.Client, req.Destination = client, dst
	m := &planner.Matrix{Nodes: nodes}
	n := len(pc.relays)
	for i, a := range spots {
		for j := i + 1; j < len(spots); j++ {
			if only != nil && !only[[2]string{nodes[i].Name, nodes[j].Name}] {
				continue
			}
			b := spots[j]
			var ms float64
			switch {
			case a.relay >= 0 && b.relay >= 0:
				ms = float64(pc.truth.rtt[a.relay*n+b.relay])
			case a.relay >= 0:
				ms = b.toRelaysMs[a.relay]
			case b.relay >= 0:
				ms = a.toRelaysMs[b.relay]
			default:
				ms = pc.directMs
			}
			m.Pairs = append(m.Pairs, planner.Pair{A: nodes[i].Name, B: nodes[j].Name, RTTMs: max(ms, 0.001)})
		}
	}
	res, err := planner.Search(m, req)
	if err != nil {
		return nil, err
	}
	return res.Best.Chain, nil
}

// holdsWithin10 says the relays at set (indices) hold a chain whose true
// bottleneck is within 10 % of the optimum's.
func (pc *pairCase) holdsWithin10(set []int) bool {
	return pc.optMs/pc.truth.bestAmongMs(set, pc.to, pc.from, pc.directMs, pc.maxHops) >= 0.9
}

// summarise is the Plans of one configuration's results.
func summarise(rs []pairResult, replan bool, read RegistryRead) Plans {
	var pl Plans
	pl.Count = len(rs)
	if pl.Count == 0 {
		return pl
	}
	var quality, modelQuality, gains, probesPer, rounds, computeMs, wallMs, withReadMs, replanWallMs, replanProbes, replanRounds []float64
	var firstRounds, secondRounds, laterRounds []float64
	var chains, candsWithin, trueChoiceWithin, trueChoiceModelWithin, measuredChoiceWithin, cutWithin, cutCitiesWithin, deadlined, outOfBudget, settled, replanWithin, replanModelWithin int
	count := func(ok bool, n *int) {
		if ok {
			*n++
		}
	}
	for _, r := range rs {
		quality, modelQuality, gains = append(quality, r.quality), append(modelQuality, r.modelQuality), append(gains, r.gain)
		probesPer, rounds = append(probesPer, float64(r.probes)), append(rounds, float64(r.rounds))
		computeMs, wallMs = append(computeMs, r.computeMs), append(wallMs, r.wallMs)
		firstRoundMs := 0.0
		if len(r.roundMs) > 0 {
			firstRoundMs = r.roundMs[0]
		}
		withReadMs = append(withReadMs, read.WithPlanMs(r.wallMs, firstRoundMs))
		for i, ms := range r.roundMs {
			switch i {
			case 0:
				firstRounds = append(firstRounds, ms)
			case 1:
				secondRounds = append(secondRounds, ms)
			default:
				laterRounds = append(laterRounds, ms)
			}
		}
		pl.EstimatedSegments += r.estimated
		count(r.chain, &chains)
		count(r.candsWithin, &candsWithin)
		count(r.trueChoiceWithin, &trueChoiceWithin)
		count(r.trueChoiceModelWithin, &trueChoiceModelWithin)
		count(r.measuredChoiceWithin, &measuredChoiceWithin)
		count(r.cutWithin, &cutWithin)
		count(r.cutCitiesWithin, &cutCitiesWithin)
		count(r.deadlined, &deadlined)
		count(r.outOfBudget, &outOfBudget)
		count(r.settled, &settled)
		if replan {
			replanWallMs = append(replanWallMs, r.replanWallMs)
			replanProbes, replanRounds = append(replanProbes, float64(r.replanProbes)), append(replanRounds, float64(r.replanRounds))
			count(r.replanWithin, &replanWithin)
			count(r.replanModelWithin, &replanModelWithin)
		}
	}
	pl.QualityMedian, pl.QualityP5 = quantile(quality, 0.5), quantile(quality, 0.05)
	pl.Within10, pl.ModelWithin10 = shareAtLeast(quality, 0.9), shareAtLeast(modelQuality, 0.9)
	pl.Within15, pl.Within20 = shareAtLeast(quality, 0.85), shareAtLeast(quality, 0.8)
	pl.ModelQualityMedian = quantile(modelQuality, 0.5)
	pl.CandidatesWithin10 = float64(candsWithin) / float64(pl.Count)
	pl.TrueChoiceWithin10 = float64(trueChoiceWithin) / float64(pl.Count)
	pl.TrueChoiceModelWithin10 = float64(trueChoiceModelWithin) / float64(pl.Count)
	pl.MeasuredChoiceWithin10 = float64(measuredChoiceWithin) / float64(pl.Count)
	pl.FirstCutWithin10 = float64(cutWithin) / float64(pl.Count)
	pl.FirstCutCitiesWithin10 = float64(cutCitiesWithin) / float64(pl.Count)
	pl.ChainShare = float64(chains) / float64(pl.Count)
	pl.DeadlinedShare = float64(deadlined) / float64(pl.Count)
	pl.OutOfBudgetShare = float64(outOfBudget) / float64(pl.Count)
	pl.SettledShare = float64(settled) / float64(pl.Count)
	pl.OptimumGainMedian = quantile(gains, 0.5)
	pl.ProbesMedian, pl.RoundsMedian = quantile(probesPer, 0.5), quantile(rounds, 0.5)
	pl.ComputeMsMedian, pl.ComputeMsP95 = quantile(computeMs, 0.5), quantile(computeMs, 0.95)
	pl.WallMsMedian, pl.WallMsP95 = quantile(wallMs, 0.5), quantile(wallMs, 0.95)
	pl.WallMsMedianCI95 = MedianCI95(wallMs)
	pl.WithReadMsMedian, pl.WithReadMsMedianCI95 = quantile(withReadMs, 0.5), MedianCI95(withReadMs)
	pl.Within10CI95 = Wilson95(countAtLeast(quality, 0.9), pl.Count)
	pl.FirstRoundMsMedian, pl.SecondRoundMsMedian = quantile(firstRounds, 0.5), quantile(secondRounds, 0.5)
	pl.LaterRoundMsMedian = quantile(laterRounds, 0.5)
	if replan {
		pl.ReplanWithin10 = float64(replanWithin) / float64(pl.Count)
		pl.ReplanModelWithin10 = float64(replanModelWithin) / float64(pl.Count)
		pl.ReplanWallMsMedian, pl.ReplanWallMsP95 = quantile(replanWallMs, 0.5), quantile(replanWallMs, 0.95)
		pl.ReplanProbesMedian, pl.ReplanRoundsMedian = quantile(replanProbes, 0.5), quantile(replanRounds, 0.5)
	}
	return pl
}

// coordErrOf is relay i's published coordinate's median relative error to
// up to 100 random alive relays that have published theirs; 1 when it
// has published none.
func coordErrOf(world *netsim.World, relays []*relay, i int, rnd *rand.Rand) float64 {
	var errs []float64
	for range 100 {
		j := rnd.IntN(len(relays))
		if j == i || !relays[j].alive || relays[j].coord == nil {
			continue
		}
		est, ok := coord.EstimateMs(relays[i].coord, relays[j].coord)
		if !ok {
			return 1 // i has published none
		}
		truth := world.RelayRTTMs(i, j)
		errs = append(errs, math.Abs(est-truth)/truth)
	}
	return quantile(errs, 0.5)
}

// shareAtLeast is the share of v that is at least atLeast.
func shareAtLeast(v []float64, atLeast float64) float64 {
	return float64(countAtLeast(v, atLeast)) / float64(len(v))
}

func countAtLeast(v []float64, atLeast float64) int {
	n := 0
	for _, x := range v {
		if x >= atLeast {
			n++
		}
	}
	return n
}

// quantile is the q-quantile of v (nearest rank), sorting a copy.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
