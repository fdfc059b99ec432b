package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"
)

// The Consul layout, documented in docs/registry.md: every relay registers
// one instance of ConsulService (ID ConsulServiceIDPrefix+name) and writes
// its measurements, a JSON list of Pair, at ConsulKVPrefix+name.
const (
	ConsulService         = "relaymesh"
	ConsulServiceIDPrefix = "relaymesh-"
	ConsulKVPrefix        = "relaymesh/measurements/"
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
)

// ConsulOptions configure the Consul backend.
type ConsulOptions struct {
	// Addr is the HTTP API of a Consul agent: host:port or
	// http(s)://host:port. Empty: $CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	// The other CONSUL_* variables of the Consul CLI (TLS, CA) apply too.
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
	// the ages fresh without a Raft write per probe. Default 10 s.
	PublishEvery time.Duration
	// WatchCoalesce is the least time between two reads of the measurement
	// prefix: every relay's write wakes every watcher, and each read
	// carries the whole matrix. Default 1 s.
	WatchCoalesce time.Duration
	// WaitTime bounds one blocking query. Default 30 s.
	WaitTime time.Duration
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

// Staleness is implemented by registries that can lose touch with their
// source (Consul): stale is true while it cannot be reached, and since is
// when it last answered (when the registry was opened if it never did).
type Staleness interface {
	Stale() (stale bool, since time.Time)
}

// Consul is the Consul backend. Relays are the instances of the relaymesh
// service with their Consul health, measurements live in KV, and Consul's
// network coordinates estimate the pairs nobody measured yet. Run keeps a
// cache current with blocking queries; Relays and Pairs answer from it, so
// they keep answering (with the last known data) while Consul is down.
type Consul struct {
	client *api.Client
	opts   ConsulOptions
	addr   string // for messages; never the token
	log    *zap.Logger

	regMu   sync.Mutex // one (re-)registration at a time
	writeMu sync.Mutex // one KV write at a time: a late write must not overwrite a newer one

	mu          sync.Mutex
	relays      []consulRelay
	measured    map[string][]Pair
	coords      map[string]*coordinate.Coordinate // Consul node -> coordinate
	coordsAt    time.Time
	mine        map[string]*published // from -> what Publish was given and what reached KV
	failing     map[string]time.Time  // loop -> failing since; empty while in touch
	lastContact time.Time             // when Consul last answered; NewConsul's time until it does
	epoch       uint64                // bumped on every failure: blocking loops restart from index 0
	gen         chan struct{}         // closed on recovery: abandons queries stuck on a dead connection
	watchers    watchers
	badKeys     map[string]bool // undecodable KV keys already logged
	left        bool            // Deregister was called: never register or write again
}

type consulRelay struct {
	Relay
	node string
}

type published struct {
	pairs     []Pair    // newest given to Publish
	written   []Pair    // what is in KV
	writtenAt time.Time // zero: never written, or lost
}

// NewConsul returns a Consul registry. It does not contact Consul: Run (in
// relayd) or Refresh (in a one-shot reader) does.
func NewConsul(opts ConsulOptions) (*Consul, error) {
	cfg := api.DefaultConfig()
	if opts.Addr != "" {
		cfg.Address = opts.Addr
	}
	if opts.Token != "" {
		cfg.Token = opts.Token
	}
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
		mine: map[string]*published{}, failing: map[string]time.Time{},
		gen: make(chan struct{}), badKeys: map[string]bool{}, lastContact: time.Now(),
	}, nil
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
// unwritten ones included) and, for every pair of registered relays that
// nobody measured, the RTT estimated from the Consul nodes' coordinates
// (Estimated: true), sorted by (from, to).
func (c *Consul) Pairs(context.Context) ([]Pair, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	newest := newestPairs{}
	for _, ps := range c.measured {
		newest.add(ps)
	}
	for _, m := range c.mine {
		newest.add(m.pairs)
	}
	for _, a := range c.relays {
		for _, b := range c.relays {
			k := [2]string{a.Name, b.Name}
			if a.Name == b.Name {
				continue
			}
			if _, ok := newest[k]; ok {
				continue
			}
			ca, cb := c.coords[a.node], c.coords[b.node]
			d, ok := CoordinateDistance(ca, cb)
			if !ok {
				continue
			}
			ms := float64(d) / float64(time.Millisecond)
			newest[k] = Pair{From: a.Name, To: b.Name, RTTMs: ms, MinMs: ms, P90Ms: ms, Estimated: true, UpdatedAt: c.coordsAt}
		}
	}
	return newest.sorted(), nil
}

// CoordinateDistance is the RTT Consul's Vivaldi coordinates predict
// between two nodes, as Consul computes it (serf's Coordinate.DistanceTo,
// Consul's lib.ComputeDistance): the Euclidean distance of the vectors plus
// both heights, plus both adjustments when that sum stays positive. ok is
// false when either is missing, invalid or of another dimension.
func CoordinateDistance(a, b *coordinate.Coordinate) (d time.Duration, ok bool) {
	if a == nil || b == nil || len(a.Vec) != len(b.Vec) || !a.IsValid() || !b.IsValid() {
		return 0, false
	}
	sum := 0.0
	for i := range a.Vec {
		x := a.Vec[i] - b.Vec[i]
		sum += x * x
	}
	dist := math.Sqrt(sum) + a.Height + b.Height
	if adjusted := dist + a.Adjustment + b.Adjustment; adjusted > 0 {
		dist = adjusted
	}
	return time.Duration(dist * float64(time.Second)), true
}

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
		if !ok || o.Answering() != p.Answering() || math.Abs(o.Loss-p.Loss) >= 0.05 || p.Samples >= 2*o.Samples {
			return true
		}
		if math.Abs(o.RTTMs-p.RTTMs) > math.Max(0.5, 0.1*o.RTTMs) {
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

// Watch signals when the registered relays or the measurements changed
// (coordinates, which drift all the time, do not signal).
func (c *Consul) Watch(ctx context.Context) <-chan struct{} { return c.watchers.add(ctx) }

// Stale reports whether Consul cannot be reached right now (Relays and
// Pairs then answer with the last known data) and when it last answered.
func (c *Consul) Stale() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failing) > 0, c.lastContact
}

