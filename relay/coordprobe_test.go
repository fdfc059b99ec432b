package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// fakePeers is a fleet of n peers p0..p(n-1) at made-up admin addresses,
// with coordinates on a line 10 ms apart.
func fakePeers(n int) coordPeers {
	return func(context.Context) ([]coord.Peer, map[string]string) {
		var peers []coord.Peer
		admins := map[string]string{}
		for i := range n {
			name := fmt.Sprintf("p%d", i)
			peers = append(peers, coord.Peer{Name: name, Coord: &coordinate.Coordinate{Vec: []float64{0.01 * float64(i), 0, 0, 0, 0, 0, 0, 0}}})
			admins[name] = fmt.Sprintf("10.0.0.%d:9090", i)
		}
		return peers, admins
	}
}

// With fresh set (a Consul relay that reads every relay's coordinate
// seldom), the coordinate of the peer just probed is read anew and moves
// this relay's, not the one read with the fleet's.
func TestCoordProberReadsTheProbedPeersCoordinateFresh(t *testing.T) {
	cfg := Defaults().Probe
	cfg.Mode = ProbeCoordinates
	p, err := newCoordProber("self", cfg, fakePeers(1), nil, newMetrics(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	p.measure = func(context.Context, string) (time.Duration, error) { return 20 * time.Millisecond, nil }
	moved := &coordinate.Coordinate{Vec: []float64{0.5, 0, 0, 0, 0, 0, 0, 0}}
	var asked []string
	p.fresh = func(_ context.Context, peer string) (*coordinate.Coordinate, error) {
		asked = append(asked, peer)
		return moved, nil
	}
	for range 40 {
		p.probeOnce(context.Background())
	}
	if len(asked) != 40 || asked[0] != "p0" {
		t.Fatalf("fresh asked for %v: want p0 at each of the 40 probes", asked)
	}
	toMoved, _ := coord.EstimateMs(p.Coordinate(), moved)
	toOld, _ := coord.EstimateMs(p.Coordinate(), &coordinate.Coordinate{Vec: make([]float64, 8)})
	if toMoved > 100 || toOld < 300 {
		t.Errorf("estimates to p0's fresh coordinate %.0f ms, to the one read with the fleet's %.0f ms: want about 20 to the fresh one", toMoved, toOld)
	}
	// A failed read leaves the probe to the coordinate read with the
	// fleet's.
	p.fresh = func(context.Context, string) (*coordinate.Coordinate, error) { return nil, errors.New("agent away") }
	p.probeOnce(context.Background())
}

// One probe a tick, whatever the fleet's size: each probeOnce makes exactly
// one handshake, to a peer of the probe set (Nearest + Random of a fleet
// of 50), and the results become pairs.
func TestCoordProberOneProbeATick(t *testing.T) {
	cfg := Defaults().Probe
	cfg.Mode, cfg.Nearest, cfg.Random = ProbeCoordinates, 3, 2
	m := newMetrics()
	p, err := newCoordProber("self", cfg, fakePeers(50), nil, m, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	p.measure = func(_ context.Context, addr string) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[addr]++
		return 20 * time.Millisecond, nil
	}
	const ticks = 40
	for i := 0; i < ticks; i++ {
		p.probeOnce(context.Background())
	}
	total := 0
	for _, n := range calls {
		total += n
	}
	if total != ticks {
		t.Fatalf("%d probes in %d ticks: want one a tick", total, ticks)
	}
	// The set is 5; the nearest move as the coordinate learns (and ranks
	// the peers it estimates nearer than those it measured), never to a
	// sweep of the fleet.
	if len(calls) < 5 || len(calls) > 10 {
		t.Fatalf("probed %d peers, want the probe set's 5 (3 nearest + 2 random) and a few that replaced nearest ones: %v", len(calls), calls)
	}
	if got := gaugeValue(t, m, "relaymesh_probe_set_size"); got != 5 {
		t.Errorf("relaymesh_probe_set_size %v, want 5", got)
	}
	if got := counterSum(t, m, "relaymesh_probes_total"); got != ticks {
		t.Errorf("relaymesh_probes_total %v, want %d", got, ticks)
	}
	if up := counterSum(t, m, "relaymesh_coordinate_updates_total"); up == 0 {
		t.Error("answered probes to peers with coordinates did not move the coordinate")
	}

	pairs := p.Snapshot()
	if len(pairs) != 5 {
		t.Fatalf("pairs %+v, want one per peer of the set", pairs)
	}
	for _, pr := range pairs {
		if pr.From != "self" || pr.Samples == 0 || pr.UpdatedAt.IsZero() || pr.Loss != 0 || pr.RTTMs != 20 || pr.MinMs != 20 || !pr.Answering() {
			t.Errorf("pair %+v, want 20 ms, no loss", pr)
		}
	}
}

// Failed probes count as the mesh prober's windows count them: in Samples
// and in Loss, the failed share; LastError is the newest probe's error
// while it failed. A refused connect measured the path but the relay is
// down: a failure too.
func TestCoordProberLossAndLastError(t *testing.T) {
	cfg := Defaults().Probe
	cfg.Mode, cfg.Nearest, cfg.Random = ProbeCoordinates, 1, 1
	p, err := newCoordProber("self", cfg, fakePeers(1), nil, newMetrics(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	var next error
	p.measure = func(context.Context, string) (time.Duration, error) {
		if next != nil {
			return 3 * time.Millisecond, next
		}
		return 5 * time.Millisecond, nil
	}
	for _, err := range []error{nil, context.DeadlineExceeded, nil, refused} {
		next = err
		p.probeOnce(context.Background())
	}
	pairs := p.Snapshot()
	if len(pairs) != 1 || pairs[0].Samples != 4 || pairs[0].Loss != 0.5 || pairs[0].RTTMs != 5 ||
		!strings.Contains(pairs[0].LastError, "refused") || pairs[0].Answering() {
		t.Fatalf("after ok, timeout, ok, refused: %+v, want 4 samples, loss 0.5, the refusal, not answering", pairs)
	}
	next = nil
	p.probeOnce(context.Background())
	if pairs := p.Snapshot(); len(pairs) != 1 || pairs[0].LastError != "" || !pairs[0].Answering() {
		t.Fatalf("after an answer: %+v, want no error", pairs)
	}
}

// gather returns the metric families of m by name.
func gather(t *testing.T, m *metrics, name string) []float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			switch {
			case mt.Counter != nil:
				out = append(out, mt.Counter.GetValue())
			case mt.Gauge != nil:
				out = append(out, mt.Gauge.GetValue())
			}
		}
	}
	if out == nil {
		t.Fatalf("no %s in the metrics", name)
	}
	return out
}

func counterSum(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range gather(t, m, name) {
		sum += v
	}
	return sum
}

func gaugeValue(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	return gather(t, m, name)[0]
}

// freeLoopback is a loopback address whose port is free right now.
//
// The port is below Linux's ephemeral range (32768 and up by default): a
// port the kernel handed out would be free again once closed, and the
// relays started before the one that binds it could take it as the
// source port of their probes.
func freeLoopback(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+mathrand.IntN(12000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		return addr
	}
	t.Fatal("no free loopback port in 20000-31999")
	return ""
}

// measurementsOf reads a relay's /v1/measurements in scope.
func measurementsOf(t *testing.T, s *Server, scope string) registry.Measurements {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr() + "/v1/measurements?scope=" + scope)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m registry.Measurements
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("/v1/measurements?scope=%s: %v\n%s", scope, err, body)
	}
	return m
}

