package relay

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/pkg/policy"
	"github.com/relaymesh/relaymesh/pkg/pool"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// Config is relayd's configuration. The zero value plus Defaults() is a
// loopback-only relay; configs/relayd.example.yaml documents every key.
type Config struct {
	Name   string `yaml:"name"`
	Region string `yaml:"region"`

	// Listen addresses; an empty string disables that listener.
	SOCKS string `yaml:"socks"`
	HTTP  string `yaml:"http"`
	Admin string `yaml:"admin"`
	// AdminToken, when set, is required as "Authorization: Bearer <token>" on
	// every admin path but /healthz. Required when Admin is not loopback.
	AdminToken string `yaml:"admin_token"`
	// AdminTokenFile holds the admin token (surrounding whitespace is
	// trimmed), so that neither the config file nor the command line (ps
	// shows flags to every user of the host) carries it. Exclusive with
	// AdminToken; read at start.
	AdminTokenFile string `yaml:"admin_token_file"`
	// AdminUDP answers probe asks in one UDP datagram on the admin port's
	// number (pkg/udpask): a planner's first request to this relay costs
	// one round trip instead of a new HTTPS connection's three. Only with
	// transport tls, a fleet secret and an admin token (its key comes from
	// both); nil means true.
	AdminUDP *bool `yaml:"admin_udp"`

	// Relay is the listen address of the native inter-relay protocol
	// (docs/protocol.md): other relays send route headers here. Empty: off.
	// Requires a fleet secret.
	Relay string `yaml:"relay"`
	// FleetSecret authenticates relays to each other (HMAC-SHA256 over every
	// route header). Shared by the whole fleet; at least 16 bytes. Required
	// with Relay or a relaymesh:// next hop. Prefer FleetSecretFile: a
	// config file is copied around more often than a secret should be.
	FleetSecret string `yaml:"fleet_secret"`
	// FleetSecretFile holds the fleet secret (surrounding whitespace is
	// trimmed). Exclusive with FleetSecret.
	FleetSecretFile string `yaml:"fleet_secret_file"`
	// Identity is this relay's certificate and key from the operator's CA,
	// the CA's certificate and its revocation list (relayctl ca): the
	// production way to run a fleet, exclusive with the fleet secret.
	// Every relay holds only its own key; relay links and admin calls
	// check the peer's name, and route headers are keyed by their TLS
	// link. Needs transport tls; every relaymesh:// next hop names its
	// relay (?name=). docs/deploy.md walks through it.
	Identity linktls.Files `yaml:"identity"`
	// Transport of relay links (the relay listener and relaymesh:// hops):
	// "tls" (the default) encrypts them and authenticates both ends with
	// certificates derived from the fleet secret (docs/protocol.md);
	// "plain" sends route headers and payload in clear text, for trusted
	// networks only, and is warned about at start. Every relay of a fleet
	// must use the same.
	Transport string `yaml:"transport"`

	// Advertise is the address peers and clients reach this relay at, for
	// wildcard listeners registered with Consul. Default: the address this
	// host uses to reach the Consul agent, unless that is loopback (an agent
	// on this host: Consul's node address is right).
	Advertise string `yaml:"advertise"`

	// Open allows listening on a non-loopback address without credentials.
	Open bool `yaml:"open"`

	// CapacityMbit is this relay's declared capacity, Mbit/s: its access
	// link or its provider's rate limit, whichever is lower. Planners read
	// it from /v1/info and never predict more through this relay. 0:
	// unknown (no cap).
	CapacityMbit float64 `yaml:"capacity_mbit"`

	// OptimisticData answers SOCKS5 clients "succeeded" before the chain
	// is up and sends their first bytes with the route header, so a
	// request reaches the destination one chain round trip sooner. The
	// cost: a chain that then fails resets the client's connection instead
	// of answering with the reason (docs/protocol.md, "Optimistic data").
	OptimisticData bool `yaml:"optimistic_data"`

	Auth   AuthConfig   `yaml:"auth"`
	Next   []string     `yaml:"next"`
	Policy PolicyConfig `yaml:"policy"`
	Limits Limits       `yaml:"limits"`
	Log    LogConfig    `yaml:"log"`

	// Fleet is a fleet file (the embedded registry): this relay probes the
	// RTT to every other relay listed there and pulls their measurements.
	// Empty: no probing. This relay must be listed under its Name.
	Fleet string `yaml:"fleet"`
	// Consul is the other registry: this relay registers itself there,
	// probes every other registered relay and writes its measurements to
	// Consul's KV store. Exclusive with Fleet.
	Consul ConsulConfig `yaml:"consul"`
	Probe  ProbeConfig  `yaml:"probe"`

	// Pool keeps warm connections to the relays this one forwards to
	// (relaymesh:// next hops and the relays named in route headers).
	Pool PoolConfig `yaml:"pool"`
	// RelaySocket tunes relay-to-relay TCP connections, both the ones this
	// relay opens and the ones its relay listener accepts.
	RelaySocket SocketConfig `yaml:"relay_socket"`

	// Routing is how SOCKS5/HTTP clients' tunnels are routed: "static"
	// (default: through next:) or "plan" (each destination's chain is
	// planned from the registry's measurements; docs/planning.md).
	Routing  string         `yaml:"routing"`
	Planning PlanningConfig `yaml:"planning"`

	// File is the config file these settings were read from (relayd
	// --config), not a key of it: ExposedSecretFiles checks its mode
	// when it holds a secret.
	File string `yaml:"-"`
}

