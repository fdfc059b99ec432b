package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/coord"
)

// Stale reports whether Consul cannot be reached right now (Relays and
// Pairs then answer with the last known data) and when it last answered.
func (c *Consul) Stale() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failing) > 0, c.lastContact
}

// Refresh reads the relays (fetchInstances: from the catalogue and the
// failing checks), the measurements, the relays' coordinates and Consul's
// node coordinates once, without blocking (for one-shot readers such as
// relayctl), the four at once: one after another they took most of a
// second at 5,000 relays on loopback (bench/results/consul-costs.md). It
// is RefreshBeforePairs waiting for the measurements too.
func (c *Consul) Refresh(ctx context.Context) error {
	if err := c.RefreshBeforePairs(ctx); err != nil {
		return err
	}
	return c.awaitPairs(ctx)
}

// RefreshBeforePairs reads what Refresh reads, for a reader that needs the
// relays and their coordinates before the measurements: a plan, which probes from
// the relays' coordinates first and ranks on the measurements after. It
// returns once the relays and their coordinates are read; the
// measurements (and Consul's node coordinates, which only estimate
// pairs) go on being read, within ctx and callTimeout, and Pairs and
// MeasuredPairs wait for them and fail as that read failed. At 5,000
// relays the measurements are half the bytes of the read
// (docs/registry.md, "Traffic cost").
func (c *Consul) RefreshBeforePairs(ctx context.Context) error {
	later := &pendingRead{done: make(chan struct{})}
	c.mu.Lock()
	c.pairsRead = later
	c.mu.Unlock()
	lctx, lcancel := context.WithTimeout(ctx, callTimeout)
	go func() {
		defer lcancel()
		defer close(later.done)
		q := func() *api.QueryOptions { return (&api.QueryOptions{}).WithContext(lctx) }
		var wg sync.WaitGroup
		wg.Go(func() { _, later.err = c.fetchKV(lctx, q()) })
		wg.Go(func() { _, _ = c.fetchCoords(lctx, q()) })
		wg.Wait()
		if later.err != nil {
			later.err = fmt.Errorf("consul %s: %w", c.addr, later.err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	q := func() *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
	var wg sync.WaitGroup
	var servicesErr error
	wg.Go(func() { servicesErr = c.fetchInstances(ctx, q) })
	wg.Go(func() { _, _ = c.fetchRelayCoords(ctx, q()) })
	wg.Wait()
	if servicesErr != nil {
		return fmt.Errorf("consul %s: %w", c.addr, servicesErr)
	}
	c.mu.Lock()
	c.lastContact = time.Now()
	c.mu.Unlock()
	return nil
}

// pendingRead is a read of the measurements RefreshBeforePairs left
// going: done is closed when it ends, err then says how.
type pendingRead struct {
	done chan struct{}
	err  error
}

// awaitPairs waits for the measurements' read RefreshBeforePairs left
// going, if any, and says how it ended.
func (c *Consul) awaitPairs(ctx context.Context) error {
	c.mu.Lock()
	later := c.pairsRead
	c.mu.Unlock()
	if later == nil {
		return nil
	}
	select {
	case <-later.done:
		return later.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run registers Self (if set) and keeps the cache current until ctx ends:
// one blocking-query loop each for the relays, the measurements, the
// relays' coordinates and Consul's node coordinates (the relays and their
// coordinates only, with ConsulOptions.CoordinatesOnly), and a ping of the
// agent every 5 s that notices an outage even when no query is answering.
// Failed loops retry with a backoff of at most 2 s, from a fresh
// (non-blocking) read.
func (c *Consul) Run(ctx context.Context) {
	if c.opts.Self != nil {
		if err := c.ensureRegistered(ctx); err != nil && ctx.Err() == nil {
			c.failed("register", err)
		} else if err == nil {
			c.succeeded("register")
		}
	}
	type loop struct {
		name     string
		coalesce func() time.Duration
		stale    bool // its failures make the data stale
		fetch    func(context.Context, *api.QueryOptions) (*api.QueryMeta, error)
	}
	every := func(d time.Duration) func() time.Duration { return func() time.Duration { return d } }
	// The relays' own coordinates steer which peers they probe, and are
	// estimates: missing them does not make the measurements stale. A
	// relay that watches the coordinates only reads them seldom
	// (coord.FleetViewEvery), and the coordinate of the peer it probes
	// alone (CoordinateOf); a planner reads them as often as they drift.
	// Such a relay reads the instances as seldom: it only chooses peers
	// from them, and a read is every instance with its checks, answered
	// at every change of any relay's health and every WaitTime without
	// one. A planner must see a relay go down within seconds.
	relayCoordsEvery, servicesEvery := every(c.relayCoordsEvery), every(0)
	if c.opts.CoordinatesOnly {
		relayCoordsEvery = func() time.Duration {
			c.mu.Lock()
			n := len(c.relayCoords)
			c.mu.Unlock()
			return max(coord.FleetViewEvery(n), c.relayCoordsEvery)
		}
		servicesEvery = relayCoordsEvery
	}
	loops := []loop{
		{"services", servicesEvery, true, c.fetchServices},
		{"relay coordinates", relayCoordsEvery, false, c.fetchRelayCoords},
	}
	if !c.opts.CoordinatesOnly {
		loops = append(loops,
			loop{"measurements", every(c.opts.WatchCoalesce), true, c.fetchKV},
			loop{"coordinates", every(coordCoalesce), false, c.fetchCoords})
	}
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.watchLoop(ctx, l.name, l.coalesce, l.stale, l.fetch)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.pingLoop(ctx)
	}()
	wg.Wait()
}

func (c *Consul) watchLoop(ctx context.Context, name string, coalesce func() time.Duration, countsForStale bool,
	fetch func(context.Context, *api.QueryOptions) (*api.QueryMeta, error)) {
	var index, epoch uint64
	backoff := minBackoff
	logged := ""
	for ctx.Err() == nil {
		c.mu.Lock()
		gen := c.gen
		if c.epoch != epoch {
			index, epoch = 0, c.epoch // the agent may have restarted: its indexes start again
		}
		c.mu.Unlock()
		// A blocking query answers within WaitTime plus Consul's jitter
		// (WaitTime/16); longer means a dead connection.
		qctx, cancel := context.WithTimeout(ctx, c.opts.WaitTime+c.opts.WaitTime/16+callTimeout)
		go func() {
			select {
			case <-gen:
				cancel()
			case <-qctx.Done():
			}
		}()
		meta, err := fetch(qctx, (&api.QueryOptions{WaitIndex: index, WaitTime: c.opts.WaitTime}).WithContext(qctx))
		abandoned := qctx.Err() != nil && isClosed(gen)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			index = 0
			if abandoned {
				continue // recovery: start again from a fresh read, now
			}
			if countsForStale {
				c.failed(name, err)
			} else if stale, _ := c.Stale(); !stale && logged == "" {
				// Logged once, and not during an outage, which is logged
				// on its own.
				logged = err.Error()
				c.log.Warn("consul: cannot read "+name+" (estimates only; measurements unaffected)", zap.Error(err))
			}
			sleep(ctx, backoff)
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff, logged = minBackoff, ""
		if countsForStale {
			c.succeeded(name)
		}
		switch {
		case meta.LastIndex < index:
			index = 0 // went backwards (a restore or a new cluster): Consul's advice is to start over
		default:
			index = max(meta.LastIndex, 1) // 0 would not block
		}
		sleep(ctx, coalesce())
	}
}

// pingLoop asks the agent for the cluster leader every pingEvery: a failure
// or no leader marks the data stale even while the blocking queries, which
// may hang on a dead connection, say nothing.
func (c *Consul) pingLoop(ctx context.Context) {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, callTimeout)
		leader, err := c.client.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(qctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil && leader == "" {
			err = errors.New("the agent knows no cluster leader")
		}
		if err != nil {
			c.failed("agent", err)
			continue
		}
		c.succeeded("agent")
		if c.opts.Self != nil {
			// Cheap (agent-local), and catches an agent that lost the
			// service while every query kept answering.
			if err := c.ensureRegistered(ctx); err != nil && ctx.Err() == nil {
				c.failed("register", err)
			} else if err == nil {
				c.succeeded("register")
			}
		}
	}
}

// failed records that loop could not reach Consul; the first failure of an
// outage is logged, with the time of the data now being served.
func (c *Consul) failed(loop string, err error) {
	c.mu.Lock()
	first := len(c.failing) == 0
	if _, ok := c.failing[loop]; !ok {
		c.failing[loop] = time.Now()
	}
	c.epoch++
	last := c.lastContact
	c.mu.Unlock()
	if first {
		c.log.Warn("consul unreachable: serving the last known relays and measurements (stale)",
			zap.String("consul", c.addr), zap.String("failed", loop), zap.Error(err),
			zap.Time("data_as_of", last), zap.Duration("stale_for", time.Since(last).Round(time.Millisecond)))
	}
}

// succeeded records that loop reached Consul. Any answer also proves the
// agent reachable with a leader (reads go to the leader), so it clears the
// ping's failure too. When nothing is failing any more, the recovery is
// logged, and the queries of the other loops are abandoned and started
// again: they may be hanging on a connection that died in the outage.
func (c *Consul) succeeded(loop string) {
	c.mu.Lock()
	since, was := c.failing[loop]
	delete(c.failing, loop)
	if s, ok := c.failing["agent"]; ok {
		delete(c.failing, "agent")
		if !was || s.Before(since) {
			since = s
		}
		was = true
	}
	recovered := was && len(c.failing) == 0
	c.lastContact = time.Now()
	if recovered {
		close(c.gen)
		c.gen = make(chan struct{})
	}
	c.mu.Unlock()
	if recovered {
		c.log.Info("consul reachable again: relays and measurements current", zap.String("consul", c.addr),
			zap.Duration("outage", time.Since(since).Round(time.Millisecond)))
	}
}

// fetchServices reads the relaymesh instances with their health.
func (c *Consul) fetchServices(ctx context.Context, q *api.QueryOptions) (*api.QueryMeta, error) {
	entries, meta, err := c.client.Health().Service(ConsulService, "", false, q)
	if err != nil {
		return nil, fmt.Errorf("reading service %s: %w", ConsulService, err)
	}
	c.setRelays(ctx, relaysFrom(entries))
	return meta, nil
}

// setRelays keeps relays as the fleet, tells the watchers if it changed,
// and registers Self again if it is not among them.
func (c *Consul) setRelays(ctx context.Context, relays []consulRelay) {
	c.mu.Lock()
	changed := !reflect.DeepEqual(relays, c.relays)
	c.relays = relays
	c.mu.Unlock()
	if changed {
		c.watchers.notify()
	}
	if self := c.selfName(); self != "" && !slices.ContainsFunc(relays, func(r consulRelay) bool { return r.Name == self }) {
		if err := c.ensureRegistered(ctx); err != nil && ctx.Err() == nil {
			c.failed("register", err)
		} else if err == nil {
			c.succeeded("register")
		}
	}
}

// relaysFrom turns service instances into relays, sorted by name; a name
// claimed twice keeps the instance with the lowest ID.
func relaysFrom(entries []*api.ServiceEntry) []consulRelay {
	// A reply may hold nil entries or entries without a service (a
	// malformed or hostile agent): drop them before anything reads them.
	entries = slices.DeleteFunc(slices.Clone(entries), func(e *api.ServiceEntry) bool { return e == nil || e.Service == nil })
	slices.SortFunc(entries, func(a, b *api.ServiceEntry) int { return strings.Compare(a.Service.ID, b.Service.ID) })
	seen := map[string]bool{}
	var out []consulRelay
	for _, e := range entries {
		m := e.Service.Meta
		name := m["name"]
		if name == "" {
			name = strings.TrimPrefix(e.Service.ID, ConsulServiceIDPrefix)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		host := e.Service.Address
		node := ""
		if e.Node != nil {
			node = e.Node.Node
			if host == "" {
				host = e.Node.Address
			}
		}
		out = append(out, consulRelay{node: node, Relay: Relay{
			Name: name, Region: m["region"],
			SOCKS: fillHost(m["socks"], host), HTTP: fillHost(m["http"], host), Admin: fillHost(m["admin"], host), Relay: fillHost(m["relay"], host),
			Healthy: e.Checks.AggregatedStatus() == api.HealthPassing, Health: "consul",
		}})
	}
	slices.SortFunc(out, func(a, b consulRelay) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// maxClockSkew is how far ahead of ours another relay's clock may be.
const maxClockSkew = time.Minute

// fetchKV reads every relay's measurements. A key only speaks for its own
// relay: pairs whose From is not the key's name are dropped.
func (c *Consul) fetchKV(ctx context.Context, q *api.QueryOptions) (*api.QueryMeta, error) {
	kvs, meta, err := c.client.KV().List(ConsulKVPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ConsulKVPrefix, err)
	}
	measured := map[string][]Pair{}
	for _, kv := range kvs {
		from := strings.TrimPrefix(kv.Key, ConsulKVPrefix)
		var ps []Pair
		if err := json.Unmarshal(kv.Value, &ps); err != nil {
			c.mu.Lock()
			logIt := !c.badKeys[kv.Key]
			c.badKeys[kv.Key] = true
			c.mu.Unlock()
			if logIt {
				c.log.Warn("consul: ignoring a measurement key that is not a JSON list of pairs", zap.String("key", kv.Key), zap.Error(err))
			}
			continue
		}
		// A key speaks only for its own relay, and only possible figures
		// count (fleet.go, sane). Timestamps come from the writer's clock:
		// up to maxClockSkew ahead is skew and counts as now; beyond, a
		// time that would never go stale.
		now := time.Now()
		measured[from] = slices.DeleteFunc(ps, func(p Pair) bool {
			ageS := now.Sub(p.UpdatedAt).Seconds()
			if ageS < 0 && ageS > -maxClockSkew.Seconds() {
				ageS = 0
			}
			return p.From != from || !sane(p, ageS)
		})
		for i := range measured[from] {
			if p := &measured[from][i]; p.UpdatedAt.After(now) {
				p.UpdatedAt = now
			}
		}
	}
	c.mu.Lock()
	changed := !reflect.DeepEqual(measured, c.measured)
	c.measured = measured
	self := c.selfName()
	_, lost := measured[self]
	m := c.mine[self]
	lost = self != "" && !lost && m != nil && !m.writtenAt.IsZero() && !c.left
	if lost {
		m.writtenAt = time.Time{}
	}
	c.mu.Unlock()
	if changed {
		c.watchers.notify()
	}
	if lost {
		// Written once and gone: the KV store was lost (an agent restarted in
		// -dev mode) or someone deleted it. Write it again at once.
		if err := c.write(ctx, self); err != nil && ctx.Err() == nil {
			c.log.Debug("consul: rewriting lost measurements failed; the next publish retries", zap.Error(err))
		}
	}
	return meta, nil
}

// decodeCoord is kv's coordinate, when it is a relay's own (its key names
// it) and possible (saneCoord); an undecodable key is logged once. Its
// time is taken as fetchKV takes the pairs': one ahead of now by more than
// maxClockSkew is refused, and by less is now.
func (c *Consul) decodeCoord(kv *api.KVPair, now time.Time) (Coordinate, bool) {
	relay := strings.TrimPrefix(kv.Key, ConsulCoordinatesPrefix)
	var rc Coordinate
	if err := json.Unmarshal(kv.Value, &rc); err != nil || rc.Relay != relay || !saneCoord(rc.Coord) {
		c.mu.Lock()
		logIt := !c.badKeys[kv.Key]
		c.badKeys[kv.Key] = true
		c.mu.Unlock()
		if logIt {
			c.log.Warn("consul: ignoring a coordinate key that is not this relay's coordinate as JSON",
				zap.String("key", kv.Key), zap.NamedError("decoding", err))
		}
		return Coordinate{}, false
	}
	switch ahead := rc.UpdatedAt.Sub(now); {
	case ahead > maxClockSkew:
		return Coordinate{}, false // would never go stale
	case ahead > 0:
		rc.UpdatedAt = now
	}
	return rc, true
}

// fetchRelayCoords reads every relay's own coordinate. A key only speaks
// for its own relay, and only a possible coordinate counts (saneCoord);
// timestamps are taken as fetchKV takes the pairs'. Self's coordinate,
// written once and gone, is written again at once (see fetchKV).
func (c *Consul) fetchRelayCoords(ctx context.Context, q *api.QueryOptions) (*api.QueryMeta, error) {
	kvs, meta, err := c.client.KV().List(ConsulCoordinatesPrefix, q)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ConsulCoordinatesPrefix, err)
	}
	now := time.Now()
	coords := make(map[string]Coordinate, len(kvs))
	for _, kv := range kvs {
		if rc, ok := c.decodeCoord(kv, now); ok {
			coords[rc.Relay] = rc
		}
	}
	c.mu.Lock()
	c.relayCoords = coords
	self := c.selfName()
	_, lost := coords[self]
	m := c.mine[self]
	lost = self != "" && !lost && m != nil && !m.coordWrittenAt.IsZero() && !c.left
	if lost {
		m.coordWrittenAt = time.Time{}
	}
	c.mu.Unlock()
	if lost {
		if err := c.writeCoord(ctx, self); err != nil && ctx.Err() == nil {
			c.log.Debug("consul: rewriting the lost coordinate failed; the next publish retries", zap.Error(err))
		}
	}
	return meta, nil
}

// fillHost puts host into a listen address published without one (a
// wildcard listener): peers reach it at the Consul node's address.
func fillHost(addr, host string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return addr
	}
	if ip, err := netip.ParseAddr(h); h == "" || (err == nil && ip.IsUnspecified()) {
		return net.JoinHostPort(host, p)
	}
	return addr
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
