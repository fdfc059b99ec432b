package netsim

import (
	"fmt"
	"math"
)

// MaxRelays is the largest world NewWorld builds.
const MaxRelays = 10000

// Config sets the world's parameters. The zero value of a field means its
// default (Defaults lists them; doc.go says where each comes from). Fields
// whose zero is a meaningful setting say so: for them a negative value
// means "none" (no jitter, no bad routes, …), except the churn rates, where
// zero already means none and churn is off by default.
type Config struct {
	// Relays is the number of relays, 1 to MaxRelays. Default 500.
	Relays int
	// Providers is the number of relay hosting providers (AS numbers);
	// relays pick one with probability proportional to 1/(k+1), so a few
	// providers host most relays, as in real VPS markets. Default 20.
	Providers int
	// EndpointISPs is the number of access ISPs per city that endpoints
	// (clients) are spread over. Default 10.
	EndpointISPs int

	// MetroRadiusKm spreads the points of one city uniformly over a disc
	// of this radius around the city centre (data centres and homes are
	// not at one spot). Default 20; negative: every point at the centre.
	MetroRadiusKm float64

	// RelayAccessMs is the median one-way access delay of a relay (and of
	// a ServerIn host): its data centre's path to the provider's
	// backbone. Lognormal with RelayAccessSigma, clamped to 0.2–5 ms.
	// Default 0.5.
	RelayAccessMs float64
	// RelayAccessSigma is the lognormal σ of RelayAccessMs. Default 0.7;
	// negative: every relay has exactly RelayAccessMs.
	RelayAccessSigma float64
	// EndpointAccessMs is the median one-way access delay of an endpoint
	// (home or office line to its ISP's network). Lognormal with
	// EndpointAccessSigma, clamped to 1–30 ms. Default 5.
	EndpointAccessMs float64
	// EndpointAccessSigma is the lognormal σ of EndpointAccessMs.
	// Default 0.5; negative: exactly EndpointAccessMs.
	EndpointAccessSigma float64

	// FibreKmPerMs is the speed of light in fibre. Default 200 (c / 1.5).
	FibreKmPerMs float64
	// InflationShort, InflationLong and InflationScaleKm give the route
	// inflation of a path of great-circle length d within a region (how
	// much longer the route is than the great circle), before the random
	// factors; paths between regions go through hubs (see doc.go):
	//
	//	long + (short − long) · scale / (scale + d)
	//
	// Defaults 3.0, 1.2 and 600 km: about 2.3 at 400 km, 1.45 at 4,000 km,
	// 1.35 at 7,000 km. InflationShort must not be below InflationLong,
	// which must be at least 1.
	InflationShort   float64
	InflationLong    float64
	InflationScaleKm float64
	// CityPairSigma is the lognormal σ of a factor drawn once per pair of
	// cities: how directly the route between two cities runs, shared by
	// every host there. Default 0.05; negative: none.
	CityPairSigma float64
	// RouteSigma is the lognormal σ of a factor drawn once per pair of
	// (city, provider): the route two providers' networks take between
	// two cities (peering, transit choices). Default 0.03; negative: none.
	RouteSigma float64
	// HostPairSigma is the lognormal σ of a factor drawn per pair of
	// hosts (ECMP path, rack, host stack). Default 0.01; negative: none.
	HostPairSigma float64
	// SameProviderFactor multiplies the inflation of a pair whose hosts
	// share a provider (one backbone, no peering detour), and divides its
	// bad-route probability by 4. In (0, 1]; default 0.95.
	SameProviderFactor float64
	// PairConstMs is the largest per-pair constant added to the RTT
	// (router and host processing), uniform in [0, PairConstMs]. Default
	// 0.5; negative: none.
	PairConstMs float64
	// BadRouteShare is the probability that the route between two
	// (city, provider) pairs in well-peered regions is bad: tromboned
	// through a far exchange, adding BadRouteMinMs–BadRouteMaxMs (uniform)
	// to the RTT. Poorly peered regions multiply it (Africa ×3; Latin
	// America, the Middle East, South Asia and Greater China ×2; Southeast
	// Asia ×1.5).
	// Default 0.04; negative: no bad routes.
	BadRouteShare float64
	// BadRouteMinMs and BadRouteMaxMs bound a bad route's extra RTT.
	// Defaults 30 and 150.
	BadRouteMinMs float64
	BadRouteMaxMs float64

	// JitterFrac and JitterMinMs give a Sample's queueing delay: exponential
	// with mean JitterFrac·RTT + JitterMinMs, added to the true RTT.
	// Defaults 0.03 and 0.1; negative: none.
	JitterFrac  float64
	JitterMinMs float64
	// NoiseTailShare is the share of Samples whose queueing delay comes
	// from a heavy tail instead: Pareto with shape NoiseTailShape and the
	// exponential's mean as its scale (a probe that met a burst or a busy
	// host). Zero, the default: none.
	NoiseTailShare float64
	// NoiseTailShape is that Pareto's shape α. Default 1.5 (a tail with
	// no finite variance).
	NoiseTailShape float64
	// UnderShare is the share of Samples that read below the true RTT, by
	// up to UnderMaxFrac of it (uniform): timer granularity, a path that
	// changed since. Zero, the default: none, a Sample is never below the
	// RTT.
	UnderShare   float64
	UnderMaxFrac float64 // default 0.1

	// DriftShare is the share of routes (pairs of (city, provider)) on a
	// worse route at any moment: a route change that moves its traffic
	// to a longer path for a while. Each route redraws its state every
	// DriftHours, with its own phase; when on a worse route, its
	// propagation is longer by up to DriftMaxFrac (uniform, drawn afresh
	// each time). A World with drift answers for the moment World.At
	// sets (time 0 unless set). Zero, the default: none, RTTs are static.
	DriftShare   float64
	DriftMaxFrac float64 // default 0.3
	DriftHours   float64 // default 1

	// LossBase and LossPer100Ms give a path's packet loss rate per
	// direction from its true RTT: LossBase + LossPer100Ms·RTT/100 ms,
	// times a lognormal route factor with σ LossSigma, plus
	// EndpointAccessLoss for each home/office end (RandomEndpoint,
	// EndpointIn; not relays or servers), capped at
	// LossMax. Defaults 0.0001, 0.0025, 0.5, 0.001 and 0.05: about 0.04%
	// between neighbouring European cities, 0.2% across the Atlantic,
	// 0.7% from Europe to Australia. Negative: none (LossMax: no cap).
	LossBase           float64
	LossPer100Ms       float64
	LossSigma          float64
	EndpointAccessLoss float64
	LossMax            float64

	// Churn, per relay, as rates per hour of a two-state process: an alive
	// relay leaves gracefully at LeavePerHour and fails (vanishes without
	// notice) at FailPerHour; a down relay joins at JoinPerHour. A share
	// InitialDownShare of relays is down at time 0 (they join later).
	// All zero (no churn) by default; none may be negative.
	JoinPerHour      float64
	LeavePerHour     float64
	FailPerHour      float64
	InitialDownShare float64
}