func (c *Consul) selfName() string {
	if c.opts.Self == nil {
		return ""
	}
	return c.opts.Self.Name
}

func (c *Consul) serviceID() string { return ConsulServiceIDPrefix + c.opts.Self.Name }

// Register registers Self with the agent (again: it is idempotent).
func (c *Consul) Register(ctx context.Context) error {
	s := c.opts.Self
	if s == nil {
		return errors.New("consul: no relay to register")
	}
	addr := s.SOCKS
	if addr == "" {
		addr = s.HTTP
	}
	host, port := splitListen(addr)
	if host == "" {
		host = s.Advertise
	}
	meta := map[string]string{"name": s.Name}
	for k, v := range map[string]string{"region": s.Region, "socks": s.SOCKS, "http": s.HTTP, "admin": s.Admin, "relay": s.Relay} {
		if v != "" {
			meta[k] = v
		}
	}
	var tags []string
	if s.Region != "" {
		tags = append(tags, "region:"+s.Region)
	}
	checkURL := s.CheckURL
	if checkURL == "" && s.Admin != "" {
		h, p := splitListen(s.Admin)
		switch {
		case h == "" && s.Advertise != "":
			h = s.Advertise // a remote agent checks the address peers use
		case h == "":
			h = "127.0.0.1" // a wildcard admin listener answers the local agent on loopback
		}
		checkURL = "http://" + net.JoinHostPort(h, strconv.Itoa(p)) + "/healthz"
	}
	reg := &api.AgentServiceRegistration{
		ID: c.serviceID(), Name: ConsulService, Tags: tags, Meta: meta, Address: host, Port: port,
	}
	if checkURL != "" {
		chk := &api.AgentServiceCheck{
			CheckID:                        "relaymesh-" + s.Name + "-healthz",
			Name:                           "relayd admin /healthz",
			HTTP:                           checkURL,
			Method:                         http.MethodGet,
			Interval:                       orDefault(s.CheckInterval, 5*time.Second).String(),
			Timeout:                        orDefault(s.CheckTimeout, 2*time.Second).String(),
			DeregisterCriticalServiceAfter: orDefault(s.DeregisterOnFail, time.Minute).String(),
			// A relay that failed its check is used again only after
			// this many passing checks in a row, not one lucky answer.
			SuccessBeforePassing: ConsulChecksToPass,
		}
		// The relay registers once its admin API serves /healthz, so it
		// starts passing instead of critical until the agent's first check,
		// which Consul staggers by up to an interval.
		if !s.StartCritical {
			chk.Status = api.HealthPassing
		}
		reg.Check = chk
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := c.client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: registering %s: %w", c.addr, reg.ID, err)
	}
	return nil
}

