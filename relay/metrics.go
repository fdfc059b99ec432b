package relay

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/relaymesh/relaymesh/pkg/buildinfo"
	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// metrics are exposed on the admin listener at /metrics (Prometheus text).
// Byte counters are added when a tunnel ends (the copy runs in the kernel).
type metrics struct {
	hopMu             sync.Mutex
	hopNames          map[string]struct{} // hop label values in use
	reg               *prometheus.Registry
	active            *prometheus.GaugeVec
	tunnelsOpened     *prometheus.CounterVec
	tunnelsClosed     *prometheus.CounterVec
	bytes             *prometheus.CounterVec
	dialSeconds       *prometheus.HistogramVec
	denials           *prometheus.CounterVec
	handshakeFailures *prometheus.CounterVec
	acceptErrors      *prometheus.CounterVec
	panics            prometheus.Counter
	poolEvents        *prometheus.CounterVec
	optimisticResets  *prometheus.CounterVec
	// stripedSegments counts the striped segments this relay received
	// (pkg/stripe), by their links.
	stripedSegments *prometheus.CounterVec
	// stripeBudgetRefusals counts the striped streams refused for want of
	// limits.stripe_reorder_bytes, by side: in (a segment into this
	// relay, refused at assembly) or out (one it would open);
	// stripeBudget is the budget the reserved-bytes gauge reads.
	stripeBudgetRefusals *prometheus.CounterVec
	stripeBudget         atomic.Pointer[stripe.Budget]
	// probes counts the RTT probes to peer relays by result; probeSetSize
	// is how many peers are probed (every one in mode mesh).
	probes       *prometheus.CounterVec
	probeSetSize prometheus.Gauge
	// udpAsks counts probe asks over UDP (pkg/udpask) by result.
	udpAsks *prometheus.CounterVec
	// capacityProbes counts capacity measurements (capacityprobe.go) by
	// side and result; capacityDatagrams the train datagrams received.
	capacityProbes    *prometheus.CounterVec
	capacityDatagrams *prometheus.CounterVec
	// SOCKS5 UDP associations (udp.go) by side: entry (facing the client)
	// and exit (facing the destinations).
	udpActive    *prometheus.GaugeVec
	udpOpened    *prometheus.CounterVec
	udpClosed    *prometheus.CounterVec
	udpDatagrams *prometheus.CounterVec
	udpBytes     *prometheus.CounterVec
	udpDrops     *prometheus.CounterVec
	// coordNode is the coordinate whose counters the coordinate metrics
	// report (probe mode coordinates); unset, they read 0.
	coordNode atomic.Pointer[coord.Node]
	// registry is the registry whose freshness the registry gauges report;
	// unset (no registry, or the fleet file, which cannot go stale as a
	// whole) they read 0.
	registry atomic.Pointer[registry.Staleness]
	// certExpiry is when this relay's certificate from the operator CA
	// expires, Unix seconds; 0 without one.
	certExpiry atomic.Int64
	// crlStale is 1 while the revocation list in force is past its
	// NextUpdate (watchCRL).
	crlStale atomic.Bool
	// slots are the connection pools whose fill the slot gauges report
	// (limits.max_conns, limits.max_relay_conns); unset, they read 0.
	slots atomic.Pointer[map[string]chan struct{}]
}

// newMetrics makes the relay's metrics, registered in a registry of their
// own.
func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.makeTunnelMetrics()
	m.makeProbeMetrics()
	m.makeUDPMetrics()
	m.registerCoordinate()
	m.registerRegistry()
	m.registerIdentity()
	m.registerSlots()
	m.registerStripeBudget()
	m.registerFields()
	m.initSeries()
	return m
}

