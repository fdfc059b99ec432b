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

// addEstimates adds to newest, for every pair of registered relays it
// lacks, the RTT the relays' Consul nodes' coordinates predict (Estimated:
// true, as old as the coordinates). c.mu must be held.
func (c *Consul) addEstimates(newest newestPairs) {
	for _, a := range c.relays {
		for _, b := range c.relays {
			k := [2]string{a.Name, b.Name}
			if a.Name == b.Name {
				continue
			}
			if _, ok := newest[k]; ok {
				continue
			}
			ms, ok := coord.EstimateMs(c.coords[a.node], c.coords[b.node])
			if !ok {
				continue
			}
			newest[k] = Pair{From: a.Name, To: b.Name, RTTMs: ms, MinMs: ms, P90Ms: ms, Estimated: true, UpdatedAt: c.coordsAt}
		}
	}
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