// The routing effects fitted to the King data set's detours
// (WithKingDetours).
const (
	KingBadRouteShare = 0.04
	KingRouteSigma    = 0.08
)

// WithKingDetours returns c with its bad routes and route spread fitted
// towards the share of one-hop detours published for the King data set
// (a shorter detour for 85 % of pairs, one at least 20 % shorter for
// 22 %): the grid's best point gives a world of 500 relays 83 % and 21 %
// (the default world: 77 % and 7 %).
// The fit and its source: docs/defaults.md#the-modelled-internet.
func (c Config) WithKingDetours() Config {
	c.BadRouteShare, c.RouteSigma = KingBadRouteShare, KingRouteSigma
	return c
}

// Defaults returns the default configuration, every field set.
func Defaults() Config {
	return Config{
		Relays:              500,
		Providers:           20,
		EndpointISPs:        10,
		MetroRadiusKm:       20,
		RelayAccessMs:       0.5,
		RelayAccessSigma:    0.7,
		EndpointAccessMs:    5,
		EndpointAccessSigma: 0.5,
		FibreKmPerMs:        200,
		InflationShort:      3.0,
		InflationLong:       1.2,
		InflationScaleKm:    600,
		CityPairSigma:       0.05,
		RouteSigma:          0.03,
		HostPairSigma:       0.01,
		SameProviderFactor:  0.95,
		PairConstMs:         0.5,
		BadRouteShare:       0.04,
		BadRouteMinMs:       30,
		BadRouteMaxMs:       150,
		JitterFrac:          0.03,
		JitterMinMs:         0.1,
		NoiseTailShape:      1.5,
		UnderMaxFrac:        0.1,
		DriftMaxFrac:        0.3,
		DriftHours:          1,
		LossBase:            0.0001,
		LossPer100Ms:        0.0025,
		LossSigma:           0.5,
		EndpointAccessLoss:  0.001,
		LossMax:             0.05,
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := Defaults()
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.Relays, d.Relays)
	setInt(&c.Providers, d.Providers)
	setInt(&c.EndpointISPs, d.EndpointISPs)
	set(&c.MetroRadiusKm, d.MetroRadiusKm)
	set(&c.RelayAccessMs, d.RelayAccessMs)
	set(&c.RelayAccessSigma, d.RelayAccessSigma)
	set(&c.EndpointAccessMs, d.EndpointAccessMs)
	set(&c.EndpointAccessSigma, d.EndpointAccessSigma)
	set(&c.FibreKmPerMs, d.FibreKmPerMs)
	set(&c.InflationShort, d.InflationShort)
	set(&c.InflationLong, d.InflationLong)
	set(&c.InflationScaleKm, d.InflationScaleKm)
	set(&c.CityPairSigma, d.CityPairSigma)
	set(&c.RouteSigma, d.RouteSigma)
	set(&c.HostPairSigma, d.HostPairSigma)
	set(&c.SameProviderFactor, d.SameProviderFactor)
	set(&c.PairConstMs, d.PairConstMs)
	set(&c.BadRouteShare, d.BadRouteShare)
	set(&c.BadRouteMinMs, d.BadRouteMinMs)
	set(&c.BadRouteMaxMs, d.BadRouteMaxMs)
	set(&c.JitterFrac, d.JitterFrac)
	set(&c.JitterMinMs, d.JitterMinMs)
	set(&c.NoiseTailShape, d.NoiseTailShape)
	set(&c.UnderMaxFrac, d.UnderMaxFrac)
	set(&c.DriftMaxFrac, d.DriftMaxFrac)
	set(&c.DriftHours, d.DriftHours)
	set(&c.LossBase, d.LossBase)
	set(&c.LossPer100Ms, d.LossPer100Ms)
	set(&c.LossSigma, d.LossSigma)
	set(&c.EndpointAccessLoss, d.EndpointAccessLoss)
	set(&c.LossMax, d.LossMax)
	return c
}

