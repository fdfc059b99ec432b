package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// BenchmarkConsulPairs times Consul.Pairs and MeasuredPairs after a read
// of a fleet whose relays each run on a Consul node of their own (so
// every node has a coordinate) and each published 16 measured pairs: what
// a planner's survey and relayd's /v1/measurements?scope=fleet ask of the
// cache. bench/run-consul-costs.sh reports it.
func BenchmarkConsulPairs(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		c := pairsBenchFleet(b, n)
		b.Run(fmt.Sprintf("relays=%d/with-estimates", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Pairs(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("relays=%d/measured", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.MeasuredPairs(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pairsBenchFleet is a Consul cache holding n relays on n nodes, each
// node with a coordinate, each relay with 16 measured pairs.
func pairsBenchFleet(b *testing.B, n int) *Consul {
	c, err := newConsul(ConsulOptions{Addr: "127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i := range n {
		name, node := fmt.Sprintf("r%05d", i), fmt.Sprintf("n%05d", i)
		c.relays = append(c.relays, consulRelay{Relay: Relay{Name: name}, node: node})
		c.coords[node] = &coordinate.Coordinate{Vec: []float64{float64(i%71) / 1e3, float64(i%53) / 1e3}}
		var ps []Pair
		for k := 1; k <= 16; k++ {
			ps = append(ps, Pair{From: name, To: fmt.Sprintf("r%05d", (i+k*97)%n), RTTMs: float64(k), Samples: 5, UpdatedAt: now})
		}
		c.measured[name] = ps
	}
	c.coordsAt = now
	return c
}