// PlanningConfig tunes routing: plan.
type PlanningConfig struct {
	// TTL is how long a destination's survey (RTTs from every relay to
	// it, windows) is reused; every tunnel is planned on it with its own
	// client's RTT and window.
	TTL time.Duration `yaml:"ttl"`
	// MaxHops is the most relays after this one in a planned chain.
	MaxHops int `yaml:"max_hops"`
	// CheckEvery is how often a relay marked down (a tunnel could not
	// reach it, or stalled and a check of it failed) is checked; it is
	// planned again after 3 passing checks in a row.
	CheckEvery time.Duration `yaml:"check_every"`
	// Rules is a rule file (docs/rules.md): per destination DIRECT, PLAN,
	// CHAIN:r1,r2 or REJECT, the first matching line deciding, after the
	// policy (what it denies stays denied). "": every destination by plan.
	Rules string `yaml:"rules"`
	// GeoIP is a MaxMind-format country database for the rules' GEOIP
	// lines. "": none (GEOIP,LAN needs none).
	GeoIP string `yaml:"geoip"`

	// set is Rules as the preflight loaded it; nil without Rules.
	set *rules.Set
}

// PoolConfig sizes the warm connection pools (pkg/pool, docs/protocol.md).
type PoolConfig struct {
	// MaxIdle caps warm connections per peer relay; 0 turns pooling off.
	// A pool holds about as many as tunnels per second recently went to
	// that peer, at least one while the peer is in use.
	MaxIdle int `yaml:"max_idle"`
	// IdleTimeout closes a warm connection unused this long. It must stay
	// below the peers' limits.relay_header_wait, or a peer may close a
	// connection this relay is about to use (it then retries cold).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// SocketConfig is per-socket TCP tuning. Zero values keep the kernel's
// defaults, which are right for most hosts: setting a buffer size turns off
// Linux's buffer autotuning for that socket, so only set one to cap or to
// raise past net.core.{r,w}mem_max on a long fat path (docs/protocol.md).
type SocketConfig struct {
	SendBufferBytes int `yaml:"send_buffer_bytes"` // SO_SNDBUF; 0: autotuned
	RecvBufferBytes int `yaml:"recv_buffer_bytes"` // SO_RCVBUF; 0: autotuned
	// Congestion is the TCP congestion control (TCP_CONGESTION), e.g. bbr
	// or cubic; it must be in net.ipv4.tcp_available_congestion_control.
	// Empty: bbr where the kernel lets this process use it, else the
	// system default (net.ipv4.tcp_congestion_control); "system": the
	// system default.
	Congestion string `yaml:"congestion"`
	// KeepAlive is the idle time before TCP keepalive probes, and their
	// interval. A peer that vanished ends the connection within the
	// keepalive bound, 10 × KeepAlive (DeadPeerBound; also set as
	// TCP_USER_TIMEOUT, so a connection that is sending ends too). 0: 15 s.
	KeepAlive time.Duration `yaml:"keepalive"`
}

// ConsulConfig selects the Consul registry (docs/registry.md).
type ConsulConfig struct {
	// Addr is the Consul agent's HTTP API (host:port or http(s)://host:port),
	// normally the agent on this relay's host. Empty: Consul is not used.
	Addr string `yaml:"addr"`
	// Token is the ACL token (empty: $CONSUL_HTTP_TOKEN, else anonymous).
	// It needs service:write on relaymesh, key:write on
	// relaymesh/measurements/<name>, key:read on the prefix, node:read.
	Token string `yaml:"token"`
}

// ProbeConfig paces the RTT probes to peer relays (see pkg/probe and
// pkg/coord).
type ProbeConfig struct {
	// Mode is which peers are probed: ProbeMesh (every peer every
	// Interval: a handshake per peer per interval, fine for tens of
	// relays) or ProbeCoordinates (PerMinute handshakes a minute whatever
	// the fleet size, to the Nearest peers and Random others; the rest is
	// estimated from network coordinates, which are published too).
	Mode     string        `yaml:"mode"`
	Interval time.Duration `yaml:"interval"` // mesh: between two samples of one peer
	Window   int           `yaml:"window"`   // mesh: samples kept per peer
	Timeout  time.Duration `yaml:"timeout"`  // a sample slower than this is lost
	// PullInterval is how often measurements are pulled from the peers.
	PullInterval time.Duration `yaml:"pull_interval"`
	// PerMinute is the probe budget in mode coordinates: handshakes a
	// minute, one every minute/PerMinute, whatever the fleet size.
	PerMinute int `yaml:"per_minute"`
	// Nearest is how many of the peers with the lowest RTT (measured, else
	// estimated) are kept probed in mode coordinates.
	Nearest int `yaml:"nearest"`
	// Random is how many other peers, redrawn every 5 minutes, are probed
	// besides in mode coordinates, so that the coordinate fits far peers
	// too and new near ones are found.
	Random int `yaml:"random"`
	// Shortcuts is how many peers measured well below their coordinates'
	// estimate (a route the coordinates cannot show) are kept and
	// published for an hour after they left the probe set, in mode
	// coordinates; 0 (the default): none. They cost no probes, only bytes
	// in every publication, and made no measurable difference to plans in
	// the fleet simulator.
	Shortcuts int `yaml:"shortcuts"`
	// PerRing is how many of the Nearest peers each ring of RTT (below
	// 4 ms, 4–8 ms, 8–16 ms, ...) gives before the rest in mode
	// coordinates, so that a relay with many city-mates probes the next
	// cities' relays too; -1: no rings, the Nearest lowest RTTs.
	PerRing int `yaml:"per_ring"`
	// Capacity is CapacityOn (the default; "" too) or CapacityOff: whether this
	// relay measures the capacity of its sends to a peer when a planner
	// asks (a few trains of UDP datagrams, within a budget of 449,280
	// bytes an hour sent and as much received) and lets peers measure
	// theirs to it. Off on metered links: it then neither sends nor
	// answers (docs/planning.md, "The capacity probe").
	Capacity string `yaml:"capacity"`
}

// Probe modes (ProbeConfig.Mode).
const (
	ProbeMesh        = "mesh"
	ProbeCoordinates = "coordinates"
)

// coordConfig is the pkg/coord configuration of mode coordinates.
func (p ProbeConfig) coordConfig() coord.Config {
	return coord.Config{ProbesPerMinute: p.PerMinute, Nearest: p.Nearest, Random: p.Random, Shortcuts: p.Shortcuts, PerRing: p.PerRing}
}

// AuthConfig lists client credentials. Empty means no authentication.
type AuthConfig struct {
	Users []User `yaml:"users"`
	// CredentialsFile holds one "user:password" per line (# comments allowed).
	CredentialsFile string `yaml:"credentials_file"`
}

// User is one username/password pair.
type User struct {
	Name     string `yaml:"user"`
	Password string `yaml:"password"`
}

// PolicyConfig opens or narrows the deny lists: one for clients'
// destinations, one for relay hops (pkg/policy). Both refuse the same
// ranges by default (loopback, private, link-local, ...); each list opens
// its own, so a fleet on a private network is not opened to its clients.
type PolicyConfig struct {
	// AllowPrivate opens every default-denied range to both: labs and
	// tests.
	AllowPrivate bool `yaml:"allow_private"`
	// Allow opens CIDRs to clients' destinations (SOCKS5, HTTP, the
	// destination a route header names), never to relay hops.
	Allow []string `yaml:"allow"`
	// RelayAllow opens CIDRs to relay hops: configured next hops, planned
	// chains, the next relay a route header names, warm pool links, and
	// the registry's addresses this relay probes. A fleet whose relays
	// reach each other over a private network lists its range here.
	RelayAllow []string `yaml:"relay_allow"`
	// Deny refuses CIDRs in addition, to both; never opened.
	Deny []string `yaml:"deny"`
	// DenyPorts are clients' destination ports refused at any address,
	// on every front end and for a route header's destination; the
	// default, [25], keeps a relay from being a spammer's open mail
	// relay. An empty list refuses none. Relay hops are not checked.
	DenyPorts []int `yaml:"deny_ports"`
}

// policies are the destination policy (clients' destinations) and the
// relay policy (relay hops and registry addresses), from a validated
// config; self are this host's own addresses, refused by both unless a
// list opens one.
func (p PolicyConfig) policies(self []netip.Addr) (dst, relay *policy.Policy) {
	dst = &policy.Policy{AllowPrivate: p.AllowPrivate, Self: self}
	relay = &policy.Policy{AllowPrivate: p.AllowPrivate, Self: self}
	for _, s := range p.Allow {
		dst.Allow = append(dst.Allow, netip.MustParsePrefix(s)) // validated
	}
	for _, s := range p.RelayAllow {
		relay.Allow = append(relay.Allow, netip.MustParsePrefix(s))
	}
	for _, s := range p.Deny {
		d := netip.MustParsePrefix(s)
		dst.Deny, relay.Deny = append(dst.Deny, d), append(relay.Deny, d)
	}
	for _, port := range p.DenyPorts {
		dst.DenyPorts = append(dst.DenyPorts, uint16(port)) // validated
	}
	return dst, relay
}

// checkNextHops refuses a configured first hop (next[0], the one this
// relay dials; later hops are reached through it) at an IP address the
// relay policy refuses: every tunnel through it would fail. A name is
// checked when it is dialed.
func checkNextHops(next []string, dst, relay *policy.Policy) error {
	if len(next) == 0 {
		return nil
	}
	h, err := nexthop.Parse(next[0])
	if err != nil {
		return nil // Validate reported it
	}
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if msg, _ := relayRefusal("next[0] "+h.Addr, ip, dst, relay); msg != "" {
		return errors.New(msg)
	}
	return nil
}

// relayRefusal says why the relay policy refuses ip, a relay's address
// (named by what, e.g. "next[0] 10.1.2.3:7000"), and what to change; ""
// when it does not. moved says only policy.allow opens it: the config of
// a fleet set up before relay hops had a list of their own, which must
// move the range (or copy it, if clients must reach it too).
func relayRefusal(what string, ip netip.Addr, dst, relay *policy.Policy) (msg string, moved bool) {
	err := relay.Check(ip)
	if err == nil {
		return "", false
	}
	for _, a := range dst.Allow {
		if a.Contains(ip.Unmap()) && dst.Check(ip) == nil {
			return fmt.Sprintf("%s: %v: policy.allow (%s) opens it to clients' destinations only; relay hops and probes of relays need it in policy.relay_allow (--relay-allow %s); keep it in policy.allow only if clients must reach it", what, err, a, a), true
		}
	}
	return fmt.Sprintf("%s: %v: list its range in policy.relay_allow (--relay-allow CIDR) to reach relays there", what, err), false
}

// Limits bound what one relay and one connection may use.
type Limits struct {
	// MaxConns bounds the clients' conns (SOCKS5 and HTTP together); 0
	// derives it from the file limit: (RLIMIT_NOFILE - a reserve) / 2,
	// each conn holding its onward conn.
	MaxConns int `yaml:"max_conns"`
	// MaxRelayConns bounds the relay listener's conns, apart from the
	// clients' MaxConns.
	MaxRelayConns int `yaml:"max_relay_conns"`
	// MaxStripes is the most links a striped segment into this relay
	// may run over (docs/protocol.md, "Striped segments"), 1 to 8; 1
	// refuses striped segments. /v1/info says it, so planners keep to it.
	MaxStripes       int           `yaml:"max_stripes"`
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	DialTimeout      time.Duration `yaml:"dial_timeout"`
	IdleTimeout      time.Duration `yaml:"idle_timeout"`
	DrainTimeout     time.Duration `yaml:"drain_timeout"`

	// StripeReorderBytes bounds the memory every striped stream of this
	// relay may hold together (pkg/stripe: the chunks each puts back in
	// order, and those it queues to send), the segments it receives and
	// those it opens alike: a stream reserves its whole bound when it is
	// made, and one the rest cannot cover is refused (docs/protocol.md,
	// "Striped segments"). With MaxStripes above 1 it must hold one
	// stream of MaxStripes links.
	StripeReorderBytes int64 `yaml:"stripe_reorder_bytes"`

	// MaxPreauthConns bounds, on each client listener (SOCKS5, HTTP), the
	// connections that have not authenticated yet. They take no client
	// slot (MaxConns) before they do, and must within HandshakeTimeout;
	// one over this bound is closed at once.
	MaxPreauthConns int `yaml:"max_preauth_conns"`
	// MaxPreauthPerSource bounds those from one source address, both
	// client listeners together, so that one stranger cannot take a
	// listener's whole MaxPreauthConns. Loopback is exempt: the
	// applications of this host share it.
	MaxPreauthPerSource int `yaml:"max_preauth_per_source"`
	// MaxAuthFailures is how many failed authentications (a wrong
	// SOCKS5 password, a wrong HTTP Proxy-Authorization) one source (an
	// IPv4 address, an IPv6 /64) may make, each within AuthBlock of the
	// last, before its attempts are refused for AuthBlock without their
	// credentials being checked: an online guesser gets MaxAuthFailures
	// guesses per AuthBlock. Loopback is exempt. 0: no limit.
	MaxAuthFailures int           `yaml:"max_auth_failures"`
	AuthBlock       time.Duration `yaml:"auth_block"`
	// RelayHeaderWait is how long the relay listener waits for the first
	// byte of a route header. Peers' warm pools hold connections open
	// before they have anything to send, so it is longer than
	// HandshakeTimeout, which still bounds the header once it starts.
	RelayHeaderWait time.Duration `yaml:"relay_header_wait"`
	ShutdownGrace   time.Duration `yaml:"shutdown_grace"`
	// SOCKS5 UDP ASSOCIATE (udp.go). UDPMaxAssociations bounds the
	// associations this relay holds as the entry (its SOCKS5 clients'),
	// and apart as the exit of other relays' chains; 0 answers UDP
	// ASSOCIATE "command not supported". UDPMaxPerSource bounds one
	// client address's (loopback exempt). UDPIdleTimeout ends an
	// association no datagram crossed either way for that long.
	// UDPBufferBytes bounds the datagrams one association queues toward
	// its link or its destinations (more are dropped): with the limits,
	// a relay queues at most 2 × UDPMaxAssociations × UDPBufferBytes.
	UDPMaxAssociations int           `yaml:"udp_max_associations"`
	UDPMaxPerSource    int           `yaml:"udp_max_per_source"`
	UDPIdleTimeout     time.Duration `yaml:"udp_idle_timeout"`
	UDPBufferBytes     int           `yaml:"udp_buffer_bytes"`
}

// LogConfig selects log level and format.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // console or json
}