// makeTunnelMetrics makes the metrics of the proxy's own work: tunnels,
// dials, refusals, failed handshakes, the warm pool, striped segments,
// optimistic data, accepts and panics. registerFields registers them.
func (m *metrics) makeTunnelMetrics() {
	m.active = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "relaymesh_tunnels_active", Help: "Tunnels currently carrying data.",
	}, []string{"frontend"})
	m.tunnelsOpened = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_tunnel_requests_total", Help: "Tunnel requests by front end and outcome (ok or the failure kind).",
	}, []string{"frontend", "result"})
	m.tunnelsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_tunnels_closed_total", Help: "Tunnels ended, by how they ended.",
	}, []string{"frontend", "result"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_tunnel_bytes_total", Help: "Bytes carried by ended tunnels; up is client to destination.",
	}, []string{"direction"})
	m.dialSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "relaymesh_dial_seconds",
		Help:    "Time per chain step: hop=direct is a direct dial, otherwise reaching and handshaking with that hop.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"hop", "result"})
	m.denials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_denials_total", Help: "Refused clients and destinations by rule (loopback, private, auth, max_conns, max_fds, upstream, route_auth, route_replay, ...).",
	}, []string{"reason"})
	m.handshakeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_handshake_failures_total", Help: "Client handshakes that failed (malformed, timeout, unsupported).",
	}, []string{"frontend", "stage"})
	m.poolEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_pool_events_total", Help: "Warm relay connection pool events: hit, miss (dialed cold), expired, broken (peer closed it), dial_error.",
	}, []string{"event"})
	m.stripedSegments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_striped_segments_total", Help: "Striped segments received on the relay listener, by how many links each ran over.",
	}, []string{"links"})
	m.stripeBudgetRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_stripe_budget_refusals_total",
		Help: "Striped streams refused because limits.stripe_reorder_bytes could not cover their reorder memory, by side: in (a segment into this relay) or out (one it would open).",
	}, []string{"side"})
	m.optimisticResets = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_optimistic_resets_total",
		Help: "SOCKS5 tunnels answered \"succeeded\" at once (optimistic_data) whose chain then failed, so the client was reset; by failure kind.",
	}, []string{"kind"})
	m.acceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_accept_errors_total", Help: "Accept errors (e.g. out of file descriptors).",
	}, []string{"frontend"})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "relaymesh_handler_panics_total", Help: "Panics recovered in connection handlers.",
	})
}

// makeProbeMetrics makes the metrics of measuring the fleet: RTT probes,
// asks over UDP, capacity probes and the probe set. registerFields
// registers them.
func (m *metrics) makeProbeMetrics() {
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_probes_total",
		Help: "RTT probes (TCP handshakes to a peer relay's admin port) by result: ok, refused (the path answered, the relay did not), denied (the relay policy refused the registry's address: never sent), error (timeout, unreachable).",
	}, []string{"result"})
	m.udpAsks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_asks_total",
		Help: "Probe asks over UDP (admin_udp) by result: answered; refused unanswered: bad (no valid MAC: another fleet, a scanner; or too short for its answers), misdirected (an ask for another relay: a copy sent on), stale (outside 30 s of this clock), replay, limits (over /v1/probe's), busy (too many at once).",
	}, []string{"result"})
	m.capacityProbes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_capacity_probes_total",
		Help: "Capacity measurements (probe.capacity) by side (send: this relay measured its sends; receive: a peer's trains to this relay) and result: measured, error, over_budget, expected (a nonce issued), busy.",
	}, []string{"side", "result"})
	m.capacityDatagrams = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_capacity_datagrams_total",
		Help: "Datagrams on the capacity probe's UDP port by result: counted (under a nonce this relay issued), unexpected (a nonce it did not issue, expired or complete: ignored), bad (not a train datagram: ignored). None is ever answered.",
	}, []string{"result"})
	m.probeSetSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "relaymesh_probe_set_size",
		Help: "Peer relays this relay probes: every other one in probe mode mesh; its nearest, random and wanted ones in mode coordinates.",
	})
}

// makeUDPMetrics makes the metrics of SOCKS5 UDP associations.
// registerFields registers them.
func (m *metrics) makeUDPMetrics() {
	m.udpActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "relaymesh_udp_associations_active",
		Help: "SOCKS5 UDP associations held, by side: entry (this relay holds the client's control connection) and exit (this relay sends the datagrams to their destinations, for a chain's entry).",
	}, []string{"side"})
	m.udpOpened = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_associations_opened_total",
		Help: "SOCKS5 UDP associations opened, by side (entry, exit).",
	}, []string{"side"})
	m.udpClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_associations_closed_total",
		Help: "SOCKS5 UDP associations ended, by side and reason: client_closed (its control connection), idle_timeout, link_closed (the other relay ended it), link_error, chain_failed (the entry could not reach the exit), shutdown.",
	}, []string{"side", "reason"})
	m.udpDatagrams = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_datagrams_total",
		Help: "UDP datagrams carried, by side and direction: at the entry up is taken from the client, down sent to it; at the exit up is sent to a destination, down taken from one.",
	}, []string{"side", "direction"})
	m.udpBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_bytes_total",
		Help: "UDP payload bytes carried, by side and direction (as relaymesh_udp_datagrams_total).",
	}, []string{"side", "direction"})
	m.udpDrops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relaymesh_udp_drops_total",
		Help: "UDP datagrams dropped, by side and reason: stranger (not from the association's client), fragmented (FRAG not 0), malformed, queue_full (over limits.udp_buffer_bytes), denied (destination policy; at the entry also a REJECT rule), resolve (name not resolved), unsolicited (from an address the association never sent to), send_error.",
	}, []string{"side", "reason"})
}

