package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/policy"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/rules"
)

// preflight is every decision relayd makes about its settings before it
// binds a socket: the config's own rules (Validate), the files it names
// (admin token, credentials, fleet secret, identity) and their modes, the
// refusals of an open proxy or an open admin API, the policy against the
// configured first hop, the relay sockets' options, and whether each
// listen address can be bound here. New stops at its errors; relayd check
// (Check) names them all. A phase runs only when what it reads is sound,
// so that one mistake is named once, not again by each phase built on it.
type preflight struct {
	errs     []error
	warnings []string

	users         map[string]string
	secret        []byte
	dst, relayPol *policy.Policy // nil when the policy lists do not parse
	link          *linktls.Identity
	// connBudget is how many conns the file limit holds (fdlimit.go); 0:
	// no bound known.
	connBudget int
}

// runPreflight runs the phases over cfg, reading its files into it (the
// admin token). It never binds, dials or writes.
func runPreflight(cfg *Config) *preflight {
	p := &preflight{}
	valid := p.add(cfg.Validate())
	tokenRead := p.add(cfg.LoadAdminToken())
	users, err := cfg.LoadCredentials()
	if p.add(err) {
		p.users = users
		p.checkOpenProxy(cfg)
	}
	secret, err := cfg.LoadFleetSecret()
	secretRead := p.add(err)
	p.secret = secret
	p.warnings = append(p.warnings, prefixed("secret file exposed: ", cfg.ExposedSecretFiles())...)
	if tokenRead {
		p.checkAdminToken(cfg)
	}
	if cfg.Policy.AllowPrivate {
		p.warnings = append(p.warnings, "private and loopback destinations are allowed (--allow-private); use only in labs and tests")
	}
	if cfg.Policy.parses() {
		p.checkPolicy(cfg)
	}
	if cfg.RelaySocket.validate() == nil {
		cfg.RelaySocket.resolveCongestion()
		p.add(cfg.RelaySocket.checkCongestion())
	}
	p.checkListeners(cfg)
	if valid {
		limit := fileLimit()
		p.connBudget = connBudget(limit, cfg.Limits.UDPMaxAssociations)
		p.deriveConnLimits(&cfg.Limits, p.connBudget, limit)
	}
	if valid && secretRead {
		p.loadIdentity(cfg)
	}
	if valid {
		p.loadRules(cfg)
	}
	return p
}

// loadRules reads and checks planning.rules (and its GeoIP database)
// into cfg, for the plan router: each bad line is an error of its own,
// named FILE:LINE.
func (p *preflight) loadRules(cfg *Config) {
	if cfg.Planning.Rules == "" {
		return
	}
	set, err := rules.Load(cfg.Planning.Rules, rules.Options{GeoIPFile: cfg.Planning.GeoIP})
	if err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			p.add(fmt.Errorf("planning.rules: %w", e))
		}
		return
	}
	p.warnings = append(p.warnings, prefixed("planning.rules: ", set.Warnings)...)
	cfg.Planning.set = set
}

// unknownChainRelays warns of each relay a CHAIN rule of planning.rules
// names that the fleet file does not list with a relay listener: tunnels
// by its rules fail until it does. (A Consul registry, not read by an
// offline check, is not asked.)
func unknownChainRelays(cfg Config, reg registry.Store) []string {
	if cfg.Planning.set == nil || cfg.Fleet == "" {
		return nil
	}
	known, err := reg.Relays(context.Background())
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range cfg.Planning.set.Relays() {
		if !slices.ContainsFunc(known, func(r registry.Relay) bool { return r.Name == name && r.Relay != "" }) {
			out = append(out, fmt.Sprintf("planning.rules: CHAIN relay %s is not in the fleet file %s with a relay listener: tunnels by its rules fail until it is", name, cfg.Fleet))
		}
	}
	return out
}

// add records err (each of a joined error apart) and reports whether it
// was nil.
func (p *preflight) add(err error) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		p.errs = append(p.errs, j.Unwrap()...)
	} else {
		p.errs = append(p.errs, err)
	}
	return false
}

// err is every error found, joined; nil when none.
func (p *preflight) err() error { return errors.Join(p.errs...) }