// Default values, in one place.
const (
	DefaultSOCKS = "127.0.0.1:1080"
	DefaultHTTP  = "127.0.0.1:8080"
	DefaultAdmin = "127.0.0.1:9090"
	// DefaultMaxConns (0) derives limits.max_conns and
	// limits.max_relay_conns from the file limit (fdlimit.go).
	DefaultMaxConns         = 0
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultDialTimeout      = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultDrainTimeout     = 30 * time.Second
	DefaultRelayHeaderWait  = 60 * time.Second
	DefaultPoolMaxIdle      = pool.DefaultMaxIdle
	DefaultPoolIdleTimeout  = pool.DefaultIdleTimeout
	DefaultRelayKeepAlive   = 15 * time.Second
	DefaultShutdownGrace    = 30 * time.Second
	DefaultProbeInterval    = probe.DefaultInterval
	DefaultProbeWindow      = probe.DefaultWindow
	DefaultProbeTimeout     = probe.DefaultTimeout
	DefaultPullInterval     = 5 * time.Second
	DefaultProbeMode        = ProbeMesh
	DefaultProbePerMinute   = coord.DefaultProbesPerMinute
	DefaultProbeNearest     = coord.DefaultNearest
	DefaultProbeRandom      = coord.DefaultRandom
	DefaultProbePerRing     = coord.DefaultPerRing
)