// Relays in probe mode coordinates on a fleet file, on loopback: three of
// them, one relay in mode mesh (mixed fleets work) and a peer that is only
// a TCP listener (no admin API: it is probed, and publishes nothing).
// Each relay in mode coordinates probes within its budget, publishes its
// pairs and coordinate through the registry, and serves them at
// /v1/measurements: its own in scope=local, every relay's in scope=fleet.
func TestCoordinatesModeOnAFleet(t *testing.T) {
	bare := acceptingListener(t)
	names := []string{"a", "b", "c", "mesh"}
	admins := map[string]string{}
	var fleet strings.Builder
	fleet.WriteString("relays:\n")
	for _, n := range names {
		admins[n] = freeLoopback(t)
		fmt.Fprintf(&fleet, "  - {name: %s, admin: %s}\n", n, admins[n])
	}
	fmt.Fprintf(&fleet, "  - {name: bare, admin: %s}\n", bare.Addr())
	fleetPath := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(fleetPath, []byte(fleet.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	const perMinute = 3000 // one probe every 20 ms
	start := time.Now()
	relays := map[string]*Server{}
	for _, n := range names {
		cfg := Defaults()
		cfg.Name, cfg.SOCKS, cfg.HTTP, cfg.Admin, cfg.Fleet = n, "127.0.0.1:0", "", admins[n], fleetPath
		cfg.Policy.RelayAllow = []string{"127.0.0.0/8"} // the fleet is on loopback: its probes pass the relay policy
		cfg.Probe.PullInterval = 100 * time.Millisecond
		cfg.Probe.Timeout = time.Second
		if n == "mesh" {
			cfg.Probe.Interval = 100 * time.Millisecond
		} else {
			cfg.Probe.Mode, cfg.Probe.PerMinute = ProbeCoordinates, perMinute
		}
		relays[n] = startServer(t, cfg)
	}

	// Every relay in mode coordinates has measured every peer (the probe
	// set, 12 nearest + 1 random, holds the whole fleet of 4 peers), knows
	// the coordinates of the three, and its own moved with their answers.
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range names[:3] {
		for {
			local := measurementsOf(t, relays[n], "local")
			fleet := measurementsOf(t, relays[n], "fleet")
			answered := 0
			for _, p := range local.Pairs {
				if p.From == n && p.Samples >= 2 && p.Answering() && p.RTTMs > 0 && p.RTTMs < 50 {
					answered++
				}
			}
			known := map[string]bool{}
			for _, c := range fleet.Coordinates {
				known[c.Relay] = true
			}
			moved := counterSum(t, relays[n].metrics, "relaymesh_coordinate_updates_total") > 0
			if answered == 4 && len(local.Coordinates) == 1 && known["a"] && known["b"] && known["c"] && moved {
				if c := local.Coordinates[0]; c.Relay != n || len(c.Coord.Vec) != 8 || c.AgeS < 0 || c.AgeS > 1 {
					t.Fatalf("%s's own coordinate: %+v", n, c)
				}
				if known["mesh"] || known["bare"] {
					t.Fatalf("%s knows coordinates of relays that publish none: %+v", n, fleet.Coordinates)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of 4 peers measured, coordinates %+v in its own scope and %+v in the fleet's, moved: %v",
					n, answered, local.Coordinates, fleet.Coordinates, moved)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The mesh relay serves no coordinate of its own, and still relays
	// the others' it pulled.
	if m := measurementsOf(t, relays["mesh"], "local"); len(m.Coordinates) != 0 || len(m.Pairs) == 0 {
		t.Errorf("mesh relay's own: %+v, want pairs and no coordinate", m)
	}

	for _, n := range names[:3] {
		s := relays[n]
		// Published through the registry: its own pairs and coordinate.
		rc := s.measure.reg.(registry.Coordinates)
		cs, _ := rc.Coordinates(context.Background())
		own := false
		for _, c := range cs {
			own = own || c.Relay == n
		}
		pairs, _ := s.measure.reg.Pairs(context.Background())
		mine := 0
		for _, p := range pairs {
			if p.From == n {
				mine++
			}
		}
		if !own || mine != 4 {
			t.Errorf("%s published its coordinate: %v, and %d of its 4 pairs", n, own, mine)
		}
		if size := gaugeValue(t, s.metrics, "relaymesh_probe_set_size"); size != 4 {
			t.Errorf("%s: relaymesh_probe_set_size %v, want the 4 peers", n, size)
		}
		// Within budget: one probe at start, then one an interval at most.
		probes := counterSum(t, s.metrics, "relaymesh_probes_total")
		if most := float64(time.Since(start)/(time.Minute/perMinute)) + 1; probes > most {
			t.Errorf("%s: %v probes in %v, more than the budget's %v", n, probes, time.Since(start), most)
		}
	}
}
