package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/pkg/policy"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// measurer runs the prober against the fleet's other relays (every one in
// probe mode mesh, a budget of them in mode coordinates), publishes what it
// measures through the registry (a fleet file or Consul), with its network
// coordinate in mode coordinates, and keeps the registry's view of the
// fleet current. Its goroutines end when stop is called.
type measurer struct {
	self   string
	reg    registry.Registry
	probes prober
	// publishEvery is how often the pairs (and coordinate) are published:
	// every probe interval in mesh, every probe in coordinates.
	publishEvery time.Duration
	// loss is what the relay's tunnels taught it of each link's loss:
	// published in place of the probes' where it knows.
	loss *learnt.Loss[string]
	// rates is what the relay's tunnels taught it of the rate each peer's
	// path carries: published with the pairs.
	rates *learnt.Rates
	// capacity is what the relay's capacity probes measured of its sends
	// (capacityprobe.go): published where no tunnel taught a rate; nil
	// with probe.capacity off.
	capacity *capacityProbes
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	log      *zap.Logger
}

func (s *Server) startMeasuring() error {
	if s.cfg.Fleet == "" && s.cfg.Consul.Addr == "" {
		return nil
	}
	log := s.log.Named("measure")
	// Log when the pull outcome changes (a peer unreachable, back), not on
	// every pull; a refused file is retried every 2 s, and logged once.
	var reg registry.Registry
	lastPull, lastFile := "", ""
	events := registry.Events{
		OnPull: func(err error) {
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if msg == lastPull {
				return
			}
			lastPull = msg
			if err != nil {
				log.Warn("cannot read every peer's measurements; using the last known", zap.Error(err))
			} else {
				log.Info("reading every peer's measurements")
			}
		},
		OnFile: func(err error) {
			switch {
			case err == nil:
				lastFile = ""
				relays, _ := reg.Relays(context.Background())
				s.log.Info("fleet file re-read", zap.Int("relays", len(relays)))
			case err.Error() != lastFile:
				lastFile = err.Error()
				s.fleetFileProblem(err)
			}
		},
	}
	// Only routing by plan reads other relays' pairs; in probe mode
	// coordinates a relay's own probing needs their coordinates, and
	// fresh measurements of only the peers it probes.
	sparse := s.cfg.Probe.Mode == ProbeCoordinates && s.cfg.Routing != "plan"
	var probing atomic.Pointer[coord.Node]
	var pullOnly func() []string
	if sparse {
		pullOnly = func() []string {
			if n := probing.Load(); n != nil {
				return n.ProbeSet()
			}
			return nil
		}
	}
	// The bound addresses, not the configured ones: port 0 means "any".
	reg, err := s.openRegistry(registry.SelfRegistration{
		Name: s.cfg.Name, Region: s.cfg.Region,
		SOCKS: s.SOCKSAddr(), HTTP: s.HTTPAddr(), Admin: s.AdminAddr(), Relay: s.RelayAddr(),
		Advertise: cmp.Or(s.cfg.Advertise, advertiseToward(s.cfg.Consul.Addr)),
	}, events, pullOnly, sparse)
	if err != nil {
		return err
	}
	if st, ok := reg.(registry.Staleness); ok {
		s.metrics.watchRegistry(st)
	}
	m := &measurer{self: s.cfg.Name, reg: reg, log: log, loss: &s.peerLoss, rates: &s.learnt.Rates, capacity: s.capacity}
	where := []zap.Field{zap.String("fleet", s.cfg.Fleet)}
	if s.cfg.Fleet == "" {
		where = []zap.Field{zap.String("consul", s.cfg.Consul.Addr)}
	}
	relays, _ := reg.Relays(context.Background())
	switch s.cfg.Probe.Mode {
	case ProbeCoordinates:
		cp, err := newCoordProber(s.cfg.Name, s.cfg.Probe, s.coordPeers(reg), s.relayProbe, s.metrics, log)
		if err != nil {
			_ = reg.Close(context.Background())
			return fmt.Errorf("probe: %w", err)
		}
		if cr, ok := reg.(registry.CoordinateReader); ok && sparse {
			// The Consul backend then reads every relay's coordinate
			// seldom (coord.FleetViewEvery); the probed peer's fresh.
			cp.fresh = func(ctx context.Context, peer string) (*coordinate.Coordinate, error) {
				c, ok, err := cr.CoordinateOf(ctx, peer)
				if !ok {
					return nil, err
				}
				return c.Coord, nil
			}
		}
		m.probes, m.publishEvery = cp, cp.node.Interval()
		probing.Store(cp.node)
		log.Info("probing a budget of peers, estimating the rest from network coordinates", append(where,
			zap.String("probe_mode", ProbeCoordinates), zap.Int("peers", max(len(relays)-1, 0)), zap.Int("per_minute", s.cfg.Probe.PerMinute),
			zap.Int("nearest", s.cfg.Probe.Nearest), zap.Int("random", s.cfg.Probe.Random))...)
	default:
		m.probes = meshProber{self: s.cfg.Name, p: &probe.Prober{
			Interval: s.cfg.Probe.Interval,
			Timeout:  s.cfg.Probe.Timeout,
			Window:   s.cfg.Probe.Window,
			Targets:  s.meshTargets(reg),
			Measure:  s.countedProbe,
		}}
		m.publishEvery = s.cfg.Probe.Interval
		log.Info("probing every peer", append(where,
			zap.String("probe_mode", ProbeMesh), zap.Int("peers", max(len(relays)-1, 0)),
			zap.Duration("interval", s.cfg.Probe.Interval), zap.Int("window", s.cfg.Probe.Window))...)
	}
	m.start()
	s.measure = m
	return nil
}