// Validate reports the first field of c (after WithDefaults) that is out
// of range, naming it.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.Relays < 1 || c.Relays > MaxRelays {
		return fmt.Errorf("netsim: Relays = %d, want 1 to %d", c.Relays, MaxRelays)
	}
	if c.Providers < 1 || c.Providers > 1<<20 {
		return fmt.Errorf("netsim: Providers = %d, want 1 to %d", c.Providers, 1<<20)
	}
	if c.EndpointISPs < 1 || c.EndpointISPs > 1<<20 {
		return fmt.Errorf("netsim: EndpointISPs = %d, want 1 to %d", c.EndpointISPs, 1<<20)
	}
	type field struct {
		name   string
		v      float64
		lo, hi float64 // inclusive; NaN and ±Inf are always rejected
	}
	inf := math.Inf(1)
	neg := -inf // negative allowed: means none
	fields := []field{
		{"MetroRadiusKm", c.MetroRadiusKm, neg, 500},
		{"RelayAccessMs", c.RelayAccessMs, 0.2, 5},
		{"RelayAccessSigma", c.RelayAccessSigma, neg, 3},
		{"EndpointAccessMs", c.EndpointAccessMs, 1, 30},
		{"EndpointAccessSigma", c.EndpointAccessSigma, neg, 3},
		{"FibreKmPerMs", c.FibreKmPerMs, 1, 300},
		{"InflationShort", c.InflationShort, c.InflationLong, 20},
		{"InflationLong", c.InflationLong, 1, 20},
		{"InflationScaleKm", c.InflationScaleKm, 1, 20000},
		{"CityPairSigma", c.CityPairSigma, neg, 2},
		{"RouteSigma", c.RouteSigma, neg, 2},
		{"HostPairSigma", c.HostPairSigma, neg, 2},
		{"SameProviderFactor", c.SameProviderFactor, math.SmallestNonzeroFloat64, 1},
		{"PairConstMs", c.PairConstMs, neg, 100},
		{"BadRouteShare", c.BadRouteShare, neg, 1},
		{"BadRouteMinMs", c.BadRouteMinMs, 0, c.BadRouteMaxMs},
		{"BadRouteMaxMs", c.BadRouteMaxMs, 0, 10000},
		{"JitterFrac", c.JitterFrac, neg, 10},
		{"JitterMinMs", c.JitterMinMs, neg, 1000},
		{"NoiseTailShare", c.NoiseTailShare, 0, 1},
		{"NoiseTailShape", c.NoiseTailShape, 0.5, 10},
		{"UnderShare", c.UnderShare, 0, 1},
		{"UnderMaxFrac", c.UnderMaxFrac, 0, 0.9},
		{"DriftShare", c.DriftShare, 0, 1},
		{"DriftMaxFrac", c.DriftMaxFrac, 0, 10},
		{"DriftHours", c.DriftHours, 1.0 / 60, 1e4},
		{"LossBase", c.LossBase, neg, 1},
		{"LossPer100Ms", c.LossPer100Ms, neg, 1},
		{"LossSigma", c.LossSigma, neg, 3},
		{"EndpointAccessLoss", c.EndpointAccessLoss, neg, 1},
		{"LossMax", c.LossMax, neg, 1},
		{"JoinPerHour", c.JoinPerHour, 0, 1e6},
		{"LeavePerHour", c.LeavePerHour, 0, 1e6},
		{"FailPerHour", c.FailPerHour, 0, 1e6},
		{"InitialDownShare", c.InitialDownShare, 0, 1},
	}
	for _, f := range fields {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < f.lo || f.v > f.hi {
			lo := "any negative (none)"
			if f.lo != neg {
				lo = fmt.Sprint(f.lo)
			}
			return fmt.Errorf("netsim: %s = %v, want %s to %v", f.name, f.v, lo, f.hi)
		}
	}
	return nil
}

// none turns the "negative means none" convention into the value used.
func none(v float64) float64 { return max(v, 0) }
