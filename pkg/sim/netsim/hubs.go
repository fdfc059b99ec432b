package netsim

import (
	"math"
	"sync"
)

// Traffic between two regions does not follow the great circle: it leaves
// its region at a hub (a city where submarine and long-haul systems land
// and networks meet), crosses on backbone links between hubs, and enters
// the other region at a hub. Europe to Japan goes Marseille–Suez–
// Singapore–Tokyo or London–New York–Los Angeles–Tokyo, not over Siberia.
// A path between regions is the shortest, in RTT, over
//
//	city → hub of its region → backbone → hub of the other region → city
//
// where the legs inside a region and the links between two hubs of one
// region cost what the same-region model gives (great circle times the
// distance's inflation), and the links between regions cost the RTTs
// below. Because a detour through a hub city costs nearly nothing extra,
// relays there are natural split points, as on the real internet.

// hubs are the hub cities, by name; each is a hub of its own region.
var hubs = []string{
	"New York", "Miami", "Los Angeles", "San Jose", "Seattle", "Honolulu",
	"Sao Paulo", "Bogota", "Santiago",
	"London", "Marseille",
	"Cape Town", "Lagos", "Mombasa", "Cairo",
	"Dubai", "Tel Aviv",
	"Mumbai", "Chennai",
	"Tokyo",
	"Hong Kong", "Shanghai",
	"Singapore",
	"Sydney", "Perth", "Auckland", "Hagatna",
}

// hubLinks are the backbone links between regions, with the typical RTT
// (ms) publicly quoted between well-connected data centres in the two
// cities, less about 2 ms of access: the order of magnitude of
// transatlantic, transpacific, Suez and Africa systems. Chosen, not
// fitted; doc.go says so.
var hubLinks = []struct {
	a, b string
	ms   float64
}{
	{"London", "New York", 70},
	{"Miami", "Sao Paulo", 105},
	{"Miami", "Bogota", 50},
	{"Los Angeles", "Santiago", 125},
	{"Los Angeles", "Tokyo", 105},
	{"San Jose", "Tokyo", 100},
	{"Seattle", "Tokyo", 95},
	{"Honolulu", "Tokyo", 90},
	{"Honolulu", "Sydney", 100},
	{"Los Angeles", "Hong Kong", 150},
	{"Los Angeles", "Sydney", 140},
	{"Los Angeles", "Auckland", 125},
	{"Tokyo", "Hong Kong", 48},
	{"Tokyo", "Shanghai", 35},
	{"Tokyo", "Singapore", 70},
	{"Tokyo", "Hagatna", 40},
	{"Hong Kong", "Singapore", 35},
	{"Singapore", "Sydney", 92},
	{"Singapore", "Perth", 50},
	{"Singapore", "Chennai", 35},
	{"Singapore", "Mumbai", 58},
	{"Singapore", "Marseille", 145},
	{"Mumbai", "Marseille", 105},
	{"Mumbai", "Dubai", 30},
	{"Mumbai", "Mombasa", 80},
	{"Dubai", "Marseille", 95},
	{"Tel Aviv", "Marseille", 45},
	{"Cairo", "Marseille", 45},
	{"Mombasa", "Marseille", 115},
	{"Lagos", "London", 95},
	{"Cape Town", "London", 140},
}

// backbone is a world's hub routing: per city, the RTT to each hub of its
// region, and between cities of different regions, the propagation RTT of
// the best hub route and its entry and exit hubs.
type backbone struct {
	interMs [][]float64 // [cityA][cityB]: best hub route, ms; unused within a region
	via     [][][2]int16
}

// localMs is the same-region propagation RTT over distance d.
func (c *Config) localMs(dKm float64) float64 {
	s := c.InflationScaleKm
	return 2 * dKm / c.FibreKmPerMs * (c.InflationLong + (c.InflationShort-c.InflationLong)*s/(s+dKm))
}

// backbones caches the backbone of each distinct set of the parameters it
// depends on: worlds that differ only in seed or relay count share one.
var backbones sync.Map // backboneKey → *backbone

type backboneKey struct{ fibre, short, long, scale float64 }

func backboneFor(cfg *Config) *backbone {
	k := backboneKey{cfg.FibreKmPerMs, cfg.InflationShort, cfg.InflationLong, cfg.InflationScaleKm}
	if b, ok := backbones.Load(k); ok {
		return b.(*backbone)
	}
	b, _ := backbones.LoadOrStore(k, newBackbone(cfg))
	return b.(*backbone)
}

func newBackbone(cfg *Config) *backbone {
	hubCity := make([]int, len(hubs))
	for i, name := range hubs {
		c, ok := CityIndex(name)
		if !ok {
			panic("netsim: hub " + name + " is not in the city table")
		}
		hubCity[i] = c
	}
	hubOf := func(name string) int {
		for i, h := range hubs {
			if h == name {
				return i
			}
		}
		panic("netsim: link end " + name + " is not a hub")
	}
	// Shortest hub-to-hub RTTs (Floyd–Warshall over a few dozen hubs).
	n := len(hubs)
	sp := make([][]float64, n)
	for i := range sp {
		sp[i] = make([]float64, n)
		for j := range sp[i] {
			switch {
			case i == j:
			case cities[hubCity[i]].Region == cities[hubCity[j]].Region:
				sp[i][j] = cfg.localMs(CityDistanceKm(hubCity[i], hubCity[j]))
			default:
				sp[i][j] = math.Inf(1)
			}
		}
	}
	for _, l := range hubLinks {
		i, j := hubOf(l.a), hubOf(l.b)
		sp[i][j], sp[j][i] = min(sp[i][j], l.ms), min(sp[j][i], l.ms)
	}
	for k := range n {
		for i := range n {
			for j := range n {
				if d := sp[i][k] + sp[k][j]; d < sp[i][j] {
					sp[i][j] = d
				}
			}
		}
	}
	// Each city's legs to the hubs of its region.
	type leg struct {
		hub int
		ms  float64
	}
	legs := make([][]leg, len(cities))
	for c := range cities {
		for h, hc := range hubCity {
			if cities[hc].Region == cities[c].Region {
				legs[c] = append(legs[c], leg{h, cfg.localMs(CityDistanceKm(c, hc))})
			}
		}
		if len(legs[c]) == 0 {
			panic("netsim: region " + cities[c].Region.String() + " has no hub")
		}
	}
	b := &backbone{interMs: make([][]float64, len(cities)), via: make([][][2]int16, len(cities))}
	for a := range cities {
		b.interMs[a] = make([]float64, len(cities))
		b.via[a] = make([][2]int16, len(cities))
	}
	// Computed once per unordered pair and mirrored, so that RTTs are
	// symmetric to the last bit.
	for a := range cities {
		b.via[a][a] = [2]int16{-1, -1}
		for c := range a {
			if cities[a].Region == cities[c].Region {
				b.via[a][c], b.via[c][a] = [2]int16{-1, -1}, [2]int16{-1, -1}
				continue
			}
			best, via := math.Inf(1), [2]int16{-1, -1}
			for _, la := range legs[a] {
				for _, lc := range legs[c] {
					if d := la.ms + sp[la.hub][lc.hub] + lc.ms; d < best {
						best, via = d, [2]int16{int16(hubCity[la.hub]), int16(hubCity[lc.hub])}
					}
				}
			}
			if math.IsInf(best, 0) {
				panic("netsim: no hub route from " + cities[a].Name + " to " + cities[c].Name)
			}
			b.interMs[a][c], b.interMs[c][a] = best, best
			b.via[a][c], b.via[c][a] = via, [2]int16{via[1], via[0]}
		}
	}
	return b
}
