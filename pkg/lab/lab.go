// Package lab builds an emulated multi-region WAN on one Linux machine from a
// topology file: one network namespace per node, wanemu links between them,
// relayd on relay nodes and the traffic service on server nodes. It needs
// root (namespaces, TUN devices).
//
// Addressing: node i of the sorted node names gets 10.77.(i/250).(i%250+1),
// kept on the node's loopback; each link adds host routes between its two
// nodes only, so nodes without a link cannot reach each other. Node names
// resolve in every node through /etc/netns/<netns>/hosts, which
// `ip netns exec` mounts over /etc/hosts.
package lab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/fleet"
	"github.com/relaymesh/relaymesh/pkg/topology"
	"github.com/relaymesh/relaymesh/pkg/wanemu"
	"github.com/relaymesh/relaymesh/relay"
)

// Fixed ports: scripts can rely on them in every lab.
const (
	SOCKSPort   = 1080 // relays: SOCKS5
	HTTPPort    = 8080 // relays: HTTP proxy
	AdminPort   = 9090 // relays: admin API
	TrafficPort = 8000 // servers: GET /bytes/N, POST /upload
	RelayPort   = 7000 // relays: the native inter-relay protocol
)

// With Options.Registry "consul" the lab adds a node ConsulNode running a
// Consul agent (HTTP on ConsulPort), linked to every relay and to the
// client by links of ConsulLinkRTTMs, and relays register there instead of
// reading the fleet file.
const (
	ConsulNode      = "consul"
	ConsulPort      = 8500
	ConsulLinkRTTMs = 0.2
)

// DefaultStateRoot holds one directory per running lab: its state, the
// files it wrote (fleet, relay configs) and the services' logs.
const DefaultStateRoot = "/run/relaymesh/lab"

// Options say where the lab keeps its files and which programs it runs.
type Options struct {
	StateRoot  string      // default DefaultStateRoot
	RelaydPath string      // the relayd binary run on relay nodes
	TrafficCmd []string    // argv of the traffic service; the lab appends "--listen ADDR:8000"
	Log        *zap.Logger // default: no logs
	// ReadyTimeout bounds the wait for every service to accept connections
	// (default 15 s).
	ReadyTimeout time.Duration
	// Registry is what relays share measurements through: "fleet" (the
	// default: the lab's fleet file) or "consul" (an agent in the lab).
	Registry string
	// ConsulPath is the consul binary, with Registry "consul".
	ConsulPath string
	// Transport of the relays' links: "plain" (the default) or "tls".
	Transport string
}

// Node is one node as the lab runs it.
type Node struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Region string `json:"region,omitempty"`
	Netns  string `json:"netns"`
	Addr   string `json:"addr"`
}

// State is what other processes need to use a running lab (`lab exec`,
// `lab status`, `lab down`): written as state.json in the lab's directory.
type State struct {
	Name     string           `json:"name"`
	PID      int              `json:"pid"` // the process that holds the links
	Topology string           `json:"topology,omitempty"`
	Dir      string           `json:"dir"`
	Nodes    map[string]*Node `json:"nodes"`
	Started  time.Time        `json:"started"`
	// ConsulAddr is the lab's Consul agent (host:port) when its registry is
	// Consul; empty with the fleet file.
	ConsulAddr string `json:"consul_addr,omitempty"`
	// AppCPUs: the lab's services and commands run on these CPUs only
	// (taskset's list form), leaving the rest to the link engine; empty:
	// anywhere (wanemu.AppCPUs).
	AppCPUs string `json:"app_cpus,omitempty"`
	// Transport of the relays' links ("" is plain).
	Transport string `json:"transport,omitempty"`
}

// FleetPath is the lab's fleet file.
func (s *State) FleetPath() string { return filepath.Join(s.Dir, "fleet.yaml") }

