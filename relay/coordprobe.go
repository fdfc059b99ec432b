package relay

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// prober is what the measurer runs and publishes, whichever the probe
// mode.
type prober interface {
	// Run probes until ctx ends.
	Run(ctx context.Context)
	// Snapshot is this relay's own measurements: what it publishes, and
	// what /v1/measurements?scope=local serves.
	Snapshot() []registry.Pair
}

// coordinated is a prober that also has a network coordinate (probe mode
// coordinates), published with its pairs.
type coordinated interface {
	prober
	Coordinate() *coordinate.Coordinate
}

// meshProber probes every peer every probe interval (probe mode mesh).
type meshProber struct {
	self string
	p    *probe.Prober
}

func (m meshProber) Run(ctx context.Context) { m.p.Run(ctx) }

func (m meshProber) Snapshot() []registry.Pair { return registry.PairsFrom(m.self, m.p.Snapshot()) }

// coordPeers lists the fleet's other relays with the coordinates they
// published, and their admin addresses by name.
type coordPeers func(ctx context.Context) ([]coord.Peer, map[string]string)

// coordProber probes in mode coordinates: one peer per interval (a minute
// / probe.per_minute), the one its coord.Node picks from the fleet, so the
// cost stays per_minute handshakes whatever the fleet size. Each answer
// moves the relay's coordinate; what it publishes are the node's windows
// of the peers in its probe set.
type coordProber struct {
	self    string
	node    *coord.Node
	timeout time.Duration
	peers   coordPeers
	// fresh, when set, reads the coordinate the probed peer publishes
	// now: peers' may be minutes old (coord.FleetViewEvery), and the
	// probed peer's moves this relay's.
	fresh func(ctx context.Context, peer string) (*coordinate.Coordinate, error)
	// measure takes one sample, as the mesh prober does: relayd's goes
	// through the relay policy (Server.relayProbe).
	measure func(ctx context.Context, addr string) (time.Duration, error)
	metrics *metrics
	log     *zap.Logger

	mu sync.Mutex
	// failed holds, per peer whose newest probe failed, when and why: a
	// pair says so (LastError), as the mesh prober's do.
	failed map[string]probeFailure
}

type probeFailure struct {
	at  time.Time
	err string
}

// newCoordProber makes the prober of mode coordinates. Its node's random
// peers come from a source seeded per process: relays started together
// must not draw the same ones.
func newCoordProber(self string, cfg ProbeConfig, peers coordPeers, measure func(context.Context, string) (time.Duration, error), m *metrics, log *zap.Logger) (*coordProber, error) {
	node, err := coord.NewNode(self, cfg.coordConfig(), rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	if err != nil {
		return nil, err
	}
	m.coordNode.Store(node)
	return &coordProber{
		self: self, node: node, timeout: cfg.Timeout, peers: peers, measure: measure,
		metrics: m, log: log, failed: map[string]probeFailure{},
	}, nil
}

// Run probes one peer at once, then one every interval, until ctx ends. A
// probe slower than the interval delays the next rather than overlapping
// it: the budget is a ceiling.
func (p *coordProber) Run(ctx context.Context) {
	t := time.NewTicker(p.node.Interval())
	defer t.Stop()
	for {
		p.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce picks one peer and probes it once: the one handshake a tick.
func (p *coordProber) probeOnce(ctx context.Context) {
	peers, admins := p.peers(ctx)
	name, ok := p.node.NextTarget(time.Now(), peers)
	p.metrics.probeSetSize.Set(float64(p.node.ProbeSetSize()))
	if !ok {
		return
	}
	peer := coord.Peer{Name: name}
	for _, q := range peers {
		if q.Name == name {
			peer = q
			break
		}
	}
	mctx, cancel := context.WithTimeout(ctx, p.timeout)
	rtt, err := p.measure(mctx, admins[name])
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not a failed probe
	}
	if p.fresh != nil && err == nil {
		fctx, cancel := context.WithTimeout(ctx, p.timeout)
		c, ferr := p.fresh(fctx, name)
		cancel()
		switch {
		case ferr != nil:
			p.log.Debug("reading the probed peer's coordinate failed; using the one last read with the fleet's", zap.String("peer", name), zap.Error(ferr))
		case c != nil:
			peer.Coord = c
		}
	}
	now := time.Now()
	// A refused connect measured the path, but the relay is down: it
	// counts as failed, so that its pair does not look answering.
	p.metrics.probes.WithLabelValues(probeResult(err)).Inc()
	p.node.Observe(now, peer, float64(rtt)/float64(time.Millisecond), err != nil)
	p.mu.Lock()
	if err != nil {
		p.failed[name] = probeFailure{at: now, err: err.Error()}
	} else {
		delete(p.failed, name)
	}
	p.mu.Unlock()
	if err != nil {
		p.log.Debug("probe failed", zap.String("peer", name), zap.String("admin", admins[name]), zap.Error(err))
	}
}

// Snapshot is the node's measurements as pairs: the median of the window
// as the RTT, Samples every probe in it, answered or not, and Loss the
// failed share, as the mesh prober's windows count them. P90 and jitter
// are not kept in this mode.
func (p *coordProber) Snapshot() []registry.Pair {
	ms := p.node.Measured(time.Now())
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]registry.Pair, 0, len(ms))
	measured := make(map[string]bool, len(ms))
	for _, m := range ms {
		measured[m.Peer] = true
		n := m.Samples + m.Failures
		if n == 0 {
			continue
		}
		pr := registry.Pair{
			From: p.self, To: m.Peer, RTTMs: m.MedianMs, MinMs: m.MinMs,
			Samples: n, Loss: float64(m.Failures) / float64(n), UpdatedAt: m.LastAt,
		}
		if f, ok := p.failed[m.Peer]; ok && f.at.Equal(m.LastAt) {
			pr.LastError = f.err
		}
		out = append(out, pr)
	}
	// Peers that left the probe set and whose results expired.
	for name := range p.failed {
		if !measured[name] {
			delete(p.failed, name)
		}
	}
	return out
}

// Coordinate is this relay's network coordinate.
func (p *coordProber) Coordinate() *coordinate.Coordinate { return p.node.Coordinate() }