// A client's handshake takes a round trip or two: 32 at once from one
// address is a busy office behind one NAT, 512 on one listener a burst of
// thousands of new clients a second.
const (
	DefaultMaxPreauthConns     = 512
	DefaultMaxPreauthPerSource = 32
)

// A client that mistypes its password tries again a few times; ten wrong
// ones in a row, each within a minute of the last, are a guesser's.
const (
	DefaultMaxAuthFailures = 10
	DefaultAuthBlock       = time.Minute
)

// A UDP association is an application's socket (a resolver, a game, a
// call): a host behind one address opens a few dozen. 60 s of silence
// ends one, as most SOCKS5 servers and NATs time UDP out within a few
// minutes; a datagram's worth of queue is 64 KiB, and 128 KiB holds a
// burst of a thousand small ones.
const (
	DefaultUDPMaxAssociations = 256
	DefaultUDPMaxPerSource    = 32
	DefaultUDPIdleTimeout     = 60 * time.Second
	DefaultUDPBufferBytes     = 128 << 10
)

// A striped stream holds up to about 8.4 MiB (pkg/stripe's reorder window
// and its send queue): 256 MiB is some 30 at once, each a long crossing
// at hundreds of Mbit/s, on a relay whose other tunnels cost a few
// hundred KiB each.
const DefaultStripeReorderBytes = 256 << 20

// DefaultDenyPorts are the destination ports refused unless policy.deny_ports
// says otherwise: SMTP, which open relays are found and used for.
var DefaultDenyPorts = []int{25}

