package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"
)

// material says whether fresh measurements differ enough from those in KV
// to be written now rather than at the next PublishEvery: a peer appeared
// or went, started or stopped answering, its loss moved by 5 points, its
// median by more than max(10%, 0.5 ms), or its sample count doubled (while
// a new peer's window fills, a 1-sample median is worth replacing soon).
// Loopback and LAN medians wander by tens of microseconds every probe;
// those are not worth a Raft write.
func material(old, fresh []Pair) bool {
	if len(old) != len(fresh) {
		return true
	}
	byTo := make(map[string]Pair, len(old))
	for _, p := range old {
		byTo[p.To] = p
	}
	for _, p := range fresh {
		o, ok := byTo[p.To]
		if !ok || o.Answering() != p.Answering() || math.Abs(o.Loss-p.Loss) >= 0.05 || o.LossLearnt != p.LossLearnt || p.Samples >= 2*o.Samples {
			return true
		}
		if math.Abs(o.RTTMs-p.RTTMs) > math.Max(0.5, 0.1*o.RTTMs) {
			return true
		}
		if (o.SendBps > 0) != (p.SendBps > 0) || math.Abs(o.SendBps-p.SendBps) > 0.2*o.SendBps || o.SendSource != p.SendSource {
			return true
		}
	}
	return false
}

// Publish records the measurements relay from made and writes them to
// ConsulKVPrefix+from when they changed materially or the last write is
// PublishEvery old. With Self set, from must be Self's name.
func (c *Consul) Publish(ctx context.Context, from string, pairs []Pair) error {
	if from == "" || (c.opts.Self != nil && from != c.opts.Self.Name) {
		return fmt.Errorf("consul registry of %q cannot publish for %q", c.selfName(), from)
	}
	c.mu.Lock()
	m := c.mine[from]
	if m == nil {
		m = &published{}
		c.mine[from] = m
	}
	m.pairs = slices.Clone(pairs)
	need := m.writtenAt.IsZero() || time.Since(m.writtenAt) >= c.opts.PublishEvery || material(m.written, pairs)
	need = need && !c.left
	c.mu.Unlock()
	if !need {
		return nil
	}
	return c.write(ctx, from)
}

// write puts the newest pairs of from into KV.
func (c *Consul) write(ctx context.Context, from string) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	m := c.mine[from]
	var pairs []Pair
	if m != nil {
		pairs = slices.Clone(m.pairs)
	}
	left := c.left && from == c.selfName()
	c.mu.Unlock()
	if left {
		return nil
	}
	if pairs == nil {
		pairs = []Pair{} // "[]", not "null": the relay measured nothing yet
	}
	body, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := c.client.KV().Put(&api.KVPair{Key: ConsulKVPrefix + from, Value: body}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: writing %s%s: %w", c.addr, ConsulKVPrefix, from, err)
	}
	c.mu.Lock()
	if m != nil {
		m.written, m.writtenAt = pairs, time.Now()
	}
	c.mu.Unlock()
	return nil
}

// PublishCoordinate records relay's network coordinate and writes it to
// ConsulCoordinatesPrefix+relay the first time and then at most every
// PublishEvery: a coordinate moves a little with every probe, and a Raft
// write per probe per relay is what the probe budget is there to avoid.
// With Self set, relay must be Self's name.
func (c *Consul) PublishCoordinate(ctx context.Context, relay string, coord *coordinate.Coordinate) error {
	if relay == "" || (c.opts.Self != nil && relay != c.opts.Self.Name) {
		return fmt.Errorf("consul registry of %q cannot publish a coordinate for %q", c.selfName(), relay)
	}
	if !saneCoord(coord) {
		return fmt.Errorf("consul registry of %q: coordinate %+v is not a usable one (finite, at most %d dimensions, within %d s)", relay, coord, maxCoordDims, maxCoordSeconds)
	}
	c.mu.Lock()
	m := c.mine[relay]
	if m == nil {
		m = &published{}
		c.mine[relay] = m
	}
	m.coord = ownCoordinate(relay, coord, c.started)
	need := (m.coordWrittenAt.IsZero() || time.Since(m.coordWrittenAt) >= c.opts.PublishEvery) && !c.left
	c.mu.Unlock()
	if !need {
		return nil
	}
	return c.writeCoord(ctx, relay)
}

// writeCoord puts the newest coordinate of relay into KV: one value of
// ~250 bytes, whatever the fleet's size.
func (c *Consul) writeCoord(ctx context.Context, relay string) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	var coord *Coordinate
	if m := c.mine[relay]; m != nil && m.coord != nil {
		cp := *m.coord
		coord = &cp
	}
	left := c.left && relay == c.selfName()
	c.mu.Unlock()
	if left || coord == nil {
		return nil
	}
	body, err := json.Marshal(coord)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := c.client.KV().Put(&api.KVPair{Key: ConsulCoordinatesPrefix + relay, Value: body}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: writing %s%s: %w", c.addr, ConsulCoordinatesPrefix, relay, err)
	}
	c.mu.Lock()
	if m := c.mine[relay]; m != nil {
		m.coordWrittenAt = time.Now()
	}
	c.mu.Unlock()
	return nil
}

// republish writes Self's newest measurements and coordinate now, those it
// has.
func (c *Consul) republish(ctx context.Context) error {
	name := c.selfName()
	c.mu.Lock()
	m, ok := c.mine[name]
	hasCoord := ok && m.coord != nil
	c.mu.Unlock()
	if !ok {
		return nil
	}
	err := c.write(ctx, name)
	if hasCoord {
		err = errors.Join(err, c.writeCoord(ctx, name))
	}
	return err
}