func prefixed(prefix string, lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = prefix + l
	}
	return out
}

// checkOpenProxy refuses client listeners off loopback without
// credentials, unless open says so on purpose.
func (p *preflight) checkOpenProxy(cfg *Config) {
	if len(p.users) > 0 {
		return
	}
	if cfg.Open {
		p.warnings = append(p.warnings, "OPEN PROXY: no credentials and --open given; anyone who can reach the listeners can use this relay")
		return
	}
	for _, l := range []struct{ field, addr string }{{"socks", cfg.SOCKS}, {"http", cfg.HTTP}} {
		if l.addr != "" && !isLoopbackListen(l.addr) {
			p.add(fmt.Errorf("%s: refusing to listen on non-loopback %s without credentials: "+
				"set --user/--password (or auth.users / --credentials), or pass --open to run an open proxy on purpose", l.field, l.addr))
		}
	}
}

// checkAdminToken refuses an admin API off loopback without a token.
func (p *preflight) checkAdminToken(cfg *Config) {
	if cfg.Admin != "" && !isLoopbackListen(cfg.Admin) && cfg.AdminToken == "" {
		p.add(fmt.Errorf("admin: refusing to serve the admin API on non-loopback %s without admin_token_file (--admin-token-file) or admin_token", cfg.Admin))
	}
}

// checkPolicy builds the two policies and checks the configured first hop
// against them.
func (p *preflight) checkPolicy(cfg *Config) {
	// Read once at start: a relay whose public address changes restarts
	// (a VPS's address is fixed for its life).
	self, err := policy.OwnAddrs()
	if err != nil {
		p.add(fmt.Errorf("policy: listing this host's addresses: %w", err))
		return
	}
	p.dst, p.relayPol = cfg.Policy.policies(self)
	p.add(checkNextHops(cfg.Next, p.dst, p.relayPol))
}

// parses reports whether every CIDR of the lists parses (Validate names
// the ones that do not).
func (p PolicyConfig) parses() bool {
	for _, list := range [][]string{p.Allow, p.RelayAllow, p.Deny} {
		for _, s := range list {
			if _, err := netip.ParsePrefix(s); err != nil {
				return false
			}
		}
	}
	return true
}

// loadIdentity loads this relay's TLS identity (linkIdentity) and checks
// that an issued certificate agrees with the config: its name, its role,
// its lifetime.
func (p *preflight) loadIdentity(cfg *Config) {
	if cfg.Transport == TransportPlain && p.secret != nil && !cfg.Identity.Set() {
		p.warnings = append(p.warnings, "transport: plain: relay links carry route headers and payload in clear text and anyone on the path can read and inject; use only on a network you trust")
	}
	id, err := linkIdentity(*cfg, p.secret)
	if !p.add(err) || id == nil || !id.Issued() {
		p.link = id
		return
	}
	p.link = id
	// The certificate names this relay; a config that names it too must
	// agree (a copied config would otherwise publish one name and prove
	// another).
	if cfg.Name != "" && cfg.Name != id.Name {
		p.add(fmt.Errorf("name: %q, but identity.cert %s names %q: issue this relay's certificate for its name (relayctl ca issue --name %s)", cfg.Name, cfg.Identity.Cert, id.Name, cfg.Name))
	}
	if cfg.Relay != "" && id.Role != linktls.RoleRelay {
		p.add(fmt.Errorf("relay: identity.cert %s is a %s certificate; a relay listener needs one issued with --role relay", cfg.Identity.Cert, id.Role))
	}
	if left := time.Until(certExpiry(id)); left < certExpiryWarning {
		p.warnings = append(p.warnings, fmt.Sprintf("identity.cert %s expires in %.1f days (%s): issue a new one (relayctl ca issue --name %s) and restart before then",
			cfg.Identity.Cert, left.Hours()/24, certExpiry(id).UTC().Format(time.RFC3339), id.Name))
	}
}

// certExpiryWarning is how long before its certificate expires a relay
// says so at start and in relayd check: a month leaves time to issue.
const certExpiryWarning = 30 * 24 * time.Hour

