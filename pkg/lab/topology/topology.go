// Package topology parses, validates and describes emulated-WAN lab topology
// files: named nodes (each one network namespace), the links between them
// with their delay, rate and loss, and the per-node network sysctls.
//
// Files are YAML, decoded strictly (unknown keys are errors); the schema and
// the shipped files are described in configs/lab/README.md. The package is
// pure: nothing here touches the system except Load reading its file.
package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/relaymesh/relaymesh/pkg/nexthop"
)

// Roles a node can have. An empty role is RoleClient.
const (
	RoleClient = "client" // a plain host; also what "" means
	RoleRelay  = "relay"  // runs relayd
	RoleServer = "server" // runs the traffic service
)

// ClientNode is the node every topology must have: lab commands run there.
const ClientNode = "client"

// Limits and defaults of the schema.
const (
	MaxNodes = 200   // nodes per topology
	MaxRTTMs = 10000 // rtt_ms (and the sum of delay_ms) must be below this, ms
	// DefaultRateMbit is the line rate of a link whose rate_mbit is 0,
	// Mbit/s per direction: wanemu.DefaultRateBps (there is no unlimited;
	// see there why).
	DefaultRateMbit = 1000.0
	DefaultLoss     = 0.0 // loss: probability in [0,1) per packet per direction
	DefaultQueueKB  = 0   // queue_kb: KiB; 0 = the emulator's default tail-drop queue
	DefaultJitterMs = 0.0 // jitter_ms: extra uniform random delay, ms; 0 = none

	// delayToleranceMs is how far rtt_ms may be from the sum of delay_ms
	// (rounding of decimal literals), ms; 1 ns.
	delayToleranceMs = 1e-6
)

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,15}$`) // becomes a namespace prefix
	nodeRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,14}$`)    // fits an interface name (15 bytes)
	sysctlRE = regexp.MustCompile(`^net\.[a-z0-9_.]+$`)        // network-namespace sysctls only
	regionRE = regexp.MustCompile(`^[a-z0-9-]+$`)
)

// Topology is one lab topology file.
type Topology struct {
	Name     string           `yaml:"name"`
	Defaults Defaults         `yaml:"defaults"`
	Nodes    map[string]*Node `yaml:"nodes"`
	Links    []Link           `yaml:"links"`
}

// Defaults apply to every node unless the node overrides them.
type Defaults struct {
	// Sysctl is written in every node's namespace, e.g.
	// net.ipv4.tcp_congestion_control: cubic. Empty by default.
	Sysctl map[string]string `yaml:"sysctl"`
}

// Node is one network namespace. Each node gets one stable address; the lab
// assigns them.
type Node struct {
	Role   string            `yaml:"role"`   // "" or "client" (plain host), "relay" (runs relayd), "server" (runs the traffic service)
	Region string            `yaml:"region"` // what `relayctl plan --dst` takes; "" = none
	Sysctl map[string]string `yaml:"sysctl"` // overrides defaults.sysctl for this node
	// Next is, for relays only, the static onward chain of relay node names
	// relayd dials through, in order. Empty: dial destinations directly.
	Next []string `yaml:"next"`
	// NextProtocol is, for relays only, how Next hops are spoken to: a
	// hop scheme relayd serves (pkg/nexthop), "" meaning relaymesh (the
	// native inter-relay protocol: the relay sends one header naming its
	// whole onward Route); socks5 or http make each relay a client of its
	// Next, hop by hop or nested, kept for comparisons. See NextScheme.
	NextProtocol string `yaml:"next_protocol"`
	// Routing is, for relays only, relayd's routing: "" or "static" (its
	// next:), or "plan" (each destination's chain planned from the lab's
	// measurements; exclusive with next:).
	Routing string `yaml:"routing"`
	// Relayd is, for relays only, relayd configuration laid over what the
	// lab writes, key by key (a section's keys one by one), e.g.
	// relayd: {relay_socket: {keepalive: 1s}}. The lab checks it at up.
	Relayd map[string]any `yaml:"relayd"`
}

// NextScheme is the hop scheme n's Next hops are spoken to in:
// NextProtocol, relaymesh when empty. ok is false when that is not a
// registered scheme relayd serves (Validate refuses the topology).
func (n *Node) NextScheme() (s nexthop.Scheme, ok bool) {
	name := n.NextProtocol
	if name == "" {
		name = nexthop.Relaymesh
	}
	s, ok = nexthop.Lookup(name)
	return s, ok && s.Listener != ""
}

