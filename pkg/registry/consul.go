package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"
)

// The Consul layout, documented in docs/registry.md: every relay registers
// one instance of ConsulService (ID ConsulServiceIDPrefix+name), writes its
// measurements, a JSON list of Pair, at ConsulKVPrefix+name, and (probe mode
// coordinates) its network coordinate, a JSON Coordinate, at
// ConsulCoordinatesPrefix+name.
const (
	ConsulService           = "relaymesh"
	ConsulServiceIDPrefix   = "relaymesh-"
	ConsulKVPrefix          = "relaymesh/measurements/"
	ConsulCoordinatesPrefix = "relaymesh/coordinates/"
)

// Defaults of ConsulOptions.
const (
	DefaultConsulPublishEvery  = 10 * time.Second
	DefaultConsulWatchCoalesce = time.Second
	DefaultConsulWaitTime      = 30 * time.Second
)

// Timings of the connection to Consul. maxBackoff bounds the retry gap of
// every loop after an error: a returning agent is seen within ~2 s, well
// inside the 10 s catch-up target.
const (
	minBackoff    = 100 * time.Millisecond
	maxBackoff    = 2 * time.Second
	pingEvery     = 5 * time.Second
	callTimeout   = 5 * time.Second
	coordCoalesce = 10 * time.Second
	// relayCoordCoalesce is the least time between two reads of the
	// relays' coordinates: each read carries every relay's, and they
	// drift all the time, a write per relay every PublishEvery.
	relayCoordCoalesce = 10 * time.Second
)

// ConsulOptions configure the Consul backend.
type ConsulOptions struct {
	// Addr is the HTTP API of a Consul agent: host:port or
	// http(s)://host:port. Setting it is what chooses Consul in Open. The
	// other CONSUL_* variables of the Consul CLI (TLS, CA) apply too.
	Addr string
	// Token is the ACL token. Empty: $CONSUL_HTTP_TOKEN, else anonymous.
	Token string
	// Self, when set, is the relay running this registry: Run registers it
	// (and registers it again if the agent forgets it), and Publish only
	// accepts its measurements. Nil for a reader such as relayctl.
	Self *SelfRegistration
	// Log hears outages and recoveries (once each); nil: silent.
	Log *zap.Logger
	// PublishEvery: Publish writes at once when a measurement changed
	// materially (see material), otherwise at most this often, to keep
	// the ages fresh without a Raft write per probe. PublishCoordinate
	// writes at most this often (at once the first time). Default 10 s.
	PublishEvery time.Duration
	// WatchCoalesce is the least time between two reads of the measurement
	// prefix: every relay's write wakes every watcher, and each read
	// carries the whole matrix. Default 1 s.
	WatchCoalesce time.Duration
	// WaitTime bounds one blocking query. Default 30 s.
	WaitTime time.Duration
	// CoordinatesOnly makes Run watch the relays and their own
	// coordinates only, not the measurements nor Consul's node
	// coordinates: a relay in probe mode coordinates that does not route
	// by plan needs no other relay's pairs, and reading them is what grows
	// with the fleet (every relay's write wakes every watcher, and each
	// read carries every relay's pairs). Pairs then answers with this
	// relay's own only. The relays and their coordinates are read every
	// coord.FleetViewEvery of the fleet's size (10 s to 10 minutes), the
	// coordinate of a peer alone at will (CoordinateOf).
	// Refresh reads everything regardless.
	CoordinatesOnly bool
}

// SelfRegistration is how a relay describes itself in Consul. Listen
// addresses with a wildcard host (0.0.0.0, ::) are published as they are;
// readers put the service's (else the Consul node's) address in its place.
type SelfRegistration struct {
	Name, Region string
	SOCKS, HTTP  string
	Admin        string
	Relay        string // native relay listener; "": none
	// Advertise is the address peers reach this relay at when its
	// listeners are wildcards (0.0.0.0:1080); "": the Consul node's address
	// (right with an agent on the relay's own host).
	Advertise        string
	CheckURL         string        // the HTTP check the agent polls; "": http://<Admin>/healthz
	CheckInterval    time.Duration // default 5 s
	CheckTimeout     time.Duration // default 2 s
	DeregisterOnFail time.Duration // DeregisterCriticalServiceAfter, default 1 min
	StartCritical    bool          // start the check critical instead of passing
}