// Command returns a command that runs argv inside node's namespace, with the
// lab's fleet file as the default registry and node names resolvable.
func (s *State) Command(ctx context.Context, node string, argv ...string) (*exec.Cmd, error) {
	n, ok := s.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("lab %s has no node %q (nodes: %s)", s.Name, node, strings.Join(s.nodeNames(), ", "))
	}
	if len(argv) == 0 {
		return nil, errors.New("no command given")
	}
	if s.AppCPUs != "" {
		if taskset, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{taskset, "-c", s.AppCPUs}, argv...)
		}
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Netns}, argv...)...)
	cmd.Env = append(os.Environ(), envvar.Lab+"="+s.Name, envvar.FleetSecretFile+"="+filepath.Join(s.Dir, "fleet-secret"))
	if s.Transport != "" {
		cmd.Env = append(cmd.Env, envvar.Transport+"="+s.Transport)
	}
	if s.ConsulAddr != "" {
		cmd.Env = append(cmd.Env, envvar.Consul+"="+s.ConsulAddr)
		// Consul does not carry the relays' admin token; relayctl plan
		// needs it for the relays' /v1/probe and /v1/info.
		if f, err := fleet.Load(s.FleetPath()); err == nil && f.AdminToken != "" {
			cmd.Env = append(cmd.Env, envvar.AdminToken+"="+f.AdminToken)
		}
	} else {
		cmd.Env = append(cmd.Env, envvar.Fleet+"="+s.FleetPath())
	}
	return cmd, nil
}

func (s *State) nodeNames() []string {
	var out []string
	for n := range s.Nodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Lab is a running lab. Close tears it down.
type Lab struct {
	State
	topo *topology.Topology
	opts Options
	// adminToken is every relay's admin token, and the fleet file's.
	adminToken string
	log        *zap.Logger
	links      []*runningLink

	mu    sync.Mutex // guards procs, topo and each link's cfg
	procs []*proc
}

type runningLink struct {
	cfg  topology.Link
	link *wanemu.Link
	down bool // cut: every packet dropped both ways (LinkUpdate.Down)
}

type proc struct {
	node, what string
	logPath    string
	cmd        *exec.Cmd
	done       chan struct{}
	err        error
}

// Up builds the lab described by topo and starts its services; it returns
// when every service accepts connections. On error, everything built so far
// is torn down.
func Up(ctx context.Context, topo *topology.Topology, topoPath string, opts Options) (l *Lab, err error) {
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	if opts.StateRoot == "" {
		opts.StateRoot = DefaultStateRoot
	}
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 15 * time.Second
	}
	switch opts.Registry {
	case "", "fleet":
	case "consul":
		if topo, err = withConsul(topo); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("registry %q: want fleet or consul", opts.Registry)
	}
	dir := filepath.Join(opts.StateRoot, topo.Name)
	if old, err := LoadState(dir); err == nil {
		if processAlive(old.PID) {
			return nil, fmt.Errorf("lab %s is already up (pid %d): run `relayctl lab down %s` first", topo.Name, old.PID, topo.Name)
		}
		opts.Log.Info("cleaning up a lab left behind by a dead process", zap.String("lab", topo.Name), zap.Int("pid", old.PID))
		cleanupState(old)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l = &Lab{
		State: State{Name: topo.Name, PID: os.Getpid(), Topology: topoPath, Dir: dir, Nodes: map[string]*Node{}, Started: time.Now(), AppCPUs: wanemu.AppCPUs(), Transport: opts.Transport},
		topo:  topo, opts: opts, log: opts.Log.Named("lab"),
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for i, name := range topo.NodeNames() {
		tn := topo.Nodes[name]
		l.Nodes[name] = &Node{Name: name, Role: tn.Role, Region: tn.Region, Netns: netnsName(topo.Name, name), Addr: nodeAddr(i)}
	}
	if opts.Registry == "consul" {
		l.Nodes[ConsulNode].Role = "consul"
		l.ConsulAddr = hostPort(l.Nodes[ConsulNode].Addr, ConsulPort)
	}
	for _, name := range topo.NodeNames() {
		if err := l.setupNode(l.Nodes[name]); err != nil {
			return l, err
		}
	}
	for i, lc := range topo.Links {
		if err := l.addLink(i, lc); err != nil {
			return l, err
		}
	}
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	l.adminToken = hex.EncodeToString(token)
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := os.WriteFile(l.secretPath(), []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		return l, err
	}
	if err := l.writeFleet(); err != nil {
		return l, err
	}
	if err := l.writeState(); err != nil {
		return l, err
	}
	if err := l.startServices(ctx); err != nil {
		return l, err
	}
	l.ResetStats()
	l.log.Info("lab up", zap.String("lab", l.Name), zap.Int("nodes", len(l.Nodes)), zap.Int("links", len(l.links)), zap.String("dir", dir))
	return l, nil
}

// CheckPrivileges says what is missing to build a lab, with what to do.
func CheckPrivileges() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (network namespaces and TUN devices): run it with sudo, e.g. `sudo relayctl lab run -t configs/lab/split2.yaml -- ...`")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("the lab needs /dev/net/tun (%v): load the tun module (`modprobe tun`) or, in a container, pass --device /dev/net/tun --cap-add NET_ADMIN", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the lab needs `ip` from iproute2: apt-get install iproute2")
	}
	return nil
}