// nextProtocols lists the schemes next_protocol may name.
func nextProtocols() string {
	var names []string
	for _, s := range nexthop.Schemes() {
		if s.Listener != "" {
			names = append(names, s.Name)
		}
	}
	return strings.Join(names, ", ")
}

// Route is the whole onward chain of relay name with the native protocol:
// its Next, then the Next of that chain's last relay, and so on. A relay
// that receives a route header follows the header, not its own next:, so
// a hop-by-hop topology (r1 next [r2], r2 next [r3]) must put r2 and r3
// in r1's one header to keep the same path. Validate rejects loops; the
// visited set only guards an unvalidated topology.
func (t *Topology) Route(name string) []string {
	n := t.Nodes[name]
	if n == nil || len(n.Next) == 0 {
		return nil
	}
	route := append([]string(nil), n.Next...)
	seen := map[string]bool{name: true}
	for _, h := range route {
		seen[h] = true
	}
	for {
		last := t.Nodes[route[len(route)-1]]
		if last == nil || len(last.Next) == 0 {
			return route
		}
		for _, h := range last.Next {
			if seen[h] {
				return route
			}
			seen[h] = true
			route = append(route, h)
		}
	}
}

// Link is one emulated point-to-point link; both directions are shaped
// independently with the same rate, loss, queue and jitter.
type Link struct {
	Between [2]string `yaml:"between"`
	// RTTMs is the round-trip delay in ms, split equally between the two
	// directions unless DelayMs is given. Default 0.
	RTTMs float64 `yaml:"rtt_ms"`
	// DelayMs optionally gives the one-way delays [a->b, b->a] in ms; if
	// given it has 2 entries and RTTMs is 0 or their sum.
	DelayMs  []float64 `yaml:"delay_ms"`
	RateMbit float64   `yaml:"rate_mbit"` // Mbit/s per direction; 0 = DefaultRateMbit (1000)
	Loss     float64   `yaml:"loss"`      // Bernoulli loss probability in [0,1) per direction; default 0
	QueueKB  int       `yaml:"queue_kb"`  // tail-drop queue of the rate limiter, KiB; 0 = emulator default
	JitterMs float64   `yaml:"jitter_ms"` // extra uniform random delay 0..jitter ms per packet, order kept; default 0
}

