// Package shortlist plans a path over a fleet too large to measure whole.
//
// A relay measures only a bounded set of peers (pkg/coord), so most
// relay-to-relay RTTs are estimates from network coordinates, and nobody
// has measured the client's or the destination's RTT to most relays. Plan
// goes from estimates to measurements in a few rounds of targeted probes:
//
//  1. Landmarks: the client probes a few relays spread over the coordinate
//     space, those relays probe the destination (or it them, when it makes
//     probes), and the client probes the destination (the direct path).
//     The client and the destination get coordinates fitted to those RTTs
//     (coord.Fit). A destination whose
//     coordinate is known (a relay's host: Input.DestinationCoord) is not
//     probed by the landmarks, and the round is this host's probes only.
//  2. Candidates: each relay is ranked by the estimated cost of the best
//     chain through it, over every relay's coordinates and every pair the
//     relays published (see rankCandidates: the p-norm of the chain's
//     segments, nearly its longest segment); the best FirstCut go on, at
//     most PerSite from one site before the rest (relays of one city
//     rank alike). Not the relays nearest the direct path: with only the
//     longest segment setting the rate, the best chains often go the
//     long way round.
//  3. Ends: the client probes every relay of the first cut and each of
//     them probes the destination, in one round (a destination that makes
//     probes, Input.DestinationProbes, probes them instead): the endpoints'
//     coordinates, fitted from a few landmarks, are the least accurate
//     estimates, and those segments start and end every chain. Ranked
//     again with those measurements (and with the estimated segments
//     between relays counted Caution times longer: the candidates should
//     owe their rank to what was measured), the best Candidates of the
//     first cut, under the same site limit, are what the planner sees.
//  4. Shortlist: the planner plans over the candidates (exact pairs where a
//     relay published one, estimates elsewhere). Each round probes the
//     estimated segments of the best plan and its runners-up; the pairs
//     between the Neighbours relays nearest each end of the longest
//     segment of the best plan and of its runners-up (NeckPlans plans in
//     all), once per such segment (those relays join the
//     candidates: a route between two hubs differs pair by pair by more
//     than coordinates can tell, and the rest of the chain hardly cares
//     which relay of a city it meets); and the estimated pairs on chains
//     that would beat the best chain measured throughout (ExploreBar)
//     were the chain's estimates Optimism times too high, the best chain
//     through them first (optimisticPairs).
//     Then the planner plans again. That repeats until the best plan
//     stands on measurements only and its longest segment's neighbourhood
//     was searched, or a chain measured throughout predicts within Settle
//     of it, or Rounds run out, or the next round would end past the
//     SearchBudget (1.6 s by default) or the Deadline; then the plan is
//     the best of the chains measured throughout.
//
// A replan between the same endpoints can start from what a plan learnt
// (Input.Prior, from its Stats.Prior): no landmarks, the earlier
// measurements standing in for probes, and the chains the plan ranked
// measured again in the first round with the first cut's ends not yet
// known; a segment the replan's answer would rest on that only the Prior
// knows is measured like an estimate. See Prior.
//
// The planner stays pure; probing is the Prober's (relays' /v1/probe and
// this host's handshakes in relayctl, the modelled network in the
// simulator). Each round is one batch of probes made in parallel, so a
// plan costs a few round trips of wall time, not one per probe.
package shortlist

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/planner"
)