// Defaults returns the configuration relayd runs with when nothing is given.
func Defaults() Config {
	return Config{
		SOCKS: DefaultSOCKS,
		HTTP:  DefaultHTTP,
		Admin: DefaultAdmin,
		Limits: Limits{
			MaxConns:         DefaultMaxConns,
			MaxRelayConns:    DefaultMaxConns,
			MaxStripes:       route.MaxStripes,
			HandshakeTimeout: DefaultHandshakeTimeout,
			DialTimeout:      DefaultDialTimeout,
			IdleTimeout:      DefaultIdleTimeout,
			DrainTimeout:     DefaultDrainTimeout,
			RelayHeaderWait:  DefaultRelayHeaderWait,
			ShutdownGrace:    DefaultShutdownGrace,
			// Connections that have not authenticated yet.
			MaxPreauthConns:     DefaultMaxPreauthConns,
			MaxPreauthPerSource: DefaultMaxPreauthPerSource,
			MaxAuthFailures:     DefaultMaxAuthFailures,
			AuthBlock:           DefaultAuthBlock,
			UDPMaxAssociations:  DefaultUDPMaxAssociations,
			UDPMaxPerSource:     DefaultUDPMaxPerSource,
			UDPIdleTimeout:      DefaultUDPIdleTimeout,
			UDPBufferBytes:      DefaultUDPBufferBytes,
			// Every striped stream's memory, together.
			StripeReorderBytes: DefaultStripeReorderBytes,
		},
		Log:    LogConfig{Level: "info", Format: "console"},
		Policy: PolicyConfig{DenyPorts: slices.Clone(DefaultDenyPorts)},
		Probe: ProbeConfig{
			Mode:         DefaultProbeMode,
			Interval:     DefaultProbeInterval,
			Window:       DefaultProbeWindow,
			Timeout:      DefaultProbeTimeout,
			PullInterval: DefaultPullInterval,
			PerMinute:    DefaultProbePerMinute,
			Nearest:      DefaultProbeNearest,
			Random:       DefaultProbeRandom,
			PerRing:      DefaultProbePerRing,
			Capacity:     CapacityOn,
		},
		Pool:        PoolConfig{MaxIdle: DefaultPoolMaxIdle, IdleTimeout: DefaultPoolIdleTimeout},
		Routing:     "static",
		Transport:   TransportTLS,
		Planning:    PlanningConfig{TTL: time.Minute, MaxHops: 3, CheckEvery: 2 * time.Second},
		RelaySocket: SocketConfig{KeepAlive: DefaultRelayKeepAlive},
	}
}

// LoadFile reads a YAML config over Defaults(). Unknown keys are errors.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(data)
}