// openRegistry opens the registry the config names, as self, without
// touching the network (Consul is first asked when it runs), and checks a
// fleet file: its entries left out are warned about, and its relays'
// addresses are checked against the relay policy (checkFleetAddrs). Run
// opens it so before it measures; relayd check (Check) so, and closes it.
func (s *Server) openRegistry(self registry.SelfRegistration, events registry.Events, pullOnly func() []string, sparse bool) (registry.Registry, error) {
	log := s.log.Named("measure")
	reg, err := registry.Open(registry.Options{
		Fleet: s.cfg.Fleet,
		Consul: registry.ConsulOptions{
			Addr: s.cfg.Consul.Addr, Token: s.cfg.Consul.Token, Log: log.Named("consul"),
			WatchCoalesce:   s.cfg.Probe.PullInterval,
			CoordinatesOnly: sparse,
		},
		Self:         &self,
		Admin:        s.adminClient(3 * time.Second),
		PullInterval: s.cfg.Probe.PullInterval,
		Events:       events,
		PullOnly:     pullOnly,
	})
	if err != nil {
		return nil, err
	}
	if fb, ok := reg.(registry.FileBacked); ok {
		if err := errors.Join(fb.Problems()...); err != nil {
			s.fleetFileProblem(err)
		}
		if err := s.checkFleetAddrs(reg); err != nil {
			_ = reg.Close(context.Background())
			return nil, err
		}
	}
	return reg, nil
}

// fleetFileProblem warns of a fleet file's entries left out (the rest is
// used), or of a file refused (the last good one is used); err names them.
func (s *Server) fleetFileProblem(err error) {
	s.log.Warn("fleet file: not all of it is in use", zap.Error(err))
}

// checkFleetAddrs reads the fleet file's relays' addresses (IP literals;
// names are checked when dialed) against the relay policy. One that only
// policy.allow opens is a fleet configured before relay hops had a list of
// their own: relayd refuses to start, saying what to move, rather than
// run a fleet whose links and probes all fail (or whose private network
// stays open to every client). Others the policy refuses are warned
// about: this relay will not probe or link to them.
func (s *Server) checkFleetAddrs(reg registry.Registry) error {
	relays, _ := reg.Relays(context.Background())
	var moved []error
	for _, r := range relays {
		if r.Name == s.cfg.Name {
			continue
		}
		for _, a := range []struct{ what, addr string }{{"admin", r.Admin}, {"relay", r.Relay}} {
			ap, err := netip.ParseAddrPort(a.addr)
			if err != nil {
				continue
			}
			msg, mv := relayRefusal(fmt.Sprintf("fleet: relay %s's %s address %s", r.Name, a.what, a.addr), ap.Addr(), s.policy, s.relayPol)
			switch {
			case mv:
				moved = append(moved, errors.New(msg))
			case msg != "":
				s.log.Warn("fleet file: a relay this relay will not probe or link to", zap.String("reason", msg))
			}
		}
	}
	return errors.Join(moved...)
}

