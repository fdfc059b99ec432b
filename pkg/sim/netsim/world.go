package netsim

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// earthRadiusKm is the mean Earth radius.
const earthRadiusKm = 6371.0

// Access delay clamps, one way, ms.
const (
	relayAccessMinMs    = 0.2
	relayAccessMaxMs    = 5
	endpointAccessMinMs = 1
	endpointAccessMaxMs = 30
)

// endpointBit marks a Point's id as a non-relay's: relays' ids are their
// indices, so the two never collide.
const endpointBit = 1 << 63

// Point is a host of the world: a relay (World.Relay) or an endpoint, i.e.
// a client or a destination that is not a relay (World.RandomEndpoint,
// EndpointIn, ServerIn). It is a small immutable value; any two Points of
// one World have an RTT (World.RTTMs). Points are made only by a World and
// mean nothing to another.
type Point struct {
	id       uint64
	city     int32
	provider int32 // relays and servers: 0..Providers-1; endpoints: Providers + ISP
	dc       bool  // data-centre access (relays, servers), not home/office
	accessMs float64
	latDeg   float64
	lonDeg   float64
	x, y, z  float64 // unit vector of (latDeg, lonDeg)
}

// ID is the point's identity: a relay's index for relays; a random 64-bit
// number with the top bit set for the others.
func (p Point) ID() uint64 { return p.id }

// Relay returns the relay's index, and whether p is a relay.
func (p Point) Relay() (int, bool) {
	if p.id&endpointBit != 0 {
		return -1, false
	}
	return int(p.id), true
}

// City is the index of the point's city (CityAt, Cities).
func (p Point) City() int { return int(p.city) }

// Region is the routing region of the point's city.
func (p Point) Region() Region { return cities[p.city].Region }

// Provider is the point's network: a hosting provider 0..Providers-1 for
// relays and ServerIn hosts, Providers+k for an endpoint of access ISP k.
// Two points with one Provider route over one backbone.
func (p Point) Provider() int { return int(p.provider) }

// AccessMs is the point's one-way access delay: it adds twice this to
// every RTT it has.
func (p Point) AccessMs() float64 { return p.accessMs }

// LatDeg and LonDeg are the point's position (its city's centre moved by
// up to Config.MetroRadiusKm).
func (p Point) LatDeg() float64 { return p.latDeg }

// LonDeg: see LatDeg.
func (p Point) LonDeg() float64 { return p.lonDeg }

// World is a modelled internet: relays placed in cities, and the RTT and
// loss model between any two points. It is immutable after NewWorld and
// safe for concurrent use; every random choice comes from the seed, or
// from the *rand.Rand a method is given.
type World struct {
	cfg     Config
	seed    uint64
	relays  []Point
	cityCum []float64 // cumulative city weights
	provCum []float64 // cumulative provider weights
	bb      *backbone
	atHours float64 // the moment the world answers for (At), hours since the start
}

// NewWorld builds the world cfg (after WithDefaults) describes, every
// random choice drawn from seed. Relay i depends only on the seed, i and
// cfg, so a world of N relays holds the first N relays of any bigger one
// with the same seed and config.
func NewWorld(cfg Config, seed uint64) (*World, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &World{cfg: cfg, seed: seed}
	w.bb = backboneFor(&w.cfg)
	sum := 0.0
	w.cityCum = make([]float64, len(cities))
	for i, c := range cities {
		sum += c.Weight
		w.cityCum[i] = sum
	}
	sum = 0
	w.provCum = make([]float64, cfg.Providers)
	for k := range w.provCum {
		sum += 1 / float64(k+1)
		w.provCum[k] = sum
	}
	w.relays = make([]Point, cfg.Relays)
	for i := range w.relays {
		rnd := rand.New(rand.NewPCG(mix(seed, tagRelay), uint64(i)))
		city := pick(w.cityCum, rnd)
		w.relays[i] = w.newPoint(uint64(i), city, pick(w.provCum, rnd), true, rnd)
	}
	return w, nil
}

// At is the world at simulated time t since the start: the same relays,
// whose RTTs and loss are those of that moment (they differ from time 0's
// only with Config.DriftShare). It is a shallow copy of w: its slices are shared.
func (w *World) At(t time.Duration) *World {
	at := *w
	at.atHours = t.Hours()
	return &at
}

// Config is the world's configuration, defaults filled in.
func (w *World) Config() Config { return w.cfg }

// Seed is the seed the world was built from.
func (w *World) Seed() uint64 { return w.seed }

// NumRelays is the number of relays.
func (w *World) NumRelays() int { return len(w.relays) }

