package lab

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/nexthop"
	"github.com/relaymesh/relaymesh/relay"
)

func TestNodeAddrsUniqueAndPrivate(t *testing.T) {
	seen := map[string]bool{}
	for i := range topology.MaxNodes {
		a := nodeAddr(i)
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.IsPrivate() || !netip.MustParsePrefix("10.77.0.0/16").Contains(ip) {
			t.Fatalf("node %d: address %q not in 10.77.0.0/16", i, a)
		}
		if ip.As4()[3] == 0 || ip.As4()[3] == 255 || seen[a] {
			t.Fatalf("node %d: address %s is a network/broadcast-looking or duplicate address", i, a)
		}
		seen[a] = true
	}
}

// The config the lab writes for a relay is one relayd accepts, and chains to
// the topology's next hops by name over the chosen protocol.
func TestRelaydConfigIsAccepted(t *testing.T) {
	topo, err := topology.Parse([]byte(`name: t
nodes:
  client: {}
  r1: {role: relay, region: osaka, next: [r2]}
  r2: {role: relay, region: kyoto, next: [r3], next_protocol: http}
  r3: {role: relay}
  r0: {role: relay, next: [r1, r2], next_protocol: relaymesh}
  r5: {role: relay, next: [r1], next_protocol: socks5}
links:
  - {between: [client, r1], rtt_ms: 1}
  - {between: [r1, r2], rtt_ms: 1}
  - {between: [r2, r3], rtt_ms: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	l := labOf(topo)
	for _, tc := range []struct {
		node string
		next []string
	}{
		// The default is native, with the whole onward route in one
		// header (relays follow the header, not their own next:).
		{"r1", []string{"relaymesh://r2:7000", "relaymesh://r3:7000"}},
		{"r2", []string{"http://r3:8080"}},
		{"r3", nil},
		{"r0", []string{"relaymesh://r1:7000", "relaymesh://r2:7000", "relaymesh://r3:7000"}},
		{"r5", []string{"socks5://r1:1080"}},
	} {
		data, err := l.relaydConfig(l.Nodes[tc.node], "lab-test-admin-token-0123")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := relay.Parse(data)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			t.Fatalf("%s: relayd rejects the lab's config: %v\n%s", tc.node, err, data)
		}
		if !slices.Equal(cfg.Next, tc.next) {
			t.Errorf("%s: next %v, want %v", tc.node, cfg.Next, tc.next)
		}
		if want := l.Nodes[tc.node].Addr + ":1080"; cfg.SOCKS != want {
			t.Errorf("%s: socks %q, want %q", tc.node, cfg.SOCKS, want)
		}
		if cfg.Region != topo.Nodes[tc.node].Region || cfg.Name != tc.node || !cfg.Policy.AllowPrivate {
			t.Errorf("%s: name %q region %q allow_private %v", tc.node, cfg.Name, cfg.Region, cfg.Policy.AllowPrivate)
		}
	}
}

// A topology's relayd: settings are laid over the lab's key by key, and a
// key relayd does not know fails when the lab writes the config, naming
// the node, not later in a relay's log.
func TestRelaydOverlay(t *testing.T) {
	parse := func(relayd string) (*Lab, error) {
		topo, err := topology.Parse([]byte(`name: t
nodes:
  client: {}
  r1: {role: relay, relayd: ` + relayd + `}
links:
  - {between: [client, r1], rtt_ms: 1}
`))
		if err != nil {
			return nil, err
		}
		return labOf(topo), nil
	}
	l, err := parse(`{probe: {window: 5}, relay_socket: {keepalive: 1s}}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg := r1Config(t, l)
	if cfg.Probe.Window != 5 || cfg.Probe.PullInterval != 2*time.Second || cfg.RelaySocket.KeepAlive != time.Second {
		t.Errorf("overlay not key by key: probe %+v, relay_socket %+v", cfg.Probe, cfg.RelaySocket)
	}
	l, err = parse(`{probe: {windw: 5}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.relaydConfig(l.Nodes["r1"], "lab-test-admin-token-0123"); err == nil ||
		!strings.Contains(err.Error(), "r1") || !strings.Contains(err.Error(), "windw") {
		t.Fatalf("unknown relayd key: %v", err)
	}
	l, err = parse(`{transport: quic}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.relaydConfig(l.Nodes["r1"], "lab-test-admin-token-0123"); err == nil || !strings.Contains(err.Error(), "transport") {
		t.Fatalf("invalid relayd value: %v", err)
	}
}

// Every hop scheme relayd serves can chain lab relays: the lab knows the
// port of the listener serving it.
func TestEverySchemeHasALabListener(t *testing.T) {
	for _, s := range nexthop.Schemes() {
		if s.Listener != "" && listenerPorts[s.Listener] == 0 {
			t.Errorf("%s:// is served by relayd's %q listener, which the lab gives no port", s.Name, s.Listener)
		}
	}
}

// A topology that sets a node's congestion control gives its relay's links
// that one (relayd would take bbr otherwise); the node's relayd: settings
// still win.
func TestRelaydCongestionFromSysctl(t *testing.T) {
	for _, tc := range []struct{ node, want string }{
		{`{role: relay}`, "cubic"},
		{`{role: relay, sysctl: {net.ipv4.tcp_congestion_control: reno}}`, "reno"},
		{`{role: relay, relayd: {relay_socket: {congestion: bbr}}}`, "bbr"},
	} {
		topo, err := topology.Parse([]byte(`name: t
defaults: {sysctl: {net.ipv4.tcp_congestion_control: cubic}}
nodes:
  client: {}
  r1: ` + tc.node + `
links:
  - {between: [client, r1], rtt_ms: 1}
`))
		if err != nil {
			t.Fatal(err)
		}
		l := labOf(topo)
		if cfg := r1Config(t, l); cfg.RelaySocket.Congestion != tc.want {
			t.Errorf("r1 %s: relay_socket.congestion %q, want %q", tc.node, cfg.RelaySocket.Congestion, tc.want)
		}
	}
}

// labOf is a lab of topo's nodes, as Up would address them, without
// bringing anything up.
func labOf(topo *topology.Topology) *Lab {
	l := &Lab{State: State{Name: topo.Name, Nodes: map[string]*Node{}}, topo: topo}
	for i, name := range topo.NodeNames() {
		l.Nodes[name] = &Node{Name: name, Role: topo.Nodes[name].Role, Region: topo.Nodes[name].Region, Addr: nodeAddr(i)}
	}
	return l
}

// r1Config is the relayd config the lab writes for its node r1, parsed.
func r1Config(t *testing.T, l *Lab) relay.Config {
	t.Helper()
	data, err := l.relaydConfig(l.Nodes["r1"], "lab-test-admin-token-0123")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := relay.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