// Consul is the Consul backend. Relays are the instances of the relaymesh
// service with their Consul health, measurements and the relays' own
// coordinates live in KV, and Consul's network coordinates (of its nodes,
// not the relays') estimate the pairs nobody measured yet. Run keeps a
// cache current with blocking queries; Relays and Pairs answer from it, so
// they keep answering (with the last known data) while Consul is down.
type Consul struct {
	// started is when this registry (its relayd) started: the coordinates
	// it publishes have been measured since (Coordinate.MeasuredForS).
	started time.Time
	client  *api.Client
	opts    ConsulOptions
	addr    string // for messages; never the token
	log     *zap.Logger

	regMu   sync.Mutex // one (re-)registration at a time
	writeMu sync.Mutex // one KV write at a time: a late write must not overwrite a newer one

	mu          sync.Mutex
	relays      []consulRelay
	measured    map[string][]Pair
	coords      map[string]*coordinate.Coordinate // Consul node -> coordinate
	coordsAt    time.Time
	relayCoords map[string]Coordinate // relay -> its own coordinate, from KV
	// relayCoordsEvery is the least gap between two reads of the relays'
	// coordinates (relayCoordCoalesce; tests shorten it).
	relayCoordsEvery time.Duration
	mine             map[string]*published // from -> what Publish was given and what reached KV
	failing          map[string]time.Time  // loop -> failing since; empty while in touch
	lastContact      time.Time             // when Consul last answered; newConsul's time until it does
	epoch            uint64                // bumped on every failure: blocking loops restart from index 0
	gen              chan struct{}         // closed on recovery: abandons queries stuck on a dead connection
	watchers         watchers
	badKeys          map[string]bool // undecodable KV keys already logged
	left             bool            // Deregister was called: never register or write again
	// pairsRead is the measurements' read RefreshBeforePairs left going,
	// which Pairs and MeasuredPairs wait for; nil: none.
	pairsRead *pendingRead
}

type consulRelay struct {
	Relay
	node string
}

type published struct {
	pairs     []Pair    // newest given to Publish
	written   []Pair    // what is in KV
	writtenAt time.Time // zero: never written, or lost
	// coord is the newest given to PublishCoordinate (nil: none), and
	// coordWrittenAt when it last reached KV (zero: never, or lost).
	coord          *Coordinate
	coordWrittenAt time.Time
}

// newConsul returns a Consul registry (Open's Consul half). It does not
// contact Consul: Run (in relayd) or Refresh (in a one-shot reader) does.
func newConsul(opts ConsulOptions) (*Consul, error) {
	cfg := api.DefaultConfig()
	if opts.Addr != "" {
		cfg.Address = opts.Addr
	}
	if opts.Token != "" {
		cfg.Token = opts.Token
	}
	// An agent on this host is read without gzip: on loopback the bytes
	// cost nothing, and compressing them costs the agent more than the
	// read (docs/registry.md, "Traffic cost").
	cfg.Transport.DisableCompression = loopbackAgent(cfg.Address)
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul %s: %w", cfg.Address, err)
	}
	if opts.Self != nil && opts.Self.Name == "" {
		return nil, errors.New("consul: the relay registering itself needs a name")
	}
	if opts.PublishEvery <= 0 {
		opts.PublishEvery = DefaultConsulPublishEvery
	}
	if opts.WatchCoalesce < 0 {
		opts.WatchCoalesce = 0
	} else if opts.WatchCoalesce == 0 {
		opts.WatchCoalesce = DefaultConsulWatchCoalesce
	}
	if opts.WaitTime <= 0 {
		opts.WaitTime = DefaultConsulWaitTime
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	return &Consul{
		client: client, opts: opts, addr: cfg.Address, log: opts.Log,
		measured: map[string][]Pair{}, coords: map[string]*coordinate.Coordinate{},
		relayCoords: map[string]Coordinate{}, relayCoordsEvery: relayCoordCoalesce,
		mine: map[string]*published{}, failing: map[string]time.Time{},
		gen: make(chan struct{}), badKeys: map[string]bool{}, lastContact: time.Now(), started: time.Now(),
	}, nil
}