// certExpiry is when the identity's own certificate expires.
func certExpiry(id *linktls.Identity) time.Time {
	certs := id.AdminServerConfig().Certificates
	if len(certs) == 0 || certs[0].Leaf == nil {
		return time.Time{}
	}
	return certs[0].Leaf.NotAfter
}

// checkListeners says which listen address cannot be bound here, short of
// binding it: one already in use is found only by binding.
func (p *preflight) checkListeners(cfg *Config) {
	for _, l := range []struct{ field, addr string }{{"socks", cfg.SOCKS}, {"http", cfg.HTTP}, {"admin", cfg.Admin}, {"relay", cfg.Relay}} {
		if l.addr == "" {
			continue
		}
		if err := checkListenAddr(l.addr); err != nil {
			p.add(fmt.Errorf("%s: %w", l.field, err))
		}
	}
}

// checkListenAddr says why binding addr (host:port) would fail on this
// host: a port number out of range, a host that does not resolve, an
// address no interface has (unless ip_nonlocal_bind allows it), or a port
// below net.ipv4.ip_unprivileged_port_start without CAP_NET_BIND_SERVICE.
func checkListenAddr(addr string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // Validate names it
	}
	port, err := net.LookupPort("tcp", portStr)
	if err != nil {
		return fmt.Errorf("%s: port %q: %w", addr, portStr, err)
	}
	if start := hostnet.ReadSysctlInt("net/ipv4/ip_unprivileged_port_start", 0); port != 0 && int64(port) < start && !hasCapability(capNetBindService) {
		return fmt.Errorf("%s: port %d is below net.ipv4.ip_unprivileged_port_start (%d) and relayd lacks CAP_NET_BIND_SERVICE: use a port from %d, or grant the capability (systemd: AmbientCapabilities=CAP_NET_BIND_SERVICE)",
			addr, port, start, start)
	}
	if host == "" {
		return nil
	}
	ips, err := listenIPs(host)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	local, err := localAddrs()
	if err != nil {
		return nil // bind will say
	}
	for _, ip := range ips {
		if ip.IsUnspecified() || local[ip] || nonlocalBind(ip) {
			return nil
		}
	}
	return fmt.Errorf("%s: no interface of this host has %s (bind would fail: cannot assign requested address)", addr, host)
}

// listenIPs resolves a listen address's host as net.Listen does.
func listenIPs(host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap().WithZone("")}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("host %q does not resolve: %w", host, err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap().WithZone("")
	}
	return ips, nil
}

// localAddrs are the addresses of this host's interfaces.
func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]bool{}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			out[pfx.Addr().Unmap().WithZone("")] = true
		}
	}
	return out, nil
}

// nonlocalBind reports whether the kernel lets a socket bind ip without
// an interface having it (net.ipv{4,6}.ip_nonlocal_bind).
func nonlocalBind(ip netip.Addr) bool {
	path := "net/ipv4/ip_nonlocal_bind"
	if ip.Is6() {
		path = "net/ipv6/ip_nonlocal_bind"
	}
	return hostnet.ReadSysctlInt(path, 0) == 1
}

// capNetBindService is CAP_NET_BIND_SERVICE's bit (linux/capability.h).
const capNetBindService = 10

// hasCapability reports whether this process holds capability bit c in
// its effective set (/proc/self/status CapEff); true where that cannot be
// read, so that an unknown is left to bind to say.
func hasCapability(c uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || eff&(1<<c) != 0
		}
	}
	return true
}