// Defaults. Each comment says what the default is and why; the runs that
// chose it are in docs/defaults.md, under the anchor it names.
const (
	// DefaultLandmarks and DefaultFirstQuorum: the first round (the
	// landmarks') ends once this share of its requests has answered:
	// this host's own probes, a round trip each, and most landmarks'
	// probes of the destination, an ask's round trip and a probe's; the
	// slowest are far landmarks, whose RTTs the endpoints' fits need
	// least (minFitLandmarks). More landmarks place the endpoints
	// better, up to about this many
	// (docs/defaults.md#landmarks-and-the-first-rounds-quorum).
	DefaultLandmarks   = 16
	DefaultFirstQuorum = 0.84
	// DefaultCandidates is the least number of relays the planner sees:
	// enough that they hold a chain near the optimum for nearly every
	// pair, few enough that the rounds measure what they need; a round
	// asks each relay once whatever its probes
	// (docs/defaults.md#candidates).
	DefaultCandidates = 192
	// DefaultCandidatesShare: the candidates are the larger of
	// DefaultCandidates and this share of the placed relays: in a large
	// fleet more candidates pay, up to about this share; more take more
	// of the rounds' probes, their bound (ExplorePerRound) the same,
	// and the rounds do not find the chains they add
	// (docs/defaults.md#candidates-as-a-share-of-the-fleet).
	DefaultCandidatesShare = 0.08
	// DefaultRounds: rounds that end at their quorum (DefaultQuorum)
	// are shorter, and two more of them buy back what ending early
	// costs (docs/defaults.md#rounds).
	DefaultRounds = 8
	// DefaultOptimism: a pair whose true RTT is far below its estimate
	// is rare, one a little below is not. A fast chain the coordinates
	// miss often needs two pairs well below their estimates at once, so
	// a pair's bound counts every estimated pair of its chain at this
	// share of its estimate, not its own alone
	// (docs/defaults.md#optimism).
	DefaultOptimism = 0.6
	// DefaultYoungFor and DefaultYoungOptimism: a relay whose coordinate
	// has been measured for less than DefaultYoungFor (a relay that just
	// joined, or restarted: a new relayd starts its coordinate afresh) has
	// its estimated pairs probed at DefaultYoungOptimism instead of
	// Optimism: its coordinate is still finding its place, and its
	// estimates err by more (docs/defaults.md#young-relays).
	DefaultYoungFor      = 10 * time.Minute
	DefaultYoungOptimism = 0.4
	// DefaultCaution: when the first cut is ranked again on its measured
	// ends, a chain's estimated segments count this much longer than
	// their estimates. Estimates err both ways and a chain that rests on
	// one too low is the costliest miss; a chain whose slack is in
	// measured segments is the safer candidate
	// (docs/defaults.md#caution).
	DefaultCaution = 1.25
	// DefaultExplorePerRound bounds a round's probes. A round asks each
	// relay once, whatever its probes, so its wall time hardly grows
	// with them; more probes than this bought nothing measurable
	// (docs/defaults.md#probes-a-round).
	DefaultExplorePerRound = 8000
	// ExploreBarMeasured: an optimistic pair is probed when a chain
	// through it could beat the best chain measured throughout (or the
	// best plan, if slower): what the plan has for sure. The best plan on
	// estimates is often faster than anything real, the estimates it rests
	// on too low, and set as the bar it kept out the pairs whose estimates
	// are too high, a detour's fast hops (docs/defaults.md#the-explorers-bar).
	// ExploreBarPlan: the best plan's, estimates and all.
	ExploreBarMeasured = 0
	ExploreBarPlan     = 1
	// DefaultSearchBudget: the rounds of targeted probes are where a
	// plan's time varies (how many it makes, each a round trip to the
	// farthest relay asked and this host's computation), the first two
	// rounds' time is the network's. A deadline from the plan's start
	// left no room for the search where the first rounds were slow
	// (asked over HTTPS); a budget for the search itself keeps a plan's
	// search whatever its first rounds took, and bounds its time where
	// the host computes slowly (docs/defaults.md#search-budget).
	DefaultSearchBudget = 1600 * time.Millisecond
	// DefaultHandshakes: one handshake's RTT is within its queueing delay
	// of the median of three, at a third of the wait, and a plan waits
	// for its slowest probe once per round
	// (docs/defaults.md#handshakes-a-probe).
	DefaultHandshakes = 1
	// DefaultVerifyHandshakes: the median of three handshakes stands
	// when one of them read low and another met a queue
	// (docs/defaults.md#verifying-the-answer).
	DefaultVerifyHandshakes = 3
	// DefaultVerifyPasses: each pass is a round as long as its longest
	// probe's handshakes (docs/defaults.md#verifying-the-answer).
	DefaultVerifyPasses = 3
	// DefaultVerifyMargin: the share a plan is judged by ("within 10 %
	// of the optimum"), so that a chain one reading put just out of
	// reach gets a second look.
	DefaultVerifyMargin = 0.10
	// DefaultNeighbours: the relays nearest each end of the best plan's
	// bottleneck tried in its place; more planned no better, for more
	// probes a plan (docs/defaults.md#neighbours).
	DefaultNeighbours = 12
	// DefaultNeckPlans: every plan the search ranks (the best and its
	// runners-up) has its bottlenecks' neighbourhoods searched in the
	// same round (docs/defaults.md#the-runners-ups-bottlenecks).
	DefaultNeckPlans = 1 + planner.MaxAlternatives
	// DefaultInFlight: a round waits for its last probe, and the first
	// cut's ends alone are 768 probes; with 32 in flight they went in
	// waves, each as long as a probe of a far relay
	// (docs/defaults.md#requests-in-flight).
	DefaultInFlight = 256
	// DefaultQuorum: a round waits for its slowest request, a far relay
	// asked over a new connection (three of its round trips before its
	// probe starts), or one that is down, till its timeout. Ending the
	// round at this share of its requests leaves those to answer into a
	// later round, for a little quality; lower, too few ends are
	// measured for the candidates' ranking (docs/defaults.md#quorum).
	DefaultQuorum = 0.9
	// DefaultLaterQuorum: the rounds after a plan's first two ask over
	// connections already open, and their stragglers are far relays'
	// probes, which the plan waits for anyway when its best chain rests
	// on one: ending those rounds sooner shortened plans and planned no
	// worse (docs/defaults.md#the-later-rounds-quorum).
	DefaultLaterQuorum = 0.7
	// DefaultPerSite and DefaultSiteRadius: the first cut and the
	// candidates take at most 3 relays within 0.15 × the direct path's
	// RTT of each other (by coordinates, access links aside) before the
	// rest of their ranking. Relays of one city rank alike, and without
	// the limit a large fleet's best ranks are a few cities many times
	// over. With it the candidates are further apart, and so are the
	// relays asked: a plan takes a little longer
	// (docs/defaults.md#the-site-limit).
	DefaultPerSite    = 3
	DefaultSiteRadius = 0.15
	// DefaultFirstCut and DefaultFirstCutShare: the first cut takes the
	// larger of DefaultFirstCut relays and DefaultFirstCutShare of the
	// placed ones. The endpoints' coordinates, fitted from a few
	// landmarks, are the estimates most in error, and they start and end
	// every chain; measuring more relays' ends than the candidates' in
	// the same round costs probes, not rounds. Not a round's wall time,
	// though, past a few hundred: the round asks each relay over a new
	// connection, at most DefaultInFlight at once. A larger fleet needs
	// a larger first cut (docs/defaults.md#the-first-cut).
	DefaultFirstCut      = 384
	DefaultFirstCutShare = 0.15
)