// loopbackAgent says the agent's address (host:port, with an optional
// http:// or https://) is on this host's loopback. A unix socket's
// transport is the Consul client's own, which this one does not reach.
func loopbackAgent(addr string) bool {
	for _, scheme := range []string{"http://", "https://"} {
		addr = strings.TrimPrefix(addr, scheme)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the agent address in use (for messages).
func (c *Consul) Addr() string { return c.addr }

// Relays lists the registered relays, sorted by name, with their Consul
// health: healthy when every check (the node's and the /healthz check) is
// passing.
func (c *Consul) Relays(context.Context) ([]Relay, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Relay, 0, len(c.relays))
	for _, r := range c.relays {
		out = append(out, r.Relay)
	}
	return out, nil
}

// Pairs returns the measured pairs (newest per pair, this process's own
// unwritten ones included) and, in a fleet of at most MaxEstimatedRelays
// relays, for every pair of registered relays that nobody measured, the
// RTT estimated from the Consul nodes' coordinates (Estimated: true),
// sorted by (from, to). A larger fleet gets the measured pairs alone: the
// estimates grow as the square of the fleet, and building them took
// minutes at 5,000 relays (docs/registry.md, "Estimated pairs").
func (c *Consul) Pairs(ctx context.Context) ([]Pair, error) {
	if err := c.awaitPairs(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	measured := c.measuredLocked()
	if len(c.relays) > MaxEstimatedRelays {
		return measured, nil
	}
	return c.withEstimatesLocked(measured), nil
}

// MeasuredPairs returns the measured pairs alone, as Pairs does without
// the estimates (MeasuredStore).
func (c *Consul) MeasuredPairs(ctx context.Context) ([]Pair, error) {
	if err := c.awaitPairs(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.measuredLocked(), nil
}

// measuredLocked is the newest measurement of each pair, sorted by (from,
// to). c.mu must be held.
func (c *Consul) measuredLocked() []Pair {
	newest := newestPairs{}
	for _, ps := range c.measured {
		newest.add(ps)
	}
	for _, m := range c.mine {
		newest.add(m.pairs)
	}
	return newest.sorted()
}

// CoordinateOf reads relay's own coordinate from KV now, one value of
// ~300 bytes, and keeps it: ok is false when it has published none that
// can be used. A relay that reads every relay's coordinate seldom
// (coord.FleetViewEvery) reads the peer it probes this way, for each probe.
func (c *Consul) CoordinateOf(ctx context.Context, relay string) (Coordinate, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// Any server may answer (AllowStale), not only the leader: twelve
	// reads a minute a relay, and a coordinate is an estimate.
	kv, _, err := c.client.KV().Get(ConsulCoordinatesPrefix+relay, (&api.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err != nil {
		return Coordinate{}, false, fmt.Errorf("consul %s: reading %s%s: %w", c.addr, ConsulCoordinatesPrefix, relay, err)
	}
	if kv == nil {
		return Coordinate{}, false, nil
	}
	rc, ok := c.decodeCoord(kv, time.Now())
	if !ok {
		return Coordinate{}, false, nil
	}
	c.mu.Lock()
	if old, had := c.relayCoords[relay]; !had || !old.UpdatedAt.After(rc.UpdatedAt) {
		c.relayCoords[relay] = rc
	}
	c.mu.Unlock()
	return rc, true, nil
}

// RelayOf reads the relay called name from Consul now, health included
// (ok false: not registered): for a reader whose instances may lag, a
// relay in mode coordinates (CoordinatesOnly) asked to forward to a relay
// that joined since its last read. One instance's read, however large
// the fleet.
func (c *Consul) RelayOf(ctx context.Context, name string) (Relay, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	q := &api.QueryOptions{Filter: relayFilter(name)}
	entries, _, err := c.client.Health().Service(ConsulService, "", false, q.WithContext(ctx))
	if err != nil {
		return Relay{}, false, fmt.Errorf("consul %s: reading relay %s: %w", c.addr, name, err)
	}
	for _, r := range relaysFrom(entries) {
		if r.Name == name {
			return r.Relay, true, nil
		}
	}
	return Relay{}, false, nil
}

// relayFilter selects the instances of the relay called name (relaysFrom
// names an instance by its meta, else its ID).
func relayFilter(name string) string {
	return fmt.Sprintf("Service.Meta.name == %q or Service.ID == %q", name, ConsulServiceIDPrefix+name)
}

// Coordinates returns the relays' own coordinates as read from KV (this
// process's own newest included, written or not), newest per relay, sorted
// by relay.
func (c *Consul) Coordinates(context.Context) ([]Coordinate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	newest := newestCoords{}
	for _, rc := range c.relayCoords {
		newest.add(rc)
	}
	for _, m := range c.mine {
		if m.coord != nil {
			newest.add(*m.coord)
		}
	}
	return newest.sorted(), nil
}

// Watch signals when the registered relays or the measurements changed
// (coordinates, which drift all the time, do not signal).
func (c *Consul) Watch(ctx context.Context) <-chan struct{} { return c.watchers.add(ctx) }

func (c *Consul) selfName() string {
	if c.opts.Self == nil {
		return ""
	}
	return c.opts.Self.Name
}