// Check makes every check relayd run makes before it serves, short of
// binding its listeners and serving: New's preflight and build, then the registry
// opened as run opens it (a fleet file read and checked against the relay
// policy; Consul's client built). With online it also asks the registry:
// the Consul agent must answer and let the token read the measurements,
// and each fleet peer's admin port is dialled (one that does not answer
// is a warning: a peer down is no fault of this relay's config). err
// names every problem; warnings are what run would warn about at start.
func Check(cfg Config, online bool) (warnings []string, err error) {
	core, logged := observer.New(zap.WarnLevel)
	log := zap.New(core)
	p := runPreflight(&cfg)
	errs := p.errs
	if len(errs) == 0 {
		// What New builds on a sound preflight (the chain of next hops)
		// can still refuse; built here, then dropped: nothing is started.
		if s, err := newServer(cfg, p, log); err != nil {
			errs = append(errs, err)
		} else {
			s.cancel()
		}
	}
	// The registry is never closed: it never ran, so it holds nothing,
	// and closing a Consul registry deregisters the relay of this name,
	// which may be the one running on this host.
	if reg, err := p.checkRegistry(cfg, log); err != nil {
		errs = append(errs, err)
	} else if reg != nil {
		p.warnings = append(p.warnings, unknownChainRelays(cfg, reg)...)
		if online {
			errs = append(errs, checkRegistryOnline(cfg, reg, p.relayPol, log)...)
		}
	}
	warnings = p.warnings
	for _, e := range logged.All() {
		w := e.Message
		for k, v := range e.ContextMap() {
			w += fmt.Sprintf(" %s=%v", k, v)
		}
		warnings = append(warnings, w)
	}
	return warnings, errors.Join(errs...)
}

// checkRegistry opens the registry as run does before it measures
// (Server.openRegistry), with the configured listen addresses, when the
// settings it reads are sound; nil when there is none to open.
func (p *preflight) checkRegistry(cfg Config, log *zap.Logger) (registry.Registry, error) {
	if (cfg.Fleet == "") == (cfg.Consul.Addr == "") || cfg.Name == "" || p.relayPol == nil {
		return nil, nil // none, or Validate named what is missing
	}
	s := &Server{cfg: cfg, log: log, policy: p.dst, relayPol: p.relayPol, link: p.link}
	s.admin = s.newAdminClient()
	return s.openRegistry(registry.SelfRegistration{
		Name: cfg.Name, Region: cfg.Region, SOCKS: cfg.SOCKS, HTTP: cfg.HTTP, Admin: cfg.Admin, Relay: cfg.Relay,
		Advertise: cfg.Advertise,
	}, registry.Events{}, nil, false)
}

// onlineTimeout bounds each question relayd check --online asks.
const onlineTimeout = 3 * time.Second

// checkRegistryOnline asks the registry what run will need of it: the
// Consul agent answers and lets the token read this relay's measurements;
// each fleet peer's admin port accepts a connection (warned about when
// not). Errors name consul.addr or the peer.
func checkRegistryOnline(cfg Config, reg registry.Registry, relayPol *policy.Policy, log *zap.Logger) []error {
	ctx, cancel := context.WithTimeout(context.Background(), onlineTimeout)
	defer cancel()
	if cfg.Consul.Addr != "" {
		return checkConsul(ctx, cfg)
	}
	relays, _ := reg.Relays(ctx)
	var wg sync.WaitGroup
	for _, r := range relays {
		if r.Name == cfg.Name || r.Admin == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Control: relayPol.Control}
			c, err := d.DialContext(ctx, "tcp", r.Admin)
			if err != nil {
				log.Warn("fleet: a peer's admin port does not answer", zap.String("relay", r.Name), zap.String("admin", r.Admin), zap.Error(err))
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
	return nil
}

// checkConsul asks the agent for the cluster's leader (is it there, in a
// cluster that works) and for this relay's measurements key (may the token
// read the prefix).
func checkConsul(ctx context.Context, cfg Config) []error {
	ccfg := api.DefaultConfig()
	ccfg.Address, ccfg.Token = cfg.Consul.Addr, cfg.Consul.Token
	client, err := api.NewClient(ccfg)
	if err != nil {
		return []error{fmt.Errorf("consul.addr %s: %w", cfg.Consul.Addr, err)}
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	leader, err := client.Status().LeaderWithQueryOptions(q)
	if err != nil {
		return []error{fmt.Errorf("consul.addr %s: the agent does not answer: %w", cfg.Consul.Addr, err)}
	}
	if leader == "" {
		return []error{fmt.Errorf("consul.addr %s: the agent answers but its cluster has no leader", cfg.Consul.Addr)}
	}
	if _, _, err := client.KV().Get(registry.ConsulKVPrefix+cfg.Name, q); err != nil {
		return []error{fmt.Errorf("consul.token: cannot read this relay's measurements key (it needs key:read on the prefix, key:write on its own key, service:write, node:read): %w", err)}
	}
	return nil
}