// Load reads a topology file and parses it; errors are prefixed with path.
func Load(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *PathError already names the path
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse decodes one YAML document strictly (unknown keys are errors) and
// validates it.
func Parse(data []byte) (*Topology, error) {
	var t Topology
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty topology")
		}
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	if err := checkWholeQueues(data); err != nil {
		return nil, err
	}
	// `name:` with no value decodes to a nil node: an empty node.
	for n, node := range t.Nodes {
		if node == nil {
			t.Nodes[n] = &Node{}
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// checkWholeQueues rejects a fractional links[i].queue_kb, which the YAML decoder
// would silently truncate into the int field.
func checkWholeQueues(data []byte) error {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil // the strict decode already accepted it; nothing to add
	}
	links := mapValue(doc.Content[0], "links")
	if links == nil || links.Kind != yaml.SequenceNode {
		return nil
	}
	for i, l := range links.Content {
		q := mapValue(l, "queue_kb")
		if q == nil || q.Kind != yaml.ScalarNode || q.ShortTag() != "!!float" {
			continue
		}
		if f, err := strconv.ParseFloat(q.Value, 64); err == nil && f != math.Trunc(f) {
			return fmt.Errorf("links[%d].queue_kb: %s is not a whole number of KiB", i, q.Value)
		}
	}
	return nil
}

// mapValue returns the value of key in mapping node m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Validate checks the topology and returns every problem found, each naming
// its field, joined with errors.Join.
func (t *Topology) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case t.Name == "":
		add("name: required")
	case !nameRE.MatchString(t.Name):
		add("name: %q must match %s (it becomes a namespace prefix)", t.Name, nameRE)
	}
	checkSysctl(add, "defaults.sysctl", t.Defaults.Sysctl)

	if len(t.Nodes) == 0 {
		add("nodes: required, with at least a node named %q", ClientNode)
	} else if _, ok := t.Nodes[ClientNode]; !ok {
		add("nodes: no node named %q (lab commands run there)", ClientNode)
	}
	if len(t.Nodes) > MaxNodes {
		add("nodes: %d nodes, at most %d", len(t.Nodes), MaxNodes)
	}
	for _, name := range t.NodeNames() {
		n := t.node(name)
		f := "nodes." + name
		if !nodeRE.MatchString(name) {
			add("%s: node name %q must match %s", f, name, nodeRE)
		}
		switch n.Role {
		case "", RoleClient, RoleRelay, RoleServer:
		default:
			add("%s.role: %q is not one of client, relay, server", f, n.Role)
		}
		if n.Region != "" && !regionRE.MatchString(n.Region) {
			add("%s.region: %q must match %s", f, n.Region, regionRE)
		}
		checkSysctl(add, f+".sysctl", n.Sysctl)
		if _, ok := n.NextScheme(); !ok {
			add("%s.next_protocol: %q is not one of %s", f, n.NextProtocol, nextProtocols())
		}
		switch n.Routing {
		case "", "static":
		case "plan":
			if len(n.Next) > 0 {
				add("%s.routing: plan and next: choose one", f)
			}
		default:
			add("%s.routing: %q is not static or plan", f, n.Routing)
		}
		if n.Role != RoleRelay {
			if n.Routing != "" {
				add("%s.routing: only relays have routing (role is %q)", f, n.Role)
			}
			if len(n.Next) > 0 {
				add("%s.next: only relays have next (role is %q)", f, n.Role)
			}
			if n.NextProtocol != "" {
				add("%s.next_protocol: only relays have next_protocol (role is %q)", f, n.Role)
			}
			if len(n.Relayd) > 0 {
				add("%s.relayd: only relays run relayd (role is %q)", f, n.Role)
			}
			continue
		}
		for i, hop := range n.Next {
			hf := fmt.Sprintf("%s.next[%d]", f, i)
			h, ok := t.Nodes[hop]
			switch {
			case !ok:
				add("%s: unknown node %q", hf, hop)
			case hop == name:
				add("%s: %q cannot chain through itself", hf, hop)
			case h == nil || h.Role != RoleRelay:
				add("%s: %q is not a relay", hf, hop)
			}
		}
	}
	if c := t.nextCycle(); c != nil {
		add("nodes.%s.next: relays chain through each other in a loop (%s)", c[0], strings.Join(c, " -> "))
	}

	seen := make(map[[2]string]int, len(t.Links))
	for i, l := range t.Links {
		f := fmt.Sprintf("links[%d]", i)
		a, b := l.Between[0], l.Between[1]
		ends := true
		for j, e := range l.Between {
			if e == "" {
				add("%s.between: endpoint %d is empty", f, j)
				ends = false
			} else if _, ok := t.Nodes[e]; !ok {
				add("%s.between: unknown node %q", f, e)
				ends = false
			}
		}
		if a == b && a != "" {
			add("%s.between: both ends are %q", f, a)
		} else if ends {
			key := [2]string{a, b}
			if b < a {
				key = [2]string{b, a}
			}
			if j, dup := seen[key]; dup {
				add("%s.between: duplicate of links[%d] (%s, %s)", f, j, key[0], key[1])
			} else {
				seen[key] = i
			}
		}
		if !(l.RTTMs >= 0 && l.RTTMs < MaxRTTMs) {
			add("%s.rtt_ms: %v must be >= 0 and < %d", f, l.RTTMs, MaxRTTMs)
		}
		if l.DelayMs != nil {
			if len(l.DelayMs) != 2 {
				add("%s.delay_ms: want 2 entries [a->b, b->a], got %d", f, len(l.DelayMs))
			} else {
				okd := true
				for j, d := range l.DelayMs {
					if !(d >= 0 && d < MaxRTTMs) {
						add("%s.delay_ms[%d]: %v must be >= 0 and < %d", f, j, d, MaxRTTMs)
						okd = false
					}
				}
				sum := l.DelayMs[0] + l.DelayMs[1]
				switch {
				case !okd:
				case sum >= MaxRTTMs:
					add("%s.delay_ms: sum %v must be < %d", f, sum, MaxRTTMs)
				case l.RTTMs != 0 && math.Abs(l.RTTMs-sum) > delayToleranceMs:
					add("%s.rtt_ms: %v must be 0 or the sum of delay_ms (%v)", f, l.RTTMs, sum)
				}
			}
		}
		if !(l.RateMbit >= 0) || math.IsInf(l.RateMbit, 0) {
			add("%s.rate_mbit: %v must be >= 0 (0 = unlimited)", f, l.RateMbit)
		}
		if !(l.Loss >= 0 && l.Loss < 1) {
			add("%s.loss: %v must be in [0, 1)", f, l.Loss)
		}
		if l.QueueKB < 0 {
			add("%s.queue_kb: %d must be >= 0 (0 = default)", f, l.QueueKB)
		}
		if !(l.JitterMs >= 0) || math.IsInf(l.JitterMs, 0) {
			add("%s.jitter_ms: %v must be >= 0", f, l.JitterMs)
		}
	}
	return errors.Join(errs...)
}