// Parse decodes YAML over Defaults(), strictly.
func Parse(data []byte) (Config, error) {
	cfg := Defaults()
	if err := cfg.Overlay(data); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Overlay decodes YAML over c, strictly: a key it names replaces c's value
// (a section key by key: {probe: {window: 5}} keeps probe's other
// settings), and an unknown key is an error, so a renamed key fails where
// it is written rather than being ignored.
func (c *Config) Overlay(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Marshal is c as a YAML config file that Parse reads back to c: every
// key written, durations as "2s".
func (c Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// Validate checks the config and returns an error naming the field. It does
// not touch the network; credentials files are read by LoadCredentials.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	c.checkListeners(add)
	c.checkTrust(add)
	c.checkClients(add)
	c.checkLimits(add)
	c.checkRouting(add)
	c.checkPoolAndProbe(add)
	c.checkRegistry(add)
	c.checkLog(add)
	return errors.Join(errs...)
}

// checkListeners checks the front ends' addresses, the transport and the declared capacity.
func (c *Config) checkListeners(add func(format string, args ...any)) {
	if c.CapacityMbit < 0 || c.CapacityMbit != c.CapacityMbit {
		add("capacity_mbit %v: want Mbit/s >= 0 (0: unknown)", c.CapacityMbit)
	}
	if c.SOCKS == "" && c.HTTP == "" && c.Relay == "" {
		add("socks, http, relay: at least one front end must listen")
	}
	for _, l := range []struct{ field, addr string }{{"socks", c.SOCKS}, {"http", c.HTTP}, {"admin", c.Admin}, {"relay", c.Relay}} {
		if l.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			add("%s: %q is not host:port: %v", l.field, l.addr, err)
		}
	}
	if c.Transport != TransportTLS && c.Transport != TransportPlain {
		add("transport: %q is not tls or plain", c.Transport)
	}
}

// checkTrust checks who the relay trusts and how: the fleet secret or an identity, the next hops that need one, the admin token.
func (c *Config) checkTrust(add func(format string, args ...any)) {
	secretNext := "" // the first next hop scheme that needs the fleet secret
	for i, n := range c.Next {
		h, err := nexthop.Parse(n)
		if err != nil {
			add("next[%d]: %v", i, err)
			continue
		}
		if sc, _ := nexthop.Lookup(h.Scheme); sc.FleetSecret && secretNext == "" {
			secretNext = sc.Name
		}
	}
	hasSecret := c.FleetSecret != "" || c.FleetSecretFile != ""
	switch {
	case c.FleetSecret != "" && c.FleetSecretFile != "":
		add("fleet_secret, fleet_secret_file: set one, not both")
	case c.Identity.Set() && hasSecret:
		add("identity, fleet_secret: choose one (identity: certificates from a CA the operator keeps, for fleets on the internet; the fleet secret: labs and trusted networks)")
	case c.Identity.Set() && c.Transport != TransportTLS:
		add("identity: needs transport: tls (identities are TLS certificates)")
	case c.Identity.Set() && (c.Identity.CA == "" || c.Identity.Cert == "" || c.Identity.Key == ""):
		add("identity: ca, cert and key are all required (relayctl ca init; relayctl ca issue --name %s)", cmp.Or(c.Name, "NAME"))
	case !hasSecret && !c.Identity.Set() && c.Relay != "":
		add("identity or fleet_secret: required with relay (the relay listener serves only members of the fleet; identity: relayctl ca issue; or --fleet-secret-file)")
	case !hasSecret && !c.Identity.Set() && secretNext != "":
		add("identity or fleet_secret: required with a %s:// next hop (--fleet-secret-file)", secretNext)
	case c.FleetSecret != "" && len(c.FleetSecret) < MinFleetSecretBytes:
		// Never echo the secret, not even in part.
		add("fleet_secret: must be at least %d bytes", MinFleetSecretBytes)
	}
	if c.Identity.Set() {
		for i, n := range c.Next {
			if h, err := nexthop.Parse(n); err == nil && h.Scheme == nexthop.Relaymesh && h.Relay == "" {
				add("next[%d]: with identity, a relaymesh:// hop names the relay it expects there (%s)", i, nexthop.RelayURL("NAME", h.Addr))
			}
		}
	}
	if c.AdminToken != "" && c.AdminTokenFile != "" {
		add("admin_token, admin_token_file: set one, not both")
	}
	if c.AdminToken != "" && len(c.AdminToken) < MinAdminTokenBytes {
		// Never echo the token.
		add("admin_token: must be at least %d bytes (e.g. openssl rand -hex 16)", MinAdminTokenBytes)
	}
}

// checkClients checks the clients' credentials and the deny and allow lists.
func (c *Config) checkClients(add func(format string, args ...any)) {
	for i, u := range c.Auth.Users {
		if u.Name == "" || u.Password == "" {
			add("auth.users[%d]: user and password must both be set", i)
		}
		if len(u.Name) > 255 || len(u.Password) > 255 {
			add("auth.users[%d]: user and password are limited to 255 bytes (RFC 1929)", i)
		}
	}
	for i, s := range c.Policy.Allow {
		if _, err := netip.ParsePrefix(s); err != nil {
			add("policy.allow[%d]: %q is not a CIDR prefix (e.g. 10.1.0.0/16)", i, s)
		}
	}
	for i, s := range c.Policy.RelayAllow {
		if _, err := netip.ParsePrefix(s); err != nil {
			add("policy.relay_allow[%d]: %q is not a CIDR prefix (e.g. 10.1.0.0/16)", i, s)
		}
	}
	for i, s := range c.Policy.Deny {
		if _, err := netip.ParsePrefix(s); err != nil {
			add("policy.deny[%d]: %q is not a CIDR prefix (e.g. 10.1.0.0/16)", i, s)
		}
	}
	for i, port := range c.Policy.DenyPorts {
		if port < 1 || port > 65535 {
			add("policy.deny_ports[%d]: %d is not a TCP port (1..65535)", i, port)
		}
	}
}

// checkLimits checks limits.* and every duration that must be positive.
func (c *Config) checkLimits(add func(format string, args ...any)) {
	l := c.Limits
	if l.MaxConns < 0 {
		add("limits.max_conns: must be 0 (from the file limit) or more, got %d", l.MaxConns)
	}
	if l.MaxRelayConns < 0 {
		add("limits.max_relay_conns: must be 0 (from the file limit) or more, got %d", l.MaxRelayConns)
	}
	if l.MaxStripes < 1 || l.MaxStripes > route.MaxStripes {
		add("limits.max_stripes: want 1 (no striped segments) to %d, got %d", route.MaxStripes, l.MaxStripes)
	}
	if need := stripe.HeldBytes(max(l.MaxStripes, 1), 0); l.StripeReorderBytes < 0 || l.MaxStripes > 1 && l.StripeReorderBytes < need {
		add("limits.stripe_reorder_bytes: must hold one striped stream of limits.max_stripes (%d) links, %d bytes, got %d", l.MaxStripes, need, l.StripeReorderBytes)
	}
	if l.MaxPreauthConns < 1 {
		add("limits.max_preauth_conns: must be at least 1, got %d", l.MaxPreauthConns)
	}
	if l.MaxPreauthPerSource < 1 {
		add("limits.max_preauth_per_source: must be at least 1, got %d", l.MaxPreauthPerSource)
	}
	if l.MaxAuthFailures < 0 {
		add("limits.max_auth_failures: must be 0 (no limit) or more, got %d", l.MaxAuthFailures)
	}
	if l.UDPMaxAssociations < 0 {
		add("limits.udp_max_associations: must be 0 (UDP off) or more, got %d", l.UDPMaxAssociations)
	}
	if l.UDPMaxAssociations > 0 {
		if l.UDPMaxPerSource < 1 {
			add("limits.udp_max_per_source: must be at least 1, got %d", l.UDPMaxPerSource)
		}
		if l.UDPIdleTimeout <= 0 {
			add("limits.udp_idle_timeout: must be positive, got %s", l.UDPIdleTimeout)
		}
		if l.UDPBufferBytes < minUDPBufferBytes {
			add("limits.udp_buffer_bytes: must hold the largest datagram's frame, %d bytes, got %d", minUDPBufferBytes, l.UDPBufferBytes)
		}
	}
	if l.MaxAuthFailures > 0 && l.AuthBlock <= 0 {
		add("limits.auth_block: must be positive with limits.max_auth_failures, got %s", l.AuthBlock)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
		zero  bool // zero allowed (disables)
	}{
		{"limits.handshake_timeout", l.HandshakeTimeout, false},
		{"limits.dial_timeout", l.DialTimeout, false},
		{"limits.idle_timeout", l.IdleTimeout, true},
		{"limits.drain_timeout", l.DrainTimeout, true},
		{"limits.shutdown_grace", l.ShutdownGrace, true},
		{"limits.relay_header_wait", l.RelayHeaderWait, false},
		{"pool.idle_timeout", c.Pool.IdleTimeout, false},
		{"relay_socket.keepalive", c.RelaySocket.KeepAlive, true},
		{"probe.interval", c.Probe.Interval, false},
		{"probe.timeout", c.Probe.Timeout, false},
		{"probe.pull_interval", c.Probe.PullInterval, false},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			add("%s: must be positive, got %s", d.field, d.v)
		}
	}
}