// meshTargets is mode mesh's probe targets: every other relay the
// registry lists with an admin address.
func (s *Server) meshTargets(reg registry.Registry) func() map[string]string {
	return func() map[string]string {
		out := map[string]string{}
		relays, _ := reg.Relays(context.Background())
		for _, r := range relays {
			if r.Name != s.cfg.Name && r.Admin != "" {
				out[r.Name] = r.Admin
			}
		}
		s.metrics.probeSetSize.Set(float64(len(out)))
		return out
	}
}

// countedProbe is mode mesh's sample, relayProbe, counted in
// relaymesh_probes_total as mode coordinates counts its own.
func (s *Server) countedProbe(ctx context.Context, addr string) (time.Duration, error) {
	rtt, err := s.relayProbe(ctx, addr)
	if errors.Is(ctx.Err(), context.Canceled) {
		return rtt, err // shutting down: no probe
	}
	s.metrics.probes.WithLabelValues(probeResult(err)).Inc()
	return rtt, err
}

// relayProbe times one TCP handshake to addr, a peer relay's address from
// the registry, through the relay policy: whoever writes the registry (a
// Consul token, the fleet file) must not turn this relay's probes, whose
// outcome it publishes, into a scan of its own network. A refusal is
// logged (sampled) with what to change.
func (s *Server) relayProbe(ctx context.Context, addr string) (time.Duration, error) {
	rtt, err := probe.TimedConnect(ctx, s.relayPol.Dialer(net.Dialer{}), addr)
	var de *chain.DeniedError
	if errors.As(err, &de) {
		s.relayAddrDenied(addr, err)
	}
	return rtt, err
}

// relayAddrDenied logs a registry address the relay policy refused, at
// most once a second, saying what to change.
func (s *Server) relayAddrDenied(addr string, err error) {
	s.metrics.denials.WithLabelValues("relay_policy").Inc()
	n, ok := s.refusals.allow("relay_policy")
	if !ok {
		return
	}
	msg := err.Error()
	if ap, perr := netip.ParseAddrPort(addr); perr == nil {
		msg, _ = relayRefusal(addr, ap.Addr(), s.policy, s.relayPol)
	}
	s.log.Named("measure").Warn("a relay's address from the registry refused by the relay policy", zap.String("addr", addr),
		zap.String("reason", msg), zap.Int("not_logged_since_last", n))
}

// probeResult is a probe's result label: ok, refused (the path answered,
// the relay did not), denied (by the relay policy: never sent) or error.
func probeResult(err error) string {
	var de *chain.DeniedError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.As(err, &de):
		return "denied"
	default:
		return "error"
	}
}

// coordPeers is mode coordinates' view of the fleet: every other relay the
// registry lists with an admin address, with the coordinate it published
// (nil while none is known).
func (s *Server) coordPeers(reg registry.Registry) coordPeers {
	rc, _ := reg.(registry.Coordinates)
	return func(ctx context.Context) ([]coord.Peer, map[string]string) {
		relays, _ := reg.Relays(ctx)
		published := map[string]*coordinate.Coordinate{}
		if rc != nil {
			cs, _ := rc.Coordinates(ctx)
			for _, c := range cs {
				published[c.Relay] = c.Coord
			}
		}
		peers := make([]coord.Peer, 0, len(relays))
		admins := make(map[string]string, len(relays))
		for _, r := range relays {
			if r.Name == s.cfg.Name || r.Admin == "" {
				continue
			}
			peers = append(peers, coord.Peer{Name: r.Name, Coord: published[r.Name]})
			admins[r.Name] = r.Admin
		}
		return peers, admins
	}
}