// ConsulChecksToPass is how many passing checks in a row bring a relay
// whose check failed back to passing (Consul's success_before_passing).
const ConsulChecksToPass = 3

// ensureRegistered registers Self if the agent does not know it (an agent
// restarted in -dev mode, or one that deregistered it after a long critical
// spell), then writes its measurements again: they may be gone too.
func (c *Consul) ensureRegistered(ctx context.Context) error {
	if c.opts.Self == nil {
		return nil
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.Lock()
	left := c.left
	c.mu.Unlock()
	if left {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, callTimeout)
	_, _, err := c.client.Agent().Service(c.serviceID(), (&api.QueryOptions{}).WithContext(qctx))
	cancel()
	var se api.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
	default:
		return fmt.Errorf("consul %s: looking up %s: %w", c.addr, c.serviceID(), err)
	}
	if err := c.Register(ctx); err != nil {
		return err
	}
	c.log.Info("registered with consul", zap.String("consul", c.addr), zap.String("service_id", c.serviceID()))
	return c.republish(ctx)
}

// republish writes Self's newest measurements now, if it has any.
func (c *Consul) republish(ctx context.Context) error {
	name := c.selfName()
	c.mu.Lock()
	_, ok := c.mine[name]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c.write(ctx, name)
}

// Deregister removes Self's service and measurements (relayd calls it on
// shutdown), for good: this registry will not register or write again,
// even if Run is still going. Its peers' measurements of it stay, and age.
func (c *Consul) Deregister(ctx context.Context) error {
	if c.opts.Self == nil {
		return nil
	}
	// Under regMu and writeMu: a registration or write in flight finishes
	// before the removal, not after it.
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var errs []error
	if err := c.client.Agent().ServiceDeregisterOpts(c.serviceID(), (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("deregistering %s: %w", c.serviceID(), err))
	}
	if _, err := c.client.KV().Delete(ConsulKVPrefix+c.opts.Self.Name, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("deleting %s%s: %w", ConsulKVPrefix, c.opts.Self.Name, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consul %s: %w", c.addr, err)
	}
	return nil
}

// Refresh reads the relays, the measurements and the coordinates once,
// without blocking (for one-shot readers such as relayctl).
func (c *Consul) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	q := func() *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
	if _, err := c.fetchServices(ctx, q()); err != nil {
		return fmt.Errorf("consul %s: %w", c.addr, err)
	}
	if _, err := c.fetchKV(ctx, q()); err != nil {
		return fmt.Errorf("consul %s: %w", c.addr, err)
	}
	// Coordinates are only a prior: without them the measured matrix is
	// still complete.
	_, _ = c.fetchCoords(ctx, q())
	c.mu.Lock()
	c.lastContact = time.Now()
	c.mu.Unlock()
	return nil
}

// Run registers Self (if set) and keeps the cache current until ctx ends:
// one blocking-query loop each for the relays, the measurements and the
// coordinates, and a ping of the agent every 5 s that notices an outage
// even when no query is answering. Failed loops retry with a backoff of at
// most 2 s, from a fresh (non-blocking) read.
func (c *Consul) Run(ctx context.Context) {
	if c.opts.Self != nil {
		if err := c.ensureRegistered(ctx); err != nil && ctx.Err() == nil {
			c.failed("register", err)
		} else if err == nil {
			c.succeeded("register")
		}
	}
	var wg sync.WaitGroup
	for _, l := range []struct {
		name     string
		coalesce time.Duration
		stale    bool // its failures make the data stale
		fetch    func(context.Context, *api.QueryOptions) (*api.QueryMeta, error)
	}{
		{"services", 0, true, c.fetchServices},
		{"measurements", c.opts.WatchCoalesce, true, c.fetchKV},
		{"coordinates", coordCoalesce, false, c.fetchCoords},
	} {
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

func (c *Consul) watchLoop(ctx context.Context, name string, coalesce time.Duration, countsForStale bool,
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
		sleep(ctx, coalesce)
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
	relays := relaysFrom(entries)
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
	return meta, nil
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

// splitListen splits a listen address; a wildcard or empty host is "".
func splitListen(addr string) (host string, port int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	port, _ = strconv.Atoi(p)
	if ip, err := netip.ParseAddr(h); err == nil && ip.IsUnspecified() {
		h = ""
	}
	return h, port
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

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
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
