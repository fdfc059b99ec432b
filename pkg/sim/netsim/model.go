package netsim

import (
	"math"
	"math/rand/v2"
)

// Tags keep the hashed draws of different model parts independent.
const (
	tagRelay uint64 = 0x52454c4159 + iota<<40
	tagCityPair
	tagRoute
	tagHostPair
	tagPairConst
	tagBadRoute
	tagBadRouteMs
	tagLoss
	tagChurn
	tagDriftPhase
	tagDrift
	tagDriftFrac
)

// badRouteWeight multiplies Config.BadRouteShare for routes touching a
// region (the larger of the two ends'): tromboning through a far exchange
// is common where local peering is thin.
var badRouteWeight = [numRegions]float64{
	NorthAmerica:  1,
	LatinAmerica:  2,
	Europe:        1,
	Africa:        3,
	MiddleEast:    2,
	SouthAsia:     2,
	EastAsia:      1,
	GreaterChina:  2,
	SoutheastAsia: 1.5,
	Oceania:       1,
}

// Path is the model's account of one pair's true RTT and loss, every
// component in the units its name says. RTTMs is
//
//	PropagationMs + BadRouteMs + AccessMs + ConstMs
type Path struct {
	DistanceKm float64 // great circle
	// Via are the city indices of the hubs where a path between regions
	// leaves the first point's region and enters the second's; −1 for a
	// path within a region, which is direct.
	Via          [2]int
	SameProvider bool
	// PropagationMs is the route's round-trip time in fibre: within a
	// region, the great circle's (2·DistanceKm/FibreKmPerMs) times the
	// distance's inflation; between regions, the best hub route's; times
	// the city-pair, route, host-pair and same-provider factors; never
	// below the great circle's.
	PropagationMs float64
	// Inflation is PropagationMs over the great circle's RTT (1 for a
	// zero distance).
	Inflation  float64
	BadRouteMs float64 // extra RTT of a bad route; 0 if the route is good
	// DriftMs is the extra RTT of the worse route the pair's traffic
	// takes at the World's moment (Config.DriftShare); 0 on its usual
	// route. It is part of PropagationMs.
	DriftMs  float64
	AccessMs float64 // both ends' access delays, both ways
	ConstMs  float64 // the per-pair constant
	RTTMs    float64 // the true (minimum) RTT
	LossRate float64 // packet loss rate, each direction
}

// RTTMs is the true RTT between two points: the least any probe can
// measure. It is symmetric, positive between distinct points, 0 from a
// point to itself, and O(1): computed from the points and hashes of the
// seed and the pair, nothing stored per pair.
func (w *World) RTTMs(a, b Point) float64 {
	if a.id == b.id {
		return 0
	}
	return w.path(a, b, false).RTTMs
}

// RelayRTTMs is RTTMs between relays i and j.
func (w *World) RelayRTTMs(i, j int) float64 { return w.RTTMs(w.relays[i], w.relays[j]) }

// LossRate is the path's true packet loss rate in each direction.
func (w *World) LossRate(a, b Point) float64 {
	if a.id == b.id {
		return 0
	}
	return w.path(a, b, true).LossRate
}

// ProbeLossRate is the probability that a probe, a TCP handshake's SYN and
// SYN-ACK, loses a packet: 1 − (1 − LossRate)².
func (w *World) ProbeLossRate(a, b Point) float64 {
	p := w.LossRate(a, b)
	return 1 - (1-p)*(1-p)
}

// Path explains the pair's true RTT and loss rate.
func (w *World) Path(a, b Point) Path {
	if a.id == b.id {
		return Path{Via: [2]int{-1, -1}, Inflation: 1, SameProvider: true}
	}
	return w.path(a, b, true)
}

// Sample is one probe (a TCP handshake) from a to b: lost with
// ProbeLossRate, else the true RTT plus a queueing delay drawn from rnd,
// exponential with mean JitterFrac·RTT + JitterMinMs (a share
// NoiseTailShare of them from a Pareto tail instead). A lost probe's rttMs
// is 0; a probe is never faster than RTTMs, unless UnderShare makes a
// share of them read below it.
func (w *World) Sample(a, b Point, rnd *rand.Rand) (rttMs float64, lost bool) {
	if a.id == b.id {
		return 0, false
	}
	p := w.path(a, b, true)
	if rnd.Float64() < 1-(1-p.LossRate)*(1-p.LossRate) {
		return 0, true
	}
	cfg := &w.cfg
	mean := none(cfg.JitterFrac)*p.RTTMs + none(cfg.JitterMinMs)
	// The draws the default world makes come first and alone, so a world
	// without the tail or the under-reads samples as it always did.
	queueMs := mean * rnd.ExpFloat64()
	if cfg.NoiseTailShare > 0 && rnd.Float64() < cfg.NoiseTailShare {
		// Pareto with scale mean: mean · U^(−1/α), U uniform in (0, 1].
		queueMs = mean * math.Pow(1-rnd.Float64(), -1/cfg.NoiseTailShape)
	}
	if cfg.UnderShare > 0 && rnd.Float64() < cfg.UnderShare {
		return p.RTTMs * (1 - cfg.UnderMaxFrac*rnd.Float64()), false
	}
	return p.RTTMs + queueMs, false
}