// minFitLandmarks is how many landmarks' RTTs an endpoint's fit waits
// for (three in four of fewer landmarks): with more, the first round
// ends at FirstQuorum without the farthest landmarks' probes.
const minFitLandmarks = 6

// Config tunes Plan. The zero value is the defaults.
type Config struct {
	Landmarks int // relays the endpoints are placed from; default DefaultLandmarks
	// Candidates is how many relays the planner sees, ranked by their
	// best chain's estimated bottleneck; 0 = the larger of
	// DefaultCandidates and DefaultCandidatesShare of the placed relays.
	Candidates int
	// Rounds is how many rounds of shortlist probes may follow the
	// landmarks'; 0 = DefaultRounds, negative = none (plan on the
	// estimates and published pairs).
	Rounds int
	// Optimism is how much lower than its estimate a relay pair's RTT may
	// turn out, a fraction: each round also probes the estimated pairs on
	// chains that would beat the bar (ExploreBar) with every estimated
	// pair at its estimate times Optimism (0 = DefaultOptimism;
	// near 0: only measured segments rule a chain out; 1 = trust the
	// estimates).
	Optimism float64
	// YoungFor: a relay whose coordinate has been measured for less than
	// this (Relay.MeasuredFor) is young, its coordinate still finding its
	// place: its estimated pairs are probed at YoungOptimism. 0 =
	// DefaultYoungFor, negative = no relay is young.
	YoungFor time.Duration
	// YoungOptimism is Optimism for a young relay's pairs (the lower of
	// the two wins); 0 = DefaultYoungOptimism.
	YoungOptimism float64
	// ExploreBar is the bottleneck a chain through an optimistic pair
	// must beat for the pair to be probed: ExploreBarMeasured (the
	// default) or ExploreBarPlan.
	ExploreBar int
	// ExplorePerRound bounds each round's probes, those of the ranked
	// plans' segments and the optimistic ones together; default
	// DefaultExplorePerRound.
	ExplorePerRound int
	// FirstCut is how many relays the coordinates pick first: their ends
	// are measured (round 3 of the package documentation), and the best
	// Candidates of them ranked again on those measurements are the
	// candidates. 0 = the larger of DefaultFirstCut and
	// DefaultFirstCutShare of the placed relays; at most Candidates
	// (negative, or less than Candidates) = no second ranking.
	FirstCut int
	// Caution is how much longer than its estimate an estimated relay
	// pair counts when the first cut is ranked again on its measured ends
	// (a factor; 0 = DefaultCaution, negative or 1 = as estimated).
	Caution float64
	// PerSite is how many relays of one site the first cut and the
	// candidates take before the rest of their ranking, a site being
	// the relays within SiteRadius × the direct path's RTT of each other
	// in the coordinate space (heights aside): relays of one city rank
	// alike, and a large fleet's best ranks can be a few cities' relays
	// many times over. 0 = DefaultPerSite, negative = no limit.
	PerSite int
	// SiteRadius is a site's radius as a share of the direct path's RTT;
	// 0 = DefaultSiteRadius.
	SiteRadius float64
	// Neighbours is how many relays near each end of a ranked plan's
	// bottleneck (NeckPlans) are tried in its place, once per
	// bottleneck; 0 = DefaultNeighbours, negative = none.
	Neighbours int
	// NeckPlans is how many of the ranked plans, the best first, have
	// their bottlenecks' neighbourhoods searched in a round: the
	// runners-up's necks searched beside the best's spare the rounds
	// that would find them one after another. 0 = DefaultNeckPlans, 1 =
	// the best plan's alone.
	NeckPlans int
	// InFlight is how many requests of a round the Prober has in flight
	// at once (relayctl's, and the simulator's model of it): this host's
	// own probes one each, a relay's probes of the round one together
	// (up to probe.MaxTargets); 0 or negative =
	// DefaultInFlight. Plan does not read it: it is here so that the
	// prober and the simulator take it from one place (InFlightProbes).
	InFlight int
	// Quorum is the share of a plan's second round's requests (the
	// first cut's ends) after whose answers a LateProber ends the round
	// (the rest answer in a later one); 0 or less = DefaultQuorum, 1 or
	// more = it waits for its last. Plan does not read it either
	// (RoundNeedsAt).
	Quorum float64
	// FirstQuorum is Quorum for a plan's first round: the landmarks'
	// (a replan's, its first cut's ends and its Prior's chains). 0 =
	// DefaultFirstQuorum, 1 or more = it waits for its last.
	FirstQuorum float64
	// LaterQuorum is Quorum for the rounds after a plan's first two (a
	// plan's landmarks' and first cut's ends; a replan's first two):
	// their requests go over connections already open, their stragglers
	// are the far relays' probes, and the plan waits for any its best
	// chain rests on anyway. 0 = DefaultLaterQuorum, 1 or more = every
	// later round waits for its last.
	LaterQuorum float64
	// Handshakes is how many TCP handshakes each probe times (its RTT is
	// their median); default DefaultHandshakes.
	Handshakes int
	// VerifyHandshakes is how many handshakes a probe times when the
	// plan re-measures the bottlenecks it was chosen on (verify); 0 =
	// DefaultVerifyHandshakes, no more than Handshakes (e.g. -1) = none
	// are re-measured.
	VerifyHandshakes int
	// VerifyPasses bounds verify's passes: a pass re-measures the
	// segments of the plans in contention, the next those of the plan
	// the pass before promoted, if any; 0 = DefaultVerifyPasses.
	VerifyPasses int
	// VerifyMargin is how close to the best plan a runner-up must
	// predict (a share) for verify to re-measure its segments too; 0 =
	// DefaultVerifyMargin.
	VerifyMargin float64
	// Deadline, when positive, bounds a plan's wall time from Plan's
	// start: a shortlist round that would end past it is not made, and
	// the plan is the best of the chains measured throughout, as when the
	// rounds run out. A round's length is foreseen as its requests' (the
	// round trip of asking a relay and its longest probe, by the best
	// figures known; the quorum's longest), new connections and queueing
	// aside. The landmarks' round and the first cut's ends are made
	// whatever it says. 0 = none.
	Deadline time.Duration
	// SearchBudget bounds the rounds of targeted probes as Deadline
	// bounds the plan: from when the first cut's ends have answered (a
	// replan's first round), no round is made that would end more than
	// this later. 0 = DefaultSearchBudget, negative = none (a plan makes
	// all its Rounds, however long they take).
	SearchBudget time.Duration
	// Settle, when positive, ends the rounds once the best chain
	// measured throughout predicts within this share of the best plan on
	// estimates (its rate, or for a sized request its completion time)
	// and its own bottleneck's neighbourhood was searched (a round
	// searches it first): what more rounds could gain, by the estimates,
	// is less than that. The plan is then that chain. 0 = none: the
	// rounds go on until the best plan stands on measurements. It trades
	// a plan's quality for its time, a little of each; settling before
	// the bottleneck's neighbourhood was searched planned worse
	// (docs/defaults.md#settle).
	Settle float64
	// Seed picks the landmarks (reproducibly: the same fleet, the same
	// landmarks).
	Seed uint64
	// Vivaldi configures the endpoints' fit; nil = coordinate.DefaultConfig().
	Vivaldi *coordinate.Config
}

// RoundNeedsAt is how many of the n requests of a plan's round'th round
// (its round'th batch of probes, from 0) a LateProber waits for before
// it ends the round: FirstQuorum of them in the first, Quorum in the
// second, LaterQuorum from the third on (or their defaults; at most 1),
// rounded up, at least one.
func (c Config) RoundNeedsAt(round, n int) int {
	if n == 0 {
		return 0
	}
	q, def := c.LaterQuorum, DefaultLaterQuorum
	switch round {
	case 0:
		q, def = c.FirstQuorum, DefaultFirstQuorum
	case 1:
		q, def = c.Quorum, DefaultQuorum
	}
	if q <= 0 {
		q = def
	}
	return max(int(math.Ceil(min(q, 1)*float64(n))), 1)
}

// PlanSearchBudget is the search budget Plan keeps: SearchBudget,
// DefaultSearchBudget for 0, and 0 (none) for a negative SearchBudget.
func (c Config) PlanSearchBudget() time.Duration {
	switch {
	case c.SearchBudget < 0:
		return 0
	case c.SearchBudget == 0:
		return DefaultSearchBudget
	}
	return c.SearchBudget
}

// InFlightProbes is c.InFlight, or its default.
func (c Config) InFlightProbes() int {
	if c.InFlight > 0 {
		return c.InFlight
	}
	return DefaultInFlight
}

