package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// measurer runs the prober against the fleet's other relays, publishes
// what it measures and pulls the peers' measurements. Its goroutines end
// when stop is called.
type measurer struct {
	fleet  *registry.Fleet
	prober *probe.Prober
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *Server) startMeasuring() error {
	if s.cfg.Fleet == "" {
		return nil
	}
	fl, err := registry.OpenFleet(s.cfg.Fleet, s.cfg.Name)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	m := &measurer{fleet: fl}
	m.prober = &probe.Prober{
		Interval: s.cfg.Probe.Interval,
		Timeout:  s.cfg.Probe.Timeout,
		Window:   s.cfg.Probe.Window,
		Targets: func() map[string]string {
			out := map[string]string{}
			for _, r := range fl.File().Relays {
				if r.Name != s.cfg.Name && r.Admin != "" {
					out[r.Name] = r.Admin
				}
			}
			return out
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	log := s.log.Named("measure")
	m.wg.Add(3)
	go func() {
		defer m.wg.Done()
		m.prober.Run(ctx)
	}()
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(s.cfg.Probe.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = fl.Publish(ctx, s.cfg.Name, registry.PairsFrom(s.cfg.Name, m.prober.Snapshot()))
			}
		}
	}()
	// Log when the pull outcome changes (a peer unreachable, back), not on
	// every pull.
	go func() {
		defer m.wg.Done()
		last := ""
		fl.Run(ctx, s.cfg.Probe.PullInterval, func(err error) {
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if msg == last {
				return
			}
			last = msg
			if err != nil {
				log.Warn("cannot read every peer's measurements; using the last known", zap.Error(err))
			} else {
				log.Info("reading every peer's measurements")
			}
		})
	}()
	s.measure = m
	log.Info("probing the fleet", zap.String("fleet", s.cfg.Fleet), zap.Int("peers", len(fl.File().Relays)-1),
		zap.Duration("interval", s.cfg.Probe.Interval), zap.Int("window", s.cfg.Probe.Window))
	return nil
}

func (m *measurer) stop() {
	if m == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
}

// ReloadFleet re-reads the fleet file now (relayd calls it on SIGHUP).
func (s *Server) ReloadFleet() error {
	if s.measure == nil {
		return nil
	}
	_, err := s.measure.fleet.Reload()
	return err
}

// serveMeasurements answers /v1/measurements: this relay's own pairs, or
// with scope=fleet everything it knows.
func (s *Server) serveMeasurements(w http.ResponseWriter, r *http.Request) {
	var pairs []registry.Pair
	switch scope := r.URL.Query().Get("scope"); scope {
	case "", "local":
		if s.measure != nil {
			pairs = registry.PairsFrom(s.cfg.Name, s.measure.prober.Snapshot())
		}
	case "fleet":
		if s.measure != nil {
			pairs, _ = s.measure.fleet.Pairs(r.Context())
		}
	default:
		http.Error(w, fmt.Sprintf("scope %q: want local or fleet", scope), http.StatusBadRequest)
		return
	}
	writeJSON(w, registry.Serve(s.cfg.Name, s.cfg.Region, pairs, time.Now()))
}

// maxProbeCount bounds /v1/probe: it makes real connections.
const maxProbeCount = 20

// serveProbe answers /v1/probe?target=host:port&count=N: N TCP handshakes
// from this relay to the target, 200 ms apart. The target passes the same
// destination policy as tunnels: the admin API must not become a scanner of
// the relay's private network.
func (s *Server) serveProbe(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("target")
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		http.Error(w, "target: want host:port, e.g. /v1/probe?target=example.com:443&count=5", http.StatusBadRequest)
		return
	}
	count := 5
	if c := r.URL.Query().Get("count"); c != "" {
		if count, err = strconv.Atoi(c); err != nil || count < 1 || count > maxProbeCount {
			http.Error(w, fmt.Sprintf("count: want 1..%d", maxProbeCount), http.StatusBadRequest)
			return
		}
	}
	// Resolve once, outside the timed connects; the policy checks the
	// address actually connected to.
	ips, err := net.DefaultResolver.LookupNetIP(r.Context(), "ip", host)
	if err != nil || len(ips) == 0 {
		http.Error(w, fmt.Sprintf("resolving %s: %v", host, err), http.StatusBadGateway)
		return
	}
	addr := net.JoinHostPort(ips[0].Unmap().String(), port)
	if err := s.policy.Check(ips[0].Unmap()); err != nil {
		s.metrics.denials.WithLabelValues("policy").Inc()
		s.log.Named("admin").Warn("probe denied by destination policy", zap.String("target", target), zap.Error(err))
		http.Error(w, fmt.Sprintf("target %s: %v", target, err), http.StatusForbidden)
		return
	}
	dialer := s.policy.Dialer(net.Dialer{})
	measure := func(ctx context.Context, addr string) (time.Duration, error) {
		start := time.Now()
		c, err := dialer.DialContext(ctx, "tcp", addr)
		rtt := time.Since(start)
		if err != nil {
			return 0, err
		}
		c.Close()
		return rtt, nil
	}
	sum := probe.Sample(r.Context(), addr, count, 200*time.Millisecond, s.cfg.Probe.Timeout, measure)
	writeJSON(w, map[string]any{"from": s.cfg.Name, "target": target, "addr": addr, "summary": sum})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// SocketLimits are this relay's own socket limits: what the planner needs to know
// about the windows its segments can have.
type SocketLimits struct {
	RmemMaxBytes      int64  `json:"rmem_max_bytes"`      // net.core.rmem_max
	WmemMaxBytes      int64  `json:"wmem_max_bytes"`      // net.core.wmem_max
	TCPRmemMaxBytes   int64  `json:"tcp_rmem_max_bytes"`  // third field of net.ipv4.tcp_rmem: autotuning limit
	TCPWmemMaxBytes   int64  `json:"tcp_wmem_max_bytes"`  // third field of net.ipv4.tcp_wmem
	CongestionControl string `json:"congestion_control"`  // net.ipv4.tcp_congestion_control
	WindowBytesApprox int64  `json:"window_bytes_approx"` // ~ receive window autotuning reaches: tcp_rmem max x ~0.5 (kernel's scaling ratio; TESTBED.md measured 0.62)
}

// ReadLimits reads the socket limits of the network namespace this process
// runs in. Fields it cannot read stay zero.
func ReadLimits() SocketLimits {
	var l SocketLimits
	l.RmemMaxBytes = readSysctlInt("net/core/rmem_max", 0)
	l.WmemMaxBytes = readSysctlInt("net/core/wmem_max", 0)
	l.TCPRmemMaxBytes = readSysctlInt("net/ipv4/tcp_rmem", 2)
	l.TCPWmemMaxBytes = readSysctlInt("net/ipv4/tcp_wmem", 2)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control"); err == nil {
		l.CongestionControl = strings.TrimSpace(string(b))
	}
	// tcp_adv_win_scale (1 on recent kernels) keeps 1/2 of the buffer for
	// overhead; this is the order of magnitude, the real one is measured.
	l.WindowBytesApprox = l.TCPRmemMaxBytes / 2
	return l
}

func readSysctlInt(path string, field int) int64 {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if field >= len(f) {
		return 0
	}
	n, _ := strconv.ParseInt(f[field], 10, 64)
	return n
}
