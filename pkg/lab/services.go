package lab

// What runs in the lab's nodes: relayd (with the config the lab writes), the
// traffic service, a Consul agent; and the fleet file they share.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/relaymesh/relaymesh/pkg/fleet"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
	"github.com/relaymesh/relaymesh/relay"
)

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

func hostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }

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
	// A topology that sets its nodes' congestion control studies it: the
	// relays' links send with it too (relayd would take bbr otherwise).
	if cc := l.topo.Sysctls(n.Name)["net.ipv4.tcp_congestion_control"]; cc != "" {
		cfg.RelaySocket.Congestion = cc
	}
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