func (c Config) withDefaults() Config {
	c.Landmarks = cmp.Or(c.Landmarks, DefaultLandmarks)
	c.Rounds = cmp.Or(c.Rounds, DefaultRounds)
	c.Optimism = cmp.Or(c.Optimism, DefaultOptimism)
	c.YoungFor = cmp.Or(c.YoungFor, DefaultYoungFor)
	c.YoungOptimism = cmp.Or(c.YoungOptimism, DefaultYoungOptimism)
	c.ExplorePerRound = cmp.Or(c.ExplorePerRound, DefaultExplorePerRound)
	c.Handshakes = cmp.Or(c.Handshakes, DefaultHandshakes)
	c.VerifyHandshakes = cmp.Or(c.VerifyHandshakes, DefaultVerifyHandshakes)
	c.VerifyPasses = cmp.Or(c.VerifyPasses, DefaultVerifyPasses)
	c.VerifyMargin = cmp.Or(c.VerifyMargin, DefaultVerifyMargin)
	c.Neighbours = cmp.Or(c.Neighbours, DefaultNeighbours)
	c.NeckPlans = cmp.Or(c.NeckPlans, DefaultNeckPlans)
	c.Caution = cmp.Or(c.Caution, DefaultCaution)
	c.PerSite = cmp.Or(c.PerSite, DefaultPerSite)
	c.SiteRadius = cmp.Or(c.SiteRadius, DefaultSiteRadius)
	c.Settle = max(c.Settle, 0)
	c.SearchBudget = c.PlanSearchBudget()
	if c.Rounds < 0 {
		c.Rounds = 0
	}
	c.Neighbours = max(c.Neighbours, 0)
	c.PerSite = max(c.PerSite, 0)
	if c.Vivaldi == nil {
		c.Vivaldi = coordinate.DefaultConfig()
	}
	return c
}

