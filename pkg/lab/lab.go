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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
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
	// Check is how the self-check judges runs; the zero value is
	// DefaultCheck.
	Check Check
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
	if opts.Check == (Check{}) {
		opts.Check = DefaultCheck
	}
	if err := opts.Check.Budget.Validate(); err != nil && !opts.Check.Strict {
		return nil, err
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
	if err := checkSlots(topo); err != nil {
		return nil, err
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

// listenerPorts is where a lab relay's listeners are, by relayd config key
// (nexthop.Scheme.Listener names the one serving a hop scheme).
var listenerPorts = map[string]int{"socks": SOCKSPort, "http": HTTPPort, "relay": RelayPort}

// ResetStats zeroes every link's statistics: the self-check then covers
// only what happens from now on.
func (l *Lab) ResetStats() {
	for _, rl := range l.links {
		rl.link.ResetStats()
	}
	wanemu.ResetEngineStats()
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