// withConsul returns topo with a node for the Consul agent, linked to every
// relay (registration, health checks, KV) and to the client (relayctl).
func withConsul(topo *topology.Topology) (*topology.Topology, error) {
	if _, ok := topo.Nodes[ConsulNode]; ok {
		return nil, fmt.Errorf("nodes.%s: the name is taken by the lab's Consul agent with --registry consul; rename the node", ConsulNode)
	}
	t := *topo
	t.Nodes = maps.Clone(topo.Nodes)
	t.Nodes[ConsulNode] = &topology.Node{}
	t.Links = slices.Clone(topo.Links)
	for _, n := range append(topo.Relays(), topology.ClientNode) {
		t.Links = append(t.Links, topology.Link{Between: [2]string{ConsulNode, n}, RTTMs: ConsulLinkRTTMs})
	}
	return &t, t.Validate()
}

func netnsName(lab, node string) string { return "rm-" + lab + "-" + node }

func nodeAddr(i int) string { return fmt.Sprintf("10.77.%d.%d", i/250, i%250+1) }

func (l *Lab) setupNode(n *Node) error {
	_ = wanemu.DelNetns(n.Netns) // left over from a crash
	if err := wanemu.AddNetns(n.Netns); err != nil {
		return err
	}
	if err := wanemu.AddAddr(n.Netns, "lo", n.Addr); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	for k, v := range l.topo.Sysctls(n.Name) {
		if err := wanemu.SetSysctl(n.Netns, k, v); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	// /etc/netns/<netns>/hosts is mounted over /etc/hosts by `ip netns exec`.
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for _, name := range l.topo.NodeNames() {
		fmt.Fprintf(&hosts, "%s %s\n", l.Nodes[name].Addr, name)
	}
	etc := filepath.Join("/etc/netns", n.Netns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644)
}

// linkParams is one direction of a link; a cut link (down) drops every
// packet.
func linkParams(lc topology.Link, delayNs int64, down bool) wanemu.Params {
	p := wanemu.Params{
		DelayNs:    delayNs,
		RateBps:    int64(lc.RateMbit * 1e6), // 0: wanemu.DefaultRateBps
		QueueBytes: lc.QueueKB * 1024,
		Loss:       lc.Loss,
		JitterNs:   int64(lc.JitterMs * 1e6),
	}
	if down {
		p.Loss = 1
	}
	return p
}

func (l *Lab) addLink(i int, lc topology.Link) error {
	a, b := l.Nodes[lc.Between[0]], l.Nodes[lc.Between[1]]
	abNs, baNs := lc.OneWayNs()
	// One interface name per link index: unique in every namespace.
	ifname := "wan" + strconv.Itoa(i)
	wl, err := wanemu.NewLink(
		wanemu.Endpoint{Netns: a.Netns, Ifname: ifname, Addr: a.Addr},
		wanemu.Endpoint{Netns: b.Netns, Ifname: ifname, Addr: b.Addr},
		linkParams(lc, abNs, false), linkParams(lc, baNs, false))
	if err != nil {
		return fmt.Errorf("links[%d] %s-%s: %w", i, a.Name, b.Name, err)
	}
	l.links = append(l.links, &runningLink{cfg: lc, link: wl})
	return nil
}

// LinkUpdate changes some parameters of a running link; nil fields keep
// their value. Between may name the nodes in either order; DelayMs is then
// read in that order too.
type LinkUpdate struct {
	Between  [2]string `json:"between"`
	RTTMs    *float64  `json:"rtt_ms,omitempty"`
	DelayMs  []float64 `json:"delay_ms,omitempty"` // [from Between[0], from Between[1]], ms
	RateMbit *float64  `json:"rate_mbit,omitempty"`
	Loss     *float64  `json:"loss,omitempty"`
	QueueKB  *int      `json:"queue_kb,omitempty"`
	JitterMs *float64  `json:"jitter_ms,omitempty"`
	// Down cuts the link (true: every packet is dropped both ways, as when
	// a host vanishes or a path is cut; no FIN, no RST) or restores it
	// (false) with its parameters as they were.
	Down *bool `json:"down,omitempty"`
}

// UpdateLink applies u to the running link it names, after checking the
// result against the topology rules, and returns the link's new settings.
func (l *Lab) UpdateLink(u LinkUpdate) (topology.Link, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, rl := range l.links {
		lc := rl.cfg
		reversed := lc.Between == [2]string{u.Between[1], u.Between[0]}
		if lc.Between != u.Between && !reversed {
			continue
		}
		if u.RTTMs != nil {
			lc.RTTMs, lc.DelayMs = *u.RTTMs, nil
		}
		if u.DelayMs != nil {
			lc.DelayMs, lc.RTTMs = slices.Clone(u.DelayMs), 0
			if reversed && len(lc.DelayMs) == 2 {
				lc.DelayMs[0], lc.DelayMs[1] = lc.DelayMs[1], lc.DelayMs[0]
			}
		}
		if u.RateMbit != nil {
			lc.RateMbit = *u.RateMbit
		}
		if u.Loss != nil {
			lc.Loss = *u.Loss
		}
		if u.QueueKB != nil {
			lc.QueueKB = *u.QueueKB
		}
		if u.JitterMs != nil {
			lc.JitterMs = *u.JitterMs
		}
		// Validate the topology as it would be, so the rules stay in one place.
		next := *l.topo
		next.Links = slices.Clone(l.topo.Links)
		next.Links[i] = lc
		if err := next.Validate(); err != nil {
			return topology.Link{}, err
		}
		if u.Down != nil {
			rl.down = *u.Down
		}
		ab, ba := lc.OneWayNs()
		_ = rl.link.SetParams("ab", linkParams(lc, ab, rl.down))
		_ = rl.link.SetParams("ba", linkParams(lc, ba, rl.down))
		rl.cfg = lc
		l.topo = &next
		return lc, nil
	}
	return topology.Link{}, fmt.Errorf("lab %s has no link between %s and %s", l.Name, u.Between[0], u.Between[1])
}

func (l *Lab) writeFleet() error {
	f := fleet.File{AdminToken: l.adminToken}
	for _, name := range l.topo.Relays() {
		n := l.Nodes[name]
		f.Relays = append(f.Relays, fleet.Relay{
			Name: name, Region: n.Region,
			SOCKS: hostPort(n.Addr, SOCKSPort), HTTP: hostPort(n.Addr, HTTPPort), Admin: hostPort(n.Addr, AdminPort),
			Relay: hostPort(n.Addr, RelayPort),
		})
	}
	data, err := f.Marshal()
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# Fleet of lab %s, written by relayctl lab from %s.\n", l.Name, l.Topology)
	// 0600: the file holds the fleet's admin token.
	return os.WriteFile(l.FleetPath(), append([]byte(header), data...), 0o600)
}

// secretPath is the lab's fleet secret (native protocol), mode 0600.
func (l *Lab) secretPath() string { return filepath.Join(l.Dir, "fleet-secret") }

func (l *Lab) writeState() error {
	data, err := json.MarshalIndent(&l.State, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.Dir, "state.json"), data, 0o644)
}

func hostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

// listenerPorts is where a lab relay's listeners are, by relayd config key
// (nexthop.Scheme.Listener names the one serving a hop scheme).
var listenerPorts = map[string]int{"socks": SOCKSPort, "http": HTTPPort, "relay": RelayPort}

// relaydConfig is the config the lab writes for a relay node.
func (l *Lab) relaydConfig(n *Node, adminToken string) ([]byte, error) {
	tn := l.topo.Nodes[n.Name]
	scheme, ok := tn.NextScheme()
	port := listenerPorts[scheme.Listener]
	if !ok || port == 0 {
		return nil, fmt.Errorf("node %s: next_protocol %q: no relay listener in the lab serves it", n.Name, tn.NextProtocol)
	}
	hops := tn.Next
	if scheme.Routes() {
		// Each hop follows the header it is sent, not its own next:.
		hops = l.topo.Route(n.Name)
	}
	var next []string
	for _, h := range hops {
		next = append(next, fmt.Sprintf("%s://%s", scheme.Name, hostPort(h, port)))
	}
	cfg := relay.Defaults()
	cfg.Name, cfg.Region = n.Name, n.Region
	cfg.SOCKS, cfg.HTTP = hostPort(n.Addr, SOCKSPort), hostPort(n.Addr, HTTPPort)
	cfg.Admin, cfg.AdminToken = hostPort(n.Addr, AdminPort), adminToken
	// Every relay also serves the native protocol, with the lab's fleet
	// secret, so any relay can be a relaymesh:// hop.
	cfg.Relay, cfg.FleetSecretFile = hostPort(n.Addr, RelayPort), l.secretPath()
	// Pull every 2 s (not 5): a lab wants the matrix complete in 10 s.
	cfg.Probe.PullInterval = 2 * time.Second
	// The lab is a closed world of namespaces: no credentials, and lab
	// addresses (10.77/16) are private, so allow them.
	cfg.Open, cfg.Policy.AllowPrivate = true, true
	cfg.Log = relay.LogConfig{Level: "info", Format: "json"}
	if tn.Routing == "plan" {
		cfg.Routing = "plan"
	}
	if l.Transport != "" {
		cfg.Transport = l.Transport
	}
	cfg.Next = next
	// Probe every other relay of the lab and share measurements.
	if l.ConsulAddr != "" {
		cfg.Consul.Addr = l.ConsulAddr
	} else {
		cfg.Fleet = l.FleetPath()
	}
	if len(tn.Relayd) > 0 {
		// The topology's own settings win, key by key.
		over, err := yaml.Marshal(tn.Relayd)
		if err != nil {
			return nil, err
		}
		if err := cfg.Overlay(over); err != nil {
			return nil, fmt.Errorf("node %s: relayd: %w", n.Name, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node %s: the relayd config the lab would write: %w", n.Name, err)
	}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by relayctl lab for node "+n.Name+".\n"), data...), nil
}

func (l *Lab) startServices(ctx context.Context) error {
	adminToken := l.adminToken
	type waitFor struct {
		p    *proc
		n    *Node
		port int
	}
	var waits []waitFor
	if l.ConsulAddr != "" {
		if err := l.startConsul(ctx); err != nil {
			return err
		}
	}
	for _, name := range l.topo.Relays() {
		n := l.Nodes[name]
		if l.opts.RelaydPath == "" {
			return errors.New("no relayd binary to run on relay nodes (build it with `make build`, or pass --relayd PATH)")
		}
		cfg, err := l.relaydConfig(n, adminToken)
		if err != nil {
			return err
		}
		cfgPath := filepath.Join(l.Dir, name+".relayd.yaml")
		if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
			return err
		}
		p, err := l.start(ctx, n, "relayd", l.opts.RelaydPath, "run", "--config", cfgPath)
		if err != nil {
			return err
		}
		waits = append(waits, waitFor{p, n, SOCKSPort})
	}
	for _, name := range l.topo.Servers() {
		n := l.Nodes[name]
		if len(l.opts.TrafficCmd) == 0 {
			return errors.New("no traffic service command for server nodes")
		}
		argv := append(append([]string{}, l.opts.TrafficCmd...), "--listen", hostPort(n.Addr, TrafficPort))
		p, err := l.start(ctx, n, "traffic", argv...)
		if err != nil {
			return err
		}
		waits = append(waits, waitFor{p, n, TrafficPort})
	}
	deadline := time.Now().Add(l.opts.ReadyTimeout)
	for _, w := range waits {
		if err := waitListening(w.p, w.n, w.port, deadline); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) start(ctx context.Context, n *Node, what string, argv ...string) (*proc, error) {
	logPath := filepath.Join(l.Dir, n.Name+"."+what+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd, err := l.Command(context.WithoutCancel(ctx), n.Name, argv...)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Services die with the lab process even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node %s: start %s: %w", n.Name, what, err)
	}
	p := &proc{node: n.Name, what: what, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	l.log.Debug("started", zap.String("node", n.Name), zap.String("what", what), zap.Int("pid", cmd.Process.Pid), zap.String("log", logPath))
	return p, nil
}

// startConsul runs a Consul dev agent on the consul node and waits until it
// has elected itself leader (relays register right after).
func (l *Lab) startConsul(ctx context.Context) error {
	if l.opts.ConsulPath == "" {
		return errors.New("no consul binary for --registry consul (build it with `make bin/consul`, or pass --consul PATH)")
	}
	n := l.Nodes[ConsulNode]
	p, err := l.start(ctx, n, "consul", l.opts.ConsulPath, "agent", "-dev", "-node", "lab-"+l.Name,
		"-bind", n.Addr, "-client", n.Addr, "-http-port", strconv.Itoa(ConsulPort), "-dns-port", "-1", "-grpc-port", "-1")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(l.opts.ReadyTimeout)
	if err := waitListening(p, n, ConsulPort, deadline); err != nil {
		return err
	}
	for {
		var leader string
		// Dial on the namespace's thread (an http.Client would dial from
		// another goroutine, outside the namespace), then speak HTTP on it.
		err := wanemu.InNetns(n.Netns, func() error {
			c, err := net.DialTimeout("tcp", l.ConsulAddr, time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Second))
			req, _ := http.NewRequest(http.MethodGet, "http://"+l.ConsulAddr+"/v1/status/leader", nil)
			if err := req.Write(c); err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			leader = strings.Trim(strings.TrimSpace(string(body)), `"`)
			return err
		})
		if err == nil && leader != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consul on %s has no leader after %s: %v; its log (%s):\n%s", l.ConsulAddr, l.opts.ReadyTimeout, err, p.logPath, tail(p.logPath, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitListening dials the service from its own namespace until it answers.
func waitListening(p *proc, n *Node, port int, deadline time.Time) error {
	addr := hostPort(n.Addr, port)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("node %s: %s exited (%v) before listening on %s; its log (%s):\n%s", n.Name, p.what, p.err, addr, p.logPath, tail(p.logPath, 20))
		default:
		}
		err := wanemu.InNetns(n.Netns, func() error {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: %s not listening on %s: %v; its log (%s):\n%s", n.Name, p.what, addr, err, p.logPath, tail(p.logPath, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(path string, lines int) string {
	data, _ := os.ReadFile(path)
	s := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

// ResetStats zeroes every link's statistics: the self-check then covers
// only what happens from now on.
func (l *Lab) ResetStats() {
	for _, rl := range l.links {
		rl.link.ResetStats()
	}
	wanemu.ResetEngineStats()
}

// SelfCheck says why measurements taken in this lab so far are invalid (an
// emulator direction fell behind, a TUN ring dropped packets), or nil.
func (l *Lab) SelfCheck() error {
	var errs []error
	for _, rl := range l.links {
		if err := rl.link.SelfCheck(); err != nil {
			errs = append(errs, fmt.Errorf("link %s-%s: %w", rl.cfg.Between[0], rl.cfg.Between[1], err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the services, removes the links and namespaces, and deletes
// state.json (logs and written configs stay in the lab's directory).
func (l *Lab) Close() error {
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	for _, rl := range l.links {
		rl.link.Close()
	}
	l.links = nil
	cleanupState(&l.State)
	return nil
}

// cleanupState removes what a lab made outside its process: namespaces,
// /etc/netns entries and state.json.
func cleanupState(s *State) {
	for _, n := range s.Nodes {
		_ = wanemu.DelNetns(n.Netns)
		_ = os.RemoveAll(filepath.Join("/etc/netns", n.Netns))
	}
	_ = os.Remove(filepath.Join(s.Dir, "state.json"))
}

// LoadState reads a running lab's state from its directory.
func LoadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
	}
	return &s, nil
}

// Running lists the labs under root whose process is alive.
func Running(root string) ([]*State, error) {
	if root == "" {
		root = DefaultStateRoot
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*State
	for _, e := range entries {
		if s, err := LoadState(filepath.Join(root, e.Name())); err == nil && processAlive(s.PID) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Find returns the running lab called name, or the only running lab when
// name is empty.
func Find(root, name string) (*State, error) {
	labs, err := Running(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range labs {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	switch {
	case len(labs) == 0:
		return nil, errors.New("no lab is up: start one with `relayctl lab up -t configs/lab/split2.yaml`")
	case name != "":
		return nil, fmt.Errorf("no lab %q is up (running: %s)", name, strings.Join(names, ", "))
	case len(labs) > 1:
		return nil, fmt.Errorf("%d labs are up (%s): say which with --lab NAME", len(labs), strings.Join(names, ", "))
	}
	return labs[0], nil
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}