// sizes are how many relays the first cut and the candidates take when
// placed relays can be ranked: c's FirstCut and Candidates, or for 0 the
// larger of their defaults and their shares of the placed relays (a
// first cut at most the candidates: none).
func (c Config) sizes(placed int) (firstCut, candidates int) {
	share := func(set, least int, of float64) int {
		if set != 0 {
			return set
		}
		return max(least, int(math.Ceil(of*float64(placed))))
	}
	return share(c.FirstCut, DefaultFirstCut, DefaultFirstCutShare), share(c.Candidates, DefaultCandidates, DefaultCandidatesShare)
}

// Relay is one relay of the fleet as the registry knows it.
type Relay struct {
	Node  planner.Node           // Relay must be true; its windows and limit as known
	Coord *coordinate.Coordinate // nil: not placed yet (never a candidate unless measured)
	// MeasuredFor is how long the relay had measured its coordinate when
	// it published it, plus the publication's age (0: not said, as by a
	// relayd that does not publish it): see Config.YoungFor.
	MeasuredFor time.Duration
}

// Input is what Plan plans from.
type Input struct {
	Relays []Relay
	// Exact are relay-to-relay RTTs the relays measured and published
	// (Estimated false); they win over estimates.
	Exact []planner.Pair
	// Published, when set, gives more of Exact, read while the first
	// round's probes are out: it is called once, after that round (a
	// registry's read of every relay's measurements, half of what it
	// reads at thousands of relays, need not come before the probes). Its
	// error ends the plan.
	Published func(context.Context) ([]planner.Pair, error)
	// Client and Destination are the endpoints' nodes (not relays); their
	// names are the matrix's and the Prober's.
	Client, Destination planner.Node
	// Request says how to plan; its Client and Destination are set from
	// the nodes above.
	Request planner.Request
	// Describe, when set, is called once the candidates are chosen, with
	// their names, and returns their nodes as they are now known (windows,
	// limits: what is too costly to read for every relay of a large
	// fleet); nodes it leaves out keep Relays' Node. It may return the
	// destination's node too, under its name, when it knows more of it
	// (a relay's host: its windows). An error fails the plan. The relays
	// that make probes of the round they join in, or that this host
	// probes in it, are described once the round has ended, the others
	// while it runs: a Prober may bring a relay's description with its
	// probes' answers (relayctl's does, relayd's /v1/probe?info=1), or
	// read it over the connection it opens to a relay beside this host's
	// probe of it (relayctl's does), which then costs no request of its
	// own.
	Describe func(ctx context.Context, names []string) (map[string]planner.Node, error)
	// Prior, when set, is what an earlier plan between the same
	// endpoints learnt (its Stats.Prior): the plan starts from it (see
	// Prior).
	Prior *Prior
	// DestinationCoord, when valid, is the destination's coordinate
	// known beforehand: a relay's host is placed by that relay's own. The
	// landmarks then place the client only: their round is this host's
	// probes alone, no relay asked.
	DestinationCoord *coordinate.Coordinate
	// DestinationProbes says the destination makes probes too: it is a
	// relay's host, and the Prober asks that relay for a Probe whose From
	// is the destination. The first cut's ends are then the destination's
	// probes of them, a request to it for every probe.MaxTargets, where
	// each relay of the first cut would be asked over a connection of its
	// own (the round's slowest: three round trips to a far relay before
	// its probe starts); and a segment between a relay and the
	// destination is asked of whichever end is nearer this host, as one
	// between two relays is.
	DestinationProbes bool
}