// checkRouting checks routing: plan and what it needs, and the planning keys that apply only with it.
func (c *Config) checkRouting(add func(format string, args ...any)) {
	switch c.Routing {
	case "static", "":
	case "plan":
		if c.Fleet == "" && c.Consul.Addr == "" {
			add("routing: plan needs a registry (fleet or consul.addr) to plan on")
		}
		if len(c.Next) > 0 {
			add("routing: plan and next: choose one (a planned relay chooses its next hops per destination)")
		}
		if c.FleetSecret == "" && c.FleetSecretFile == "" && !c.Identity.Set() {
			add("routing: plan needs an identity or the fleet secret (fleet_secret_file): planned chains use the native protocol")
		}
		if c.Planning.TTL <= 0 {
			add("planning.ttl: must be positive, got %s", c.Planning.TTL)
		}
		if c.Planning.CheckEvery <= 0 {
			add("planning.check_every: must be positive, got %s", c.Planning.CheckEvery)
		}
		if c.Planning.MaxHops < 0 || c.Planning.MaxHops > 7 {
			add("planning.max_hops: must be 0..7 relays after this one, got %d", c.Planning.MaxHops)
		}
	default:
		add("routing: %q is not static or plan", c.Routing)
	}
	if c.Routing != "plan" && (c.Planning.Rules != "" || c.Planning.GeoIP != "") {
		add("planning.rules, planning.geoip: apply only with routing: plan (the rules choose between DIRECT, the plan, a chain and REJECT)")
	}
	if c.Planning.GeoIP != "" && c.Planning.Rules == "" {
		add("planning.geoip: serves planning.rules' GEOIP lines; set planning.rules too")
	}
}

// checkPoolAndProbe checks the warm pool, the relay sockets and the probe.
func (c *Config) checkPoolAndProbe(add func(format string, args ...any)) {
	l := c.Limits
	if c.Pool.MaxIdle < 0 || c.Pool.MaxIdle > 64 {
		add("pool.max_idle: must be 0 (off) to 64 per peer, got %d", c.Pool.MaxIdle)
	}
	if c.Pool.IdleTimeout > 0 && l.RelayHeaderWait > 0 && c.Pool.IdleTimeout >= l.RelayHeaderWait {
		add("pool.idle_timeout: %s must be below limits.relay_header_wait %s (and below the peers' value): a peer would close warm connections first",
			c.Pool.IdleTimeout, l.RelayHeaderWait)
	}
	if err := c.RelaySocket.validate(); err != nil {
		add("relay_socket.%v", err)
	}
	if c.Probe.Window < 1 || c.Probe.Window > 10000 {
		add("probe.window: must be 1..10000 samples, got %d", c.Probe.Window)
	}
	if c.Probe.Capacity != "" && c.Probe.Capacity != CapacityOn && c.Probe.Capacity != CapacityOff {
		add("probe.capacity: want %s or %s (metered links), got %q", CapacityOn, CapacityOff, c.Probe.Capacity)
	}
	for _, e := range c.Probe.validateCoordinates() {
		add("%s", e)
	}
}

// checkRegistry checks the registry: a fleet file or Consul, and what each needs.
func (c *Config) checkRegistry(add func(format string, args ...any)) {
	if c.Fleet != "" && c.Name == "" {
		add("name: required with fleet (the relay finds itself in the fleet file by name)")
	}
	if c.Consul.Addr != "" {
		if c.Fleet != "" {
			add("fleet, consul.addr: choose one registry, not both")
		}
		if c.Name == "" {
			add("name: required with consul (the relay registers under its name)")
		}
		if c.Admin == "" {
			add("admin: required with consul (Consul checks /healthz there and peers probe it)")
		}
	}
	if c.Consul.Token != "" && c.Consul.Addr == "" {
		add("consul.token: set without consul.addr")
	}
}

// checkLog checks the log's level and format.
func (c *Config) checkLog(add func(format string, args ...any)) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "console", "json":
	default:
		add("log.format: %q is not console or json", c.Log.Format)
	}
}

// maxProbesPerMinute bounds probe.per_minute: one probe every 10 ms. More
// is no longer a budget, and a handshake's timeout would pace it anyway.
const maxProbesPerMinute = 6000

// maxProbeSetPeers bounds probe.nearest and probe.random: every pick of a
// peer costs a pass over the fleet per nearest peer.
const maxProbeSetPeers = 1000