// start runs the prober, publishes its snapshot every publishEvery, and
// runs the registry until stop.
func (m *measurer) start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		m.probes.Run(ctx)
	}()
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.publishEvery)
		defer t.Stop()
		failing := false // log when publishing starts or stops failing, not every time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := m.publish(ctx)
				if ctx.Err() != nil {
					return
				}
				if err != nil && !failing {
					m.log.Warn("cannot publish this relay's measurements; retrying every probe interval", zap.Error(err))
				} else if err == nil && failing {
					m.log.Info("publishing this relay's measurements again")
				}
				failing = err != nil
			}
		}
	}()
	go func() {
		defer m.wg.Done()
		m.reg.Run(ctx)
	}()
}

// publish hands the registry this relay's pairs and, in mode
// coordinates, its coordinate first: a reader that sees the new pairs
// sees the coordinate they moved.
func (m *measurer) publish(ctx context.Context) error {
	var errs []error
	if c, ok := m.probes.(coordinated); ok {
		if rc, ok := m.reg.(registry.Coordinates); ok {
			errs = append(errs, rc.PublishCoordinate(ctx, m.self, c.Coordinate()))
		}
	}
	errs = append(errs, m.reg.Publish(ctx, m.self, m.pairs(ctx)))
	return errors.Join(errs...)
}

// pairs is this relay's own measurements, with the loss and the send
// rates its tunnels taught it.
func (m *measurer) pairs(ctx context.Context) []registry.Pair {
	now := time.Now()
	pairs := withLoss(m.probes.Snapshot(), m.loss, now)
	if relays, err := m.reg.Relays(ctx); err == nil {
		pairs = withSendRates(pairs, relays, now, m.rates.Learnt)
	}
	return m.capacity.withCapacity(pairs, now)
}

// stop ends the measuring goroutines, then closes the registry: with
// Consul that deregisters the relay, so that peers stop probing it and
// planners stop using it now rather than when its health check has failed.
func (m *measurer) stop() {
	if m == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
	// The backend logs the outcome (Consul: deregistered, or left
	// registered and why); there is nothing more to do about an error here.
	_ = m.reg.Close(context.Background())
}

// ReloadFleet re-reads the fleet file now (relayd calls it on SIGHUP). An
// error means the file was refused and the last good one stays; entries
// left out of a file that was used are logged here. With Consul there is
// nothing to re-read: it is watched all the time.
func (s *Server) ReloadFleet() error {
	if s.measure == nil {
		return nil
	}
	fb, ok := s.measure.reg.(registry.FileBacked)
	if !ok {
		return nil
	}
	if _, err := fb.Reload(); err != nil {
		return err
	}
	if err := errors.Join(fb.Problems()...); err != nil {
		s.log.Warn("fleet file: not all of it is in use", zap.Error(err))
	}
	return nil
}

// serveMeasurements answers /v1/measurements: this relay's own pairs and
// (probe mode coordinates) its coordinate as it is now, with scope=fleet
// every pair and coordinate it knows, with scope=coordinates every
// coordinate it knows and no pair (what a relay in probe mode coordinates
// reads of the fleet once a minute). Ages are taken after the figures are
// read: a probe sample or a pull that landed between the two would
// otherwise be served with a negative age, which every reader drops as a
// figure from the future, and the pair would be missing from the fleet
// until the next pull.
func (s *Server) serveMeasurements(w http.ResponseWriter, r *http.Request) {
	var pairs []registry.Pair
	var coords []registry.Coordinate
	switch scope := r.URL.Query().Get("scope"); scope {
	case "", "local":
		if s.measure != nil {
			pairs = s.measure.pairs(r.Context())
			if c, ok := s.measure.probes.(coordinated); ok {
				coords = []registry.Coordinate{{Relay: s.cfg.Name, Coord: c.Coordinate(), UpdatedAt: time.Now()}}
			}
		}
	case "fleet", "coordinates":
		if s.measure != nil {
			if scope == "fleet" {
				pairs, _ = s.measure.reg.Pairs(r.Context())
			}
			if rc, ok := s.measure.reg.(registry.Coordinates); ok {
				coords, _ = rc.Coordinates(r.Context())
			}
		}
	default:
		http.Error(w, fmt.Sprintf("scope %q: want local, fleet or coordinates", scope), http.StatusBadRequest)
		return
	}
	now := time.Now()
	m := registry.Serve(s.cfg.Name, s.cfg.Region, pairs, now)
	m.Coordinates = registry.ServeCoordinates(coords, now)
	writeJSON(w, m)
}