// Prior is what a plan learnt that a replan between the same endpoints
// can start from. A replan with a Prior places neither endpoint again
// (no landmarks' round): its first round measures the direct path and
// the segments of the chains the earlier plan ranked best, and the
// earlier measurements stand in for probes until a plan rests on them: a
// segment of the best plan or its runners-up known only from the Prior
// is measured again in the next round, as an estimate would be. So a
// replan makes fewer rounds than a plan
// (docs/defaults.md#replans-from-a-prior), and its answer stands on
// measurements of this plan; what the Prior says of the rest of the
// fleet ages with it: the caller decides how long to replan from one
// before planning afresh.
type Prior struct {
	// Client and Destination are the endpoints' fitted coordinates.
	Client, Destination *coordinate.Coordinate
	// Pairs are the RTTs measured: the plan's own, and its Prior's that
	// it did not measure again (a pair once). Some two thousand at 1,000
	// relays: kept small.
	Pairs []Measured
	// Chains are the chains the plan ranked, best first: the replan's
	// first round measures their segments again.
	Chains [][]string
}

// Measured is one RTT a plan measured, ms (symmetric: A–B).
type Measured struct {
	A, B  string
	RTTMs float64
}

// Probe asks one node to measure its RTT to another: From is the client or
// a relay, To a relay or the destination. Handshakes is how many TCP
// handshakes to time (the RTT is their median); Plan sets it from
// Config.Handshakes, and 0 is the Prober's default.
type Probe struct {
	From, To   string
	Handshakes int
	// ExpectMs is the pair's RTT by the best figure Plan knows when it
	// asks (an estimate, until measured), ms; 0: none. A Prober can tell
	// by it an answer that is lost from one that is slow.
	ExpectMs float64
	// Awaited says the round is not over until this probe has answered,
	// whatever its quorum: a figure the plan's answer stands on (verify),
	// which a quorum would otherwise leave out as the round's longest.
	Awaited bool
}

// Prober measures RTTs, milliseconds. It answers one value per probe, in
// order; a value <= 0 is a probe that failed: that pair is no segment of
// the plan, whatever was published or estimated for it. An error fails
// the whole plan.
type Prober interface {
	Probe(ctx context.Context, probes []Probe) ([]float64, error)
}

