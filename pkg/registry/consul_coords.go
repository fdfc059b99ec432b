package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"
	"github.com/relaymesh/relaymesh/pkg/coord"
)

// CoordinateDistance is the RTT Consul's Vivaldi coordinates predict
// between two nodes, as Consul computes it (coord.EstimateMs as a
// duration). ok is false when either is missing, invalid or of another
// dimension.
func CoordinateDistance(a, b *coordinate.Coordinate) (d time.Duration, ok bool) {
	ms, ok := coord.EstimateMs(a, b)
	return time.Duration(ms * float64(time.Millisecond)), ok
}

// withEstimatesLocked is measured (sorted by (from, to)) and, for every
// ordered pair of registered relays it lacks, the RTT the relays' Consul
// nodes' coordinates predict (Estimated: true, as old as the
// coordinates), sorted the same way. The estimates are made in that order
// (c.relays is sorted by name) and merged as they are made: a million at
// 1,000 relays, each kept once. c.mu must be held.
func (c *Consul) withEstimatesLocked(measured []Pair) []Pair {
	placed := 0 // relays whose node has a coordinate: only their pairs are estimated
	for _, r := range c.relays {
		if c.coords[r.node] != nil {
			placed++
		}
	}
	out := make([]Pair, 0, len(measured)+placed*placed)
	for _, a := range c.relays {
		for _, b := range c.relays {
			if a.Name == b.Name {
				continue
			}
			est := Pair{From: a.Name, To: b.Name}
			for len(measured) > 0 && comparePairs(measured[0], est) < 0 {
				out, measured = append(out, measured[0]), measured[1:]
			}
			if len(measured) > 0 && comparePairs(measured[0], est) == 0 {
				continue // measured: emitted when the next estimate passes it
			}
			ms, ok := coord.EstimateMs(c.coords[a.node], c.coords[b.node])
			if !ok {
				continue
			}
			est.RTTMs, est.MinMs, est.P90Ms, est.Estimated, est.UpdatedAt = ms, ms, ms, true, c.coordsAt
			out = append(out, est)
		}
	}
	return append(out, measured...)
}

// fetchCoords reads the network coordinates of every node (the default
// network segment's where a node has several).
func (c *Consul) fetchCoords(_ context.Context, q *api.QueryOptions) (*api.QueryMeta, error) {
	entries, meta, err := c.client.Coordinate().Nodes(q)
	if err != nil {
		return nil, fmt.Errorf("reading coordinates: %w", err)
	}
	coords := map[string]*coordinate.Coordinate{}
	for _, e := range entries {
		if e.Coord == nil {
			continue
		}
		if _, ok := coords[e.Node]; ok && e.Segment != "" {
			continue
		}
		coords[e.Node] = e.Coord
	}
	c.mu.Lock()
	c.coords, c.coordsAt = coords, time.Now()
	c.mu.Unlock()
	return meta, nil
}