// registerCoordinate registers the metrics read from the coordinate node
// (probe mode coordinates); they read 0 until one is set.
func (m *metrics) registerCoordinate() {
	coordStat := func(name, help string, stat func(coord.Stats) int) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if n := m.coordNode.Load(); n != nil {
				return float64(stat(n.Stats()))
			}
			return 0
		})
	}
	m.reg.MustRegister(
		coordStat("relaymesh_coordinate_updates_total",
			"Answered probes that moved this relay's network coordinate (probe mode coordinates).",
			func(s coord.Stats) int { return s.Updates }),
		coordStat("relaymesh_coordinate_rejected_total",
			"Answered probes that could not move the coordinate: the peer's coordinate of another dimension or invalid, or an RTT over 10 s.",
			func(s coord.Stats) int { return s.Rejected }),
		coordStat("relaymesh_coordinate_resets_total",
			"Times the coordinate became invalid and started over from the origin.",
			func(s coord.Stats) int { return s.Resets }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_coordinate_error",
			Help: "The coordinate's own error estimate (Vivaldi's, dimensionless: 1.5 at start, falling as it fits its peers); 0 without coordinates.",
		}, func() float64 {
			if n := m.coordNode.Load(); n != nil {
				return n.Coordinate().Error
			}
			return 0
		}),
	)
}

// registerRegistry registers the gauges of the registry's freshness.
func (m *metrics) registerRegistry() {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_registry_stale",
			Help: "1 while the registry (Consul) cannot be reached and the relays and measurements in use are the last known.",
		}, func() float64 {
			if stale, _ := m.registryState(); stale {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_registry_age_seconds",
			Help: "Seconds since the registry (Consul) last answered; it is asked at least every 5 s. 0 without Consul.",
		}, func() float64 {
			_, since := m.registryState()
			if since.IsZero() {
				return 0
			}
			return time.Since(since).Seconds()
		}),
	)
}

// registerIdentity registers the build's and the identity's gauges.
func (m *metrics) registerIdentity() {
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "relaymesh_build_info", Help: "Always 1: the relayd build, labelled with its version (the release, else dev-<commit>) and Go version.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version(), "go": runtime.Version()},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(buildInfo,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_identity_cert_expiry_timestamp_seconds",
			Help: "When this relay's certificate from the operator CA expires, Unix seconds; 0 without one (a fleet secret's are renewed at each start).",
		}, func() float64 { return float64(m.certExpiry.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_identity_crl_stale",
			Help: "1 while the revocation list in force is past its next update (still honoured: sign it afresh with relayctl ca revoke).",
		}, func() float64 {
			if m.crlStale.Load() {
				return 1
			}
			return 0
		}),
	)
}

// registerStripeBudget registers the gauges of the striped streams'
// memory budget (watchStripeBudget).
func (m *metrics) registerStripeBudget() {
	read := func(f func(*stripe.Budget) int64) func() float64 {
		return func() float64 { return float64(f(m.stripeBudget.Load())) }
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_stripe_reorder_reserved_bytes",
			Help: "Memory the striped streams open hold reserved of limits.stripe_reorder_bytes (each its whole bound, however little it uses).",
		}, read((*stripe.Budget).UsedBytes)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "relaymesh_stripe_reorder_limit_bytes",
			Help: "limits.stripe_reorder_bytes: the memory all striped streams may hold together.",
		}, read((*stripe.Budget).LimitBytes)),
	)
}

// watchStripeBudget makes the stripe budget gauges report b.
func (m *metrics) watchStripeBudget(b *stripe.Budget) { m.stripeBudget.Store(b) }

// registerSlots registers the connection slot gauges, a pair per pool.
func (m *metrics) registerSlots() {
	for _, pool := range []string{"client", "relay"} {
		slots := func(f func(chan struct{}) int) func() float64 {
			return func() float64 {
				if p := m.slots.Load(); p != nil {
					return float64(f((*p)[pool]))
				}
				return 0
			}
		}
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "relaymesh_conn_slots_used",
				Help:        "Connection slots taken, by pool: client (SOCKS5 and HTTP, limits.max_conns) and relay (the relay listener, limits.max_relay_conns).",
				ConstLabels: prometheus.Labels{"pool": pool},
			}, slots(func(c chan struct{}) int { return len(c) })),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "relaymesh_conn_slots_limit",
				Help:        "Connection slots, by pool: limits.max_conns (client) and limits.max_relay_conns (relay); a full pool refuses new connections.",
				ConstLabels: prometheus.Labels{"pool": pool},
			}, slots(func(c chan struct{}) int { return cap(c) })),
		)
	}
}