// A LateProber may end a round before its slowest probes answer: their
// values are NaN (see Pending), and Late hands them over once they are
// in. A round waits for its slowest probe, which is a far relay asked
// over a new connection, or one that is down and times out; the plan
// goes on with what it has, and the stragglers' figures join a later
// round. Plan never probes a pair again while it is pending.
type LateProber interface {
	Prober
	// Late returns the pending probes that answered since the last call
	// (all of them, once they are in, with wait), values as Probe's.
	Late(ctx context.Context, wait bool) ([]Answer, error)
}

// A Clock is a Prober that models the time its answers take (the
// simulator's), instead of taking it: a plan's elapsed time is then its
// own computation, on the wall clock, and Waited.
type Clock interface {
	// Waited is the time the plan has waited for the Prober's answers.
	Waited() time.Duration
}

// Answer is a late probe's value, ms (<= 0: failed).
type Answer struct {
	Probe Probe
	RTTMs float64
}

// Pending says v, a Prober's value, is a probe still in flight.
func Pending(v float64) bool { return v != v }

// Stats says what a plan cost and what it stands on.
type Stats struct {
	Probes     int // probes asked of the Prober, all rounds
	Rounds     int // batches of probes, the landmarks' included
	Candidates int // relays the planner saw
	// FirstCut are the relays whose ends the plan's second round
	// measured: those the coordinates picked first, and for a replan the
	// relays of its Prior's chains (their ends may be the Prior's);
	// sorted.
	FirstCut []string
	// Measured and Estimated count the best plan's segments by source.
	Measured, Estimated int
	// Deadlined says Config.Deadline stopped the rounds; OutOfBudget
	// that Config.SearchBudget did.
	Deadlined, OutOfBudget bool
	// Settled says Config.Settle stopped the rounds.
	Settled bool
	// Verified counts the probes that re-measured the bottlenecks the
	// plan was chosen on (Config.VerifyHandshakes).
	Verified int
	// Unreachable are the relays this host's probe could not reach, left
	// out of the plan; sorted.
	Unreachable []string
	// Hidden is, with a Clock, the computation the plan waited for that a
	// real round's wait would have hidden: work started before a round
	// and not done when its answers were in, up to the round's length on
	// the Clock. Plan's own deadlines and budgets leave it out; so should
	// a caller that times the plan.
	Hidden time.Duration
	// Prior is what a replan between the same endpoints can start from
	// (Input.Prior); nil when the endpoints could not be placed.
	Prior *Prior
}

// placedSpace is the space of the relays with a valid coordinate, in
// their order (any of another dimension than the first's left out).
func placedSpace(relays []Relay) *space {
	sp := &space{dim: -1}
	for _, r := range relays {
		c := r.Coord
		if !validCoord(c) || (sp.dim >= 0 && len(c.Vec) != sp.dim) {
			continue
		}
		sp.dim = len(c.Vec)
		for _, x := range c.Vec {
			sp.vec = append(sp.vec, x*1000)
		}
		sp.hgt, sp.adj = append(sp.hgt, c.Height*1000), append(sp.adj, c.Adjustment*1000)
		sp.name = append(sp.name, r.Node.Name)
	}
	return sp
}

// within says plan a predicts within tol (a share) of plan b: its rate
// at least 1−tol of b's, or for a sized request its completion time at
// most 1+tol of b's.
func within(a, b planner.Plan, tol float64) bool {
	if a.Transfer != nil && b.Transfer != nil {
		return a.Transfer.CompletionMs <= b.Transfer.CompletionMs*(1+tol)
	}
	return a.PredictedBps >= b.PredictedBps*(1-tol)
}

// validCoord says c can be used in estimates.
func validCoord(c *coordinate.Coordinate) bool {
	return c != nil && len(c.Vec) > 0 && c.IsValid()
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