// maxProbeCount bounds /v1/probe: it makes real connections; and
// maxProbeGapMs its gap_ms and maxProbeTimeoutMs its timeout_ms, so one
// request ends within seconds.
const (
	maxProbeCount     = 20
	maxProbeGapMs     = 1000
	maxProbeTimeoutMs = 10000
)

// serveProbe answers /v1/probe?target=host:port&count=N&gap_ms=G: N TCP
// handshakes from this relay to the target, G ms apart (default 200), each
// lost after timeout_ms (default probe.timeout). The
// target passes the same destination policy as tunnels: the admin API
// must not become a scanner of the relay's private network.
//
// target may be given up to probe.MaxTargets times: the relay probes them
// all at once and answers each in results, in order (a target refused or
// unresolved has an error there, the others are measured). One request
// for a planner's whole round of probes from this relay: a second request
// in flight to the same relay would cost its asker a new connection. With
// one target the answer also carries target, addr and summary at the top,
// as before results existed, and a refusal is the request's status.
//
// With info=1 the answer carries this relay's /v1/info as info too, and a
// refused target is an error in its result, never the request's status (the
// info would be lost with it): a planner asking a relay it has not asked
// before for its probes learns its windows in the same request, where a
// /v1/info beside it would cost a second connection.
func (s *Server) serveProbe(w http.ResponseWriter, r *http.Request) {
	targets := r.URL.Query()["target"]
	if len(targets) == 0 {
		http.Error(w, "target: want host:port, e.g. /v1/probe?target=example.com:443&count=5", http.StatusBadRequest)
		return
	}
	if len(targets) > probe.MaxTargets {
		http.Error(w, fmt.Sprintf("target: %d given, at most %d a request", len(targets), probe.MaxTargets), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	count, ok := queryInt(q, "count", 5, 1, maxProbeCount)
	if !ok {
		http.Error(w, fmt.Sprintf("count: want 1..%d", maxProbeCount), http.StatusBadRequest)
		return
	}
	gapMs, ok := queryInt(q, "gap_ms", 200, 0, maxProbeGapMs)
	if !ok {
		http.Error(w, fmt.Sprintf("gap_ms: want 0..%d, the milliseconds between two handshakes", maxProbeGapMs), http.StatusBadRequest)
		return
	}
	// A handshake's bound: a target that does not answer (a relay that
	// vanished, a filtered port) costs the request this much. An asker
	// that gives up on the request first loses every target's answer.
	timeoutMs, ok := queryInt(q, "timeout_ms", int(s.cfg.Probe.Timeout.Milliseconds()), 1, maxProbeTimeoutMs)
	if !ok {
		http.Error(w, fmt.Sprintf("timeout_ms: want 1..%d, the milliseconds a handshake may take before it counts as lost", maxProbeTimeoutMs), http.StatusBadRequest)
		return
	}
	gap, timeout := time.Duration(gapMs)*time.Millisecond, time.Duration(timeoutMs)*time.Millisecond
	withInfo := false
	if v := q.Get("info"); v != "" {
		var err error
		if withInfo, err = strconv.ParseBool(v); err != nil {
			http.Error(w, "info: want 1 (the answer carries this relay's /v1/info) or 0", http.StatusBadRequest)
			return
		}
	}
	results := make([]adminapi.ProbeResult, len(targets))
	status := make([]int, len(targets))
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Go(func() {
			results[i], status[i] = s.probeTarget(r.Context(), target, count, gap, timeout)
		})
	}
	wg.Wait()
	answer := adminapi.ProbeAnswer{From: s.cfg.Name, Results: results}
	if withInfo {
		answer.Info = new(s.info(askerHost(r)))
	}
	if len(targets) == 1 {
		res := results[0]
		if res.Error != "" && !withInfo {
			http.Error(w, res.Error, status[0])
			return
		}
		if res.Error == "" {
			answer.Target, answer.Addr, answer.Summary = res.Target, res.Addr, res.Summary
		}
	}
	writeJSON(w, answer)
}

// queryInt is q's integer parameter name, def when it is absent; ok is
// false when it is not an integer within lo..hi.
func queryInt(q url.Values, name string, def, lo, hi int) (v int, ok bool) {
	raw := q.Get(name)
	if raw == "" {
		return def, true
	}
	v, err := strconv.Atoi(raw)
	return v, err == nil && v >= lo && v <= hi
}

// probeTarget measures one /v1/probe target; a target it cannot measure
// has an error in the result, with the HTTP status a request for it alone
// answers.
func (s *Server) probeTarget(ctx context.Context, target string, count int, gap, timeout time.Duration) (adminapi.ProbeResult, int) {
	res := adminapi.ProbeResult{Target: target}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		res.Error = fmt.Sprintf("target %q: want host:port, e.g. /v1/probe?target=example.com:443&count=5", target)
		return res, http.StatusBadRequest
	}
	// Resolve once, outside the timed connects; the policy checks the
	// address actually connected to.
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		res.Error = fmt.Sprintf("resolving %s: %v", host, err)
		return res, http.StatusBadGateway
	}
	addr := net.JoinHostPort(ips[0].Unmap().String(), port)
	pol := s.probePolicy(ctx, target)
	if err := pol.Check(ips[0].Unmap()); err != nil {
		s.metrics.denials.WithLabelValues("policy").Inc()
		s.log.Named("admin").Warn("probe denied by destination policy", zap.String("target", target), zap.Error(err))
		res.Error = fmt.Sprintf("target %s: %v", target, err)
		return res, http.StatusForbidden
	}
	dialer := pol.Dialer(net.Dialer{})
	measure := func(ctx context.Context, addr string) (time.Duration, error) {
		return probe.TimedConnect(ctx, dialer, addr)
	}
	sum := probe.Sample(ctx, addr, count, gap, timeout, measure)
	if bps, age, ok := s.learnt.Received.Learnt(ips[0], time.Now()); ok {
		sum.LearntRecvBps, sum.LearntRecvAgeSec = bps, age.Seconds()
	}
	res.Addr, res.Summary = addr, &sum
	return res, http.StatusOK
}

// probePolicy is the policy a probe target passes: the relay policy for a
// relay's address as the registry lists it (a planner asks relays to time
// each other), the destination policy for anything else. A fleet on a
// private network so measures its relays without opening that network to
// every probe (policy.relay_allow is not policy.allow).
func (s *Server) probePolicy(ctx context.Context, target string) *policy.Policy {
	if s.measure == nil {
		return s.policy
	}
	relays, _ := s.measure.reg.Relays(ctx)
	for _, r := range relays {
		if target == r.Admin || target == r.Relay {
			return s.relayPol
		}
	}
	return s.policy
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// advertiseToward is this host's address on the way to agent (a Consul
// HTTP address), found without sending anything (a UDP "connect" only picks
// the route). "" when the route is loopback or unknown: a local agent's
// node address is then the right one. "" without an agent (a fleet file).
func advertiseToward(agent string) string {
	if agent == "" {
		return ""
	}
	u := agent
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if _, _, err := net.SplitHostPort(u); err != nil {
		u = net.JoinHostPort(u, "8500")
	}
	c, err := net.Dial("udp", u)
	if err != nil {
		return ""
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		return ""
	}
	return ip.String()
}