// validateCoordinates checks probe.mode and the keys of mode coordinates,
// each error naming its key. The keys are checked in mode mesh too: a
// config switched to coordinates later must not fail only then.
func (p ProbeConfig) validateCoordinates() []string {
	var errs []string
	switch p.Mode {
	case ProbeMesh, ProbeCoordinates:
	default:
		errs = append(errs, fmt.Sprintf("probe.mode: %q is not %s (every peer every probe.interval) or %s (probe.per_minute handshakes a minute whatever the fleet size)",
			p.Mode, ProbeMesh, ProbeCoordinates))
	}
	bad := false
	for _, k := range []struct {
		key   string
		v, hi int
		unit  string
	}{
		{"probe.per_minute", p.PerMinute, maxProbesPerMinute, "handshakes a minute"},
		{"probe.nearest", p.Nearest, maxProbeSetPeers, "peers"},
		{"probe.random", p.Random, maxProbeSetPeers, "peers"},
	} {
		if k.v < 1 || k.v > k.hi {
			errs = append(errs, fmt.Sprintf("%s: must be 1..%d %s, got %d", k.key, k.hi, k.unit, k.v))
			bad = true
		}
	}
	if p.Shortcuts < 0 || p.Shortcuts > maxProbeSetPeers {
		errs = append(errs, fmt.Sprintf("probe.shortcuts: must be 0..%d peers (0: none), got %d", maxProbeSetPeers, p.Shortcuts))
		bad = true
	}
	if p.PerRing != -1 && (p.PerRing < 1 || p.PerRing > maxProbeSetPeers) {
		errs = append(errs, fmt.Sprintf("probe.per_ring: must be 1..%d peers a ring of RTT, or -1 for no rings, got %d", maxProbeSetPeers, p.PerRing))
		bad = true
	}
	if bad {
		return errs
	}
	// A probe result counts for coord.DefaultMaxAge: a probe set that
	// takes longer to go round would never give a peer a median.
	cycle := time.Minute / time.Duration(p.PerMinute) * time.Duration(p.Nearest+p.Random)
	if cycle > coord.DefaultMaxAge {
		errs = append(errs, fmt.Sprintf("probe.per_minute, probe.nearest, probe.random: going round %d peers at %d a minute takes %v, "+
			"longer than the %v a probe result counts; raise per_minute or lower nearest and random", p.Nearest+p.Random, p.PerMinute, cycle, coord.DefaultMaxAge))
		return errs
	}
	if _, err := p.coordConfig().WithDefaults(); err != nil {
		errs = append(errs, fmt.Sprintf("probe.per_minute, probe.nearest, probe.random: %v", err))
	}
	return errs
}

// LoadCredentials returns every configured user, from the config and the
// credentials file.
func (c *Config) LoadCredentials() (map[string]string, error) {
	users := map[string]string{}
	for _, u := range c.Auth.Users {
		users[u.Name] = u.Password
	}
	if c.Auth.CredentialsFile == "" {
		return users, nil
	}
	f, err := os.Open(c.Auth.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("auth.credentials_file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		user, pass, ok := strings.Cut(s, ":")
		if !ok || user == "" || pass == "" {
			// Never echo the line: it may hold a password.
			return nil, fmt.Errorf("auth.credentials_file %s:%d: want user:password", c.Auth.CredentialsFile, line)
		}
		if len(user) > 255 || len(pass) > 255 {
			return nil, fmt.Errorf("auth.credentials_file %s:%d: user and password are limited to 255 bytes", c.Auth.CredentialsFile, line)
		}
		users[user] = pass
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth.credentials_file: %w", err)
	}
	return users, nil
}

// Relay link transports (Config.Transport).
const (
	TransportTLS   = "tls"
	TransportPlain = "plain"
)

// MinFleetSecretBytes is the shortest fleet secret accepted: 128 bits.
const MinFleetSecretBytes = 16

// MinAdminTokenBytes is the shortest admin token accepted: a bearer token
// guessed is the whole fleet's admin API.
const MinAdminTokenBytes = 16

// LoadFleetSecret returns the fleet secret from the config or its file (nil
// when neither is set). Errors never contain the secret.
func (c *Config) LoadFleetSecret() ([]byte, error) {
	if c.FleetSecretFile == "" {
		if c.FleetSecret == "" {
			return nil, nil
		}
		return []byte(c.FleetSecret), nil
	}
	data, err := os.ReadFile(c.FleetSecretFile)
	if err != nil {
		return nil, fmt.Errorf("fleet_secret_file: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) < MinFleetSecretBytes {
		return nil, fmt.Errorf("fleet_secret_file %s: the secret must be at least %d bytes (e.g. head -c 32 /dev/urandom | base64)", c.FleetSecretFile, MinFleetSecretBytes)
	}
	return secret, nil
}

// LoadAdminToken reads admin_token_file, when set, into AdminToken.
// Errors never contain the token.
func (c *Config) LoadAdminToken() error {
	if c.AdminTokenFile == "" {
		return nil
	}
	data, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		return fmt.Errorf("admin_token_file: %w", err)
	}
	token := string(bytes.TrimSpace(data))
	if len(token) < MinAdminTokenBytes {
		return fmt.Errorf("admin_token_file %s: the token must be at least %d bytes (e.g. openssl rand -hex 16)", c.AdminTokenFile, MinAdminTokenBytes)
	}
	c.AdminToken = token
	return nil
}

// holdsSecret says whether the config file at path sets a secret itself
// (the admin token, the fleet secret, a password, the Consul token),
// whatever flags replaced since.
func holdsSecret(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	f, err := Parse(data)
	if err != nil {
		return false
	}
	return f.AdminToken != "" || f.FleetSecret != "" || len(f.Auth.Users) > 0 || f.Consul.Token != ""
}

// ExposedSecretFiles names the files holding secrets (the credentials, the
// fleet secret, the admin token, the fleet file with its admin token, the
// config file when it sets a secret itself) that other users of the host
// may read, with what to do. relayd warns at start rather than refuse:
// container runtimes mount secrets with modes of their own.
func (c *Config) ExposedSecretFiles() []string {
	var out []string
	config := ""
	if c.File != "" && holdsSecret(c.File) {
		config = c.File
	}
	for _, f := range []struct{ field, path string }{
		{"config file (it sets a secret)", config},
		{"auth.credentials_file", c.Auth.CredentialsFile},
		{"fleet_secret_file", c.FleetSecretFile},
		{"admin_token_file", c.AdminTokenFile},
		{"identity.key", c.Identity.Key},
		{"fleet", c.Fleet},
	} {
		if f.path == "" {
			continue
		}
		st, err := os.Stat(f.path)
		if err != nil || st.Mode().Perm()&0o077 == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s is readable by other users of this host (mode %04o): chmod 600 %s", f.field, f.path, st.Mode().Perm(), f.path))
	}
	return out
}

// isLoopbackListen reports whether a listen address only accepts local
// connections. An empty host or a wildcard means every interface.
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