// Relay returns relay i (0 ≤ i < NumRelays).
func (w *World) Relay(i int) Point { return w.relays[i] }

// Relays returns a copy of all relays, index i being relay i.
func (w *World) Relays() []Point { return append([]Point(nil), w.relays...) }

// RandomEndpoint returns a client or destination host that is not a relay:
// in a city drawn by weight, with a home/office access delay
// (EndpointAccessMs) and one of the city's EndpointISPs access ISPs.
func (w *World) RandomEndpoint(rnd *rand.Rand) Point {
	return w.EndpointIn(pick(w.cityCum, rnd), rnd)
}

// EndpointIn is RandomEndpoint in a given city (an index of the city table).
func (w *World) EndpointIn(city int, rnd *rand.Rand) Point {
	isp := w.cfg.Providers + rnd.IntN(w.cfg.EndpointISPs)
	return w.newPoint(rnd.Uint64()|endpointBit, city, isp, false, rnd)
}

// RandomServer returns a destination host in a data centre that is not a
// relay: in a city drawn by weight, with a relay's access delay and
// hosting provider.
func (w *World) RandomServer(rnd *rand.Rand) Point {
	return w.ServerIn(pick(w.cityCum, rnd), rnd)
}

// ServerIn is RandomServer in a given city (an index of the city table).
func (w *World) ServerIn(city int, rnd *rand.Rand) Point {
	return w.newPoint(rnd.Uint64()|endpointBit, city, pick(w.provCum, rnd), true, rnd)
}

// newPoint places a host in city: its access delay (data-centre or
// home/office) and its spot within MetroRadiusKm of the centre, drawn from
// rnd in that order.
func (w *World) newPoint(id uint64, city, provider int, dc bool, rnd *rand.Rand) Point {
	c := cities[city]
	var acc float64
	if dc {
		acc = lognormal(rnd, w.cfg.RelayAccessMs, none(w.cfg.RelayAccessSigma), relayAccessMinMs, relayAccessMaxMs)
	} else {
		acc = lognormal(rnd, w.cfg.EndpointAccessMs, none(w.cfg.EndpointAccessSigma), endpointAccessMinMs, endpointAccessMaxMs)
	}
	lat, lon := c.LatDeg, c.LonDeg
	if r := none(w.cfg.MetroRadiusKm); r > 0 {
		dist := r * math.Sqrt(rnd.Float64())
		bearing := 2 * math.Pi * rnd.Float64()
		const kmPerDeg = earthRadiusKm * math.Pi / 180
		lat += dist * math.Cos(bearing) / kmPerDeg
		lon += dist * math.Sin(bearing) / (kmPerDeg * math.Cos(lat*math.Pi/180))
	}
	p := Point{id: id, city: int32(city), provider: int32(provider), dc: dc, accessMs: acc, latDeg: lat, lonDeg: lon}
	p.x, p.y, p.z = unitVector(lat, lon)
	return p
}

// unitVector is the unit vector of a latitude and longitude in degrees.
func unitVector(latDeg, lonDeg float64) (x, y, z float64) {
	la, lo := latDeg*math.Pi/180, lonDeg*math.Pi/180
	return math.Cos(la) * math.Cos(lo), math.Cos(la) * math.Sin(lo), math.Sin(la)
}

// DistanceKm is the great-circle distance between two points.
func DistanceKm(a, b Point) float64 {
	cx := a.y*b.z - a.z*b.y
	cy := a.z*b.x - a.x*b.z
	cz := a.x*b.y - a.y*b.x
	dot := a.x*b.x + a.y*b.y + a.z*b.z
	return earthRadiusKm * math.Atan2(math.Sqrt(cx*cx+cy*cy+cz*cz), dot)
}

// CityDistanceKm is the great-circle distance between two cities' centres.
func CityDistanceKm(a, b int) float64 {
	var p, q Point
	p.x, p.y, p.z = unitVector(cities[a].LatDeg, cities[a].LonDeg)
	q.x, q.y, q.z = unitVector(cities[b].LatDeg, cities[b].LonDeg)
	return DistanceKm(p, q)
}

// pick draws an index with probability proportional to its weight, given
// the cumulative weights.
func pick(cum []float64, rnd *rand.Rand) int {
	u := rnd.Float64() * cum[len(cum)-1]
	return min(sort.SearchFloat64s(cum, u), len(cum)-1)
}

// lognormal draws median·e^(σZ) clamped to [lo, hi].
func lognormal(rnd *rand.Rand, median, sigma, lo, hi float64) float64 {
	v := median
	if sigma > 0 {
		v *= math.Exp(sigma * rnd.NormFloat64())
	}
	return min(max(v, lo), hi)
}