func checkSysctl(add func(string, ...any), field string, m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case !sysctlRE.MatchString(k) || strings.Contains(k, "..") || strings.HasSuffix(k, "."):
			add("%s: key %q must be a network sysctl matching %s", field, k, sysctlRE)
		case strings.TrimSpace(m[k]) == "":
			add("%s.%s: empty value", field, k)
		case strings.ContainsAny(m[k], "\n\r\x00"):
			add("%s.%s: value must be one line", field, k)
		}
	}
}

// nextCycle returns a loop in the relays' next graph (first name repeated at
// the end), or nil. relayd dials every hop of its chain through the next
// hop's own chain, so a loop would never reach a destination.
func (t *Topology) nextCycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]int, len(t.Nodes))
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		node := t.node(n)
		if node.Role == RoleRelay {
			for _, h := range node.Next {
				if h == n {
					continue // reported as self-chaining
				}
				hn, ok := t.Nodes[h]
				if !ok || hn == nil || hn.Role != RoleRelay {
					continue
				}
				switch color[h] {
				case grey:
					for i, s := range stack {
						if s == h {
							found = append(append([]string(nil), stack[i:]...), h)
							return true
						}
					}
				case white:
					if visit(h) {
						return true
					}
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, n := range t.Relays() {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return nil
}

// node returns the named node, an empty node for a nil entry, or nil.
func (t *Topology) node(name string) *Node {
	n, ok := t.Nodes[name]
	if !ok {
		return nil
	}
	if n == nil {
		return &Node{}
	}
	return n
}

// NodeNames returns every node name, sorted.
func (t *Topology) NodeNames() []string {
	names := make([]string, 0, len(t.Nodes))
	for n := range t.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Sysctls returns defaults.sysctl merged with the node's own sysctl (the node
// wins), as a new map. An unknown node gets the defaults.
func (t *Topology) Sysctls(node string) map[string]string {
	m := make(map[string]string, len(t.Defaults.Sysctl))
	for k, v := range t.Defaults.Sysctl {
		m[k] = v
	}
	if n := t.node(node); n != nil {
		for k, v := range n.Sysctl {
			m[k] = v
		}
	}
	return m
}

// OneWayNs returns the one-way delays in ns for Between[0]->Between[1] and
// back: DelayMs when it has 2 entries, else RTTMs split equally (an odd
// nanosecond goes to the way back, so the two always sum to the RTT).
func (l Link) OneWayNs() (abNs, baNs int64) {
	if len(l.DelayMs) == 2 {
		return msToNs(l.DelayMs[0]), msToNs(l.DelayMs[1])
	}
	rtt := msToNs(l.RTTMs)
	return rtt / 2, rtt - rtt/2
}

// msToNs converts ms to ns, rounded; negative or NaN gives 0 and huge values
// saturate (Validate rejects both).
func msToNs(ms float64) int64 {
	if !(ms > 0) {
		return 0
	}
	ns := math.Round(ms * 1e6)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(ns)
}

// Relays returns the names of the relay nodes, sorted.
func (t *Topology) Relays() []string { return t.withRole(RoleRelay) }

// Servers returns the names of the server nodes, sorted.
func (t *Topology) Servers() []string { return t.withRole(RoleServer) }

func (t *Topology) withRole(role string) []string {
	var out []string
	for _, n := range t.NodeNames() {
		if t.node(n).Role == role {
			out = append(out, n)
		}
	}
	return out
}

// NodeForRegion returns a server node in region if there is one, else any
// node with that region (the first by name in both cases), and whether one
// was found. An empty region matches nothing.
func (t *Topology) NodeForRegion(region string) (string, bool) {
	if region == "" {
		return "", false
	}
	other := ""
	for _, n := range t.NodeNames() {
		node := t.node(n)
		if node.Region != region {
			continue
		}
		if node.Role == RoleServer {
			return n, true
		}
		if other == "" {
			other = n
		}
	}
	return other, other != ""
}