// registerFields registers the metrics the make*Metrics methods made, and
// the Go runtime's and the process's collectors.
func (m *metrics) registerFields() {
	m.reg.MustRegister(m.active, m.tunnelsOpened, m.tunnelsClosed, m.bytes, m.dialSeconds, m.denials,
		m.handshakeFailures, m.acceptErrors, m.panics, m.poolEvents, m.optimisticResets, m.stripedSegments, m.stripeBudgetRefusals, m.probes, m.probeSetSize, m.udpAsks,
		m.capacityProbes, m.capacityDatagrams,
		m.udpActive, m.udpOpened, m.udpClosed, m.udpDatagrams, m.udpBytes, m.udpDrops,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// initSeries exports at 0 the series an alert or a dashboard rates
// before the first event: a counter missing until its first increment
// makes rate() and ratios empty, and its name unknown to Prometheus.
func (m *metrics) initSeries() {
	for _, fe := range []string{"socks5", "http", "relay"} {
		m.active.WithLabelValues(fe)
		m.tunnelsOpened.WithLabelValues(fe, "ok")
		m.tunnelsClosed.WithLabelValues(fe, "ok")
		m.acceptErrors.WithLabelValues(fe)
	}
	for _, dir := range []string{"up", "down"} {
		m.bytes.WithLabelValues(dir)
	}
	m.dialSeconds.WithLabelValues("direct", "ok")
	for _, reason := range []string{"max_conns", "max_relay_conns", "max_fds", "max_preauth_conns", "max_preauth_per_source", "admin_conns", "auth"} {
		m.denials.WithLabelValues(reason)
	}
	m.handshakeFailures.WithLabelValues("socks5", "greeting")
	for _, ev := range []string{"hit", "miss", "expired", "broken", "dial_error"} {
		m.poolEvents.WithLabelValues(ev)
	}
	m.optimisticResets.WithLabelValues("general")
	for _, side := range []string{stripeIn, stripeOut} {
		m.stripeBudgetRefusals.WithLabelValues(side)
	}
	for _, r := range []string{"ok", "refused", "denied", "error"} {
		m.probes.WithLabelValues(r)
	}
	m.udpAsks.WithLabelValues("answered")
	for _, side := range []string{sideEntry, sideExit} {
		m.udpActive.WithLabelValues(side)
		m.udpOpened.WithLabelValues(side)
		m.udpClosed.WithLabelValues(side, endIdle)
		for _, dir := range []string{"up", "down"} {
			m.udpDatagrams.WithLabelValues(side, dir)
			m.udpBytes.WithLabelValues(side, dir)
		}
	}
	for _, reason := range []string{endClientClosed, endLinkClosed, endLinkError, endChainFailed, endShutdown} {
		m.udpClosed.WithLabelValues(sideEntry, reason)
	}
	m.udpClosed.WithLabelValues(sideExit, endLinkClosed)
	for _, reason := range []string{"stranger", "fragmented", "malformed", "denied", "queue_full", "send_error"} {
		m.udpDrops.WithLabelValues(sideEntry, reason)
	}
	for _, reason := range []string{"denied", "resolve", "unsolicited", "queue_full", "send_error"} {
		m.udpDrops.WithLabelValues(sideExit, reason)
	}
}

// watchSlots makes the slot gauges report the client and relay pools.
func (m *metrics) watchSlots(client, relay chan struct{}) {
	m.slots.Store(&map[string]chan struct{}{"client": client, "relay": relay})
}

// watchCert makes the certificate gauge report expiry.
func (m *metrics) watchCert(expiry time.Time) { m.certExpiry.Store(expiry.Unix()) }

func (m *metrics) observePool(event string) { m.poolEvents.WithLabelValues(event).Inc() }

func (m *metrics) observeDial(hop int, name string, d time.Duration, err error) {
	if hop == 0 {
		name = "direct"
	} else {
		name = m.hopLabel(name)
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.dialSeconds.WithLabelValues(name, result).Observe(d.Seconds())
}

// maxHopLabels bounds the hop label's values: hops come from the
// configuration, plans and route headers, and a series per address a
// header names would grow without bound. Past it, hops are "other".
const maxHopLabels = 256

func (m *metrics) hopLabel(name string) string {
	m.hopMu.Lock()
	defer m.hopMu.Unlock()
	if _, ok := m.hopNames[name]; ok {
		return name
	}
	if len(m.hopNames) >= maxHopLabels {
		return "other"
	}
	if m.hopNames == nil {
		m.hopNames = map[string]struct{}{}
	}
	m.hopNames[name] = struct{}{}
	return name
}

// watchRegistry makes the registry gauges report r.
func (m *metrics) watchRegistry(r registry.Staleness) { m.registry.Store(&r) }

func (m *metrics) registryState() (bool, time.Time) {
	r := m.registry.Load()
	if r == nil {
		return false, time.Time{}
	}
	return (*r).Stale()
}