func (w *World) path(a, b Point, withLoss bool) Path {
	cfg := &w.cfg
	var p Path
	p.DistanceKm = DistanceKm(a, b)
	ca, cb := uint64(a.city), uint64(b.city)
	ra, rb := cities[a.city].Region, cities[b.city].Region
	gcMs := 2 * p.DistanceKm / cfg.FibreKmPerMs
	var prop float64
	if ra == rb {
		prop = cfg.localMs(p.DistanceKm)
		p.Via = [2]int{-1, -1}
	} else {
		prop = w.bb.interMs[ca][cb]
		v := w.bb.via[ca][cb]
		p.Via = [2]int{int(v[0]), int(v[1])}
	}
	routeA, routeB := ca<<32|uint64(a.provider), cb<<32|uint64(b.provider)
	hostA, hostB := a.id, b.id
	if routeA > routeB || routeA == routeB && hostA > hostB {
		routeA, routeB, hostA, hostB = routeB, routeA, hostB, hostA
	}
	ca, cb = routeA>>32, routeB>>32
	prop *= w.lognormalHash(tagCityPair, ca, cb, cfg.CityPairSigma)
	prop *= w.lognormalHash(tagRoute, routeA, routeB, cfg.RouteSigma)
	prop *= w.lognormalHash(tagHostPair, hostA, hostB, cfg.HostPairSigma)
	badShare := none(cfg.BadRouteShare) * max(badRouteWeight[ra], badRouteWeight[rb])
	if a.provider == b.provider {
		p.SameProvider = true
		prop *= cfg.SameProviderFactor
		badShare /= 4
	}
	p.DriftMs = w.driftFrac(routeA, routeB) * max(prop, gcMs)
	p.PropagationMs = max(prop, gcMs) + p.DriftMs
	p.Inflation = 1
	if gcMs > 0 {
		p.Inflation = p.PropagationMs / gcMs
	}
	if badShare > 0 && w.uniformHash(tagBadRoute, routeA, routeB) < badShare {
		p.BadRouteMs = cfg.BadRouteMinMs + (cfg.BadRouteMaxMs-cfg.BadRouteMinMs)*w.uniformHash(tagBadRouteMs, routeA, routeB)
	}
	p.AccessMs = 2 * (a.accessMs + b.accessMs)
	p.ConstMs = none(cfg.PairConstMs) * w.uniformHash(tagPairConst, hostA, hostB)
	p.RTTMs = p.PropagationMs + p.BadRouteMs + p.AccessMs + p.ConstMs
	if withLoss {
		loss := (none(cfg.LossBase) + none(cfg.LossPer100Ms)*p.RTTMs/100) * w.lognormalHash(tagLoss, routeA, routeB, cfg.LossSigma)
		for _, end := range [2]Point{a, b} {
			if !end.dc {
				loss += none(cfg.EndpointAccessLoss)
			}
		}
		if cfg.LossMax >= 0 {
			loss = min(loss, cfg.LossMax)
		}
		p.LossRate = min(loss, 1)
	}
	return p
}

// driftFrac is how much longer the route between two (city, provider)
// pairs is at the World's moment than usual, as a fraction of its
// propagation (Config.DriftShare): 0 on its usual route. The route's
// state holds for DriftHours, each route starting its periods at its own
// phase, and is drawn afresh (by hash) for each period.
func (w *World) driftFrac(routeA, routeB uint64) float64 {
	cfg := &w.cfg
	if cfg.DriftShare <= 0 {
		return 0
	}
	phase := w.uniformHash(tagDriftPhase, routeA, routeB)
	period := uint64(math.Floor(w.atHours/cfg.DriftHours + phase))
	key := mix(routeB, period)
	if w.uniformHash(tagDrift, routeA, key) >= cfg.DriftShare {
		return 0
	}
	return cfg.DriftMaxFrac * w.uniformHash(tagDriftFrac, routeA, key)
}

// uniformHash is a uniform number in (0, 1) fixed by the seed, the tag
// and the (ordered) pair.
func (w *World) uniformHash(tag, x, y uint64) float64 {
	return toUnit(mix(mix(mix(w.seed, tag), x), y))
}

// lognormalHash is e^(σZ), Z a standard normal fixed by the seed, the tag
// and the (ordered) pair; 1 if σ ≤ 0.
func (w *World) lognormalHash(tag, x, y uint64, sigma float64) float64 {
	if sigma <= 0 {
		return 1
	}
	h := mix(mix(mix(w.seed, tag), x), y)
	u1, u2 := toUnit(h), toUnit(splitmix64(h))
	z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2) // Box–Muller
	return math.Exp(sigma * z)
}

// splitmix64 is the SplitMix64 finaliser: a bijective 64-bit mixer.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// mix hashes v into the state h.
func mix(h, v uint64) uint64 { return splitmix64(h ^ splitmix64(v)) }

// toUnit maps 64 random bits to (0, 1).
func toUnit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }
