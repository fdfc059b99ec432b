package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry/consultest"

	"golang.org/x/net/proxy"
)

// The full-length outage is 30 s:
// go test ./e2e -run Consul -consul-outage 30s (or RELAYMESH_CONSUL_OUTAGE=30s).
var consulOutage = flag.Duration("consul-outage", envDuration("RELAYMESH_CONSUL_OUTAGE", 5*time.Second),
	"how long TestConsulFleet keeps the Consul agent down")

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

type nodesOut struct {
	Relays []struct {
		Name, Region, Health, Admin string
		Healthy                     bool
	}
}

// metricValue reads one unlabelled metric from a relay's /metrics.
func metricValue(t *testing.T, r *relayd, name string) float64 {
	t.Helper()
	for _, line := range metricLines(t, r) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, line)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// metricReaches waits up to 5 s for a counter on r to reach want, for
// events the relay counts after the test's side of the exchange has already
// ended (a TLS client that gives up on the server's certificate returns
// before the server has seen the failed handshake). It fails at once if
// the counter passes want: more events than the test caused is a bug, not
// a delay.
func metricReaches(t *testing.T, r *relayd, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := metricValue(t, r, name)
		switch {
		case v == want:
			return
		case v > want:
			t.Fatalf("%s = %v, want %v", name, v, want)
		case time.Now().After(deadline):
			t.Fatalf("%s = %v after 5 s, want %v", name, v, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metricLines is r's /metrics, line by line.
func metricLines(t *testing.T, r *relayd) []string {
	t.Helper()
	resp, err := http.Get("http://" + r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Split(string(body), "\n")
}

// echoThrough does one SOCKS5 CONNECT through the relay to the echo server
// and checks the bytes come back.
func echoThrough(r *relayd, dst string, msg []byte) error {
	d, err := proxy.SOCKS5("tcp", r.socks, nil, &net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	conn, err := d.Dial("tcp", dst)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo came back different")
	}
	return nil
}

// TestConsulFleet: three relays with --consul register, probe each other
// and share the matrix through Consul KV; relayctl reads it from Consul.
// The agent then crashes: the relays keep relaying, report the registry
// stale, and once the agent is back (empty: -dev keeps nothing) they
// re-register and rewrite their measurements within 10 s.
func TestConsulFleet(t *testing.T) {
	agent := consultest.Start(t, "../bin/consul")
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	relays := map[string]*relayd{}
	for _, n := range names {
		cfg := filepath.Join(dir, n+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nconsul: {addr: %s}\n", agent.HTTP)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		relays[n] = startRelayd(t, "--config", cfg, "--name", n, "--region", "reg-"+n, "--allow-private")
	}
	rtt := func() rttOut {
		var m rttOut
		relayctlJSON(t, &m, "rtt", "--consul", agent.HTTP, "-o", "json")
		return m
	}
	nodes := func() nodesOut {
		var n nodesOut
		relayctlJSON(t, &n, "nodes", "--consul", agent.HTTP, "-o", "json")
		return n
	}
	// measured: every one of the 6 pairs probed, answering, and (when
	// maxAge > 0) probed less than maxAge seconds ago.
	measured := func(m rttOut, maxAge float64) bool {
		ok := 0
		for _, p := range m.Pairs {
			if !p.Estimated && p.Loss == 0 && p.Samples >= 3 && p.RTTMs > 0 && p.RTTMs < 50 && (maxAge <= 0 || p.AgeS < maxAge) {
				ok++
			}
		}
		return ok == 6
	}
	healthy := func(n nodesOut) bool {
		ok := 0
		for _, r := range n.Relays {
			if rd := relays[r.Name]; rd != nil && r.Healthy && r.Health == "consul" && r.Region == "reg-"+r.Name && r.Admin == rd.admin {
				ok++
			}
		}
		return ok == 3 && len(n.Relays) == 3
	}
	poll := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s\nrtt: %+v\nnodes: %+v", what, d, rtt(), nodes())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	poll(15*time.Second, "6 measured pairs", func() bool { return measured(rtt(), 0) })
	poll(10*time.Second, "3 healthy relays", func() bool { return healthy(nodes()) })
	for _, n := range names {
		if v := metricValue(t, relays[n], "relaymesh_registry_stale"); v != 0 {
			t.Fatalf("%s: relaymesh_registry_stale %v with consul up", n, v)
		}
	}

	// The agent crashes for the outage. The relays keep relaying
	// (checked every 500 ms through each), and report the registry stale.
	target := startServer(t, echo)
	agent.Kill()
	down := time.Now()
	for i := 0; time.Since(down) < *consulOutage; i++ {
		for _, n := range names {
			if err := echoThrough(relays[n], target.addr(), []byte(fmt.Sprintf("hello %s %d", n, i))); err != nil {
				t.Fatalf("%s after %s of consul outage: %v\n%s", n, time.Since(down), err, relays[n].logs())
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, n := range names {
		if v := metricValue(t, relays[n], "relaymesh_registry_stale"); v != 1 {
			t.Errorf("%s: relaymesh_registry_stale %v %s into the outage", n, v, *consulOutage)
		}
		if age := metricValue(t, relays[n], "relaymesh_registry_age_seconds"); age < consulOutage.Seconds()-6 {
			t.Errorf("%s: relaymesh_registry_age_seconds %v %s into the outage", n, age, *consulOutage)
		}
		if c := strings.Count(relays[n].logs(), "consul unreachable"); c != 1 {
			t.Errorf("%s: the outage was logged %d times, want once\n%s", n, c, relays[n].logs())
		}
	}

	// Back, empty. Within 10 s every relay is registered again, healthy,
	// and its measurements are in KV again: relayctl reads only Consul, and
	// this agent kept nothing, so every pair it shows was written after the
	// restart.
	agent.Restart(t)
	back := time.Now()
	poll(10*time.Second, "catch-up after the restart", func() bool {
		return healthy(nodes()) && measured(rtt(), 10)
	})
	t.Logf("caught up %s after the agent answered again", time.Since(back).Round(100*time.Millisecond))
	poll(10*time.Second-time.Since(back), "relaymesh_registry_stale back to 0", func() bool {
		for _, n := range names {
			if metricValue(t, relays[n], "relaymesh_registry_stale") != 0 {
				return false
			}
		}
		return true
	})

	// A relay that stops deregisters at once.
	relays["c"].stop(t)
	poll(5*time.Second, "c deregistered", func() bool { return len(nodes().Relays) == 2 })
}
