package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/packettrain"
	"github.com/relaymesh/relaymesh/planner"
)

// capacityFleet is relays a, b, c on loopback with relay listeners,
// probing each other in mesh mode; c runs with --probe-capacity off, and a
// cannot reach destinations on loopback.
type capacityFleet struct {
	path, token        string
	relays             map[string]*relayd
	admins, relayAddrs map[string]string
}

// fleetFrom writes a fleet file for relayctl in which the relays named in
// hidden have a silent admin address (silentAddr): this host cannot reach
// them, their peers can. Loopback's RTTs are all alike: a plan leans on a
// segment between two relays only where the client cannot reach the
// second and the first cannot reach the destination.
func (f *capacityFleet) fleetFrom(t *testing.T, hidden ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin_token: %s\nrelays:\n", f.token)
	for _, n := range []string{"a", "b", "c"} {
		admin := f.admins[n]
		if slices.Contains(hidden, n) {
			admin = silentAddr(t)
		}
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %s, relay: %s}\n", n, n, admin, f.relayAddrs[n])
	}
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// silentAddr is a loopback address whose SYNs go unanswered: a listener
// with a backlog of 0 whose one queued connection is never accepted. A
// connect to it times out, as to a host behind a firewall that drops.
func silentAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
				return addr // the queue is full: SYNs are dropped
			}
			t.Fatalf("filling the accept queue of %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

func startCapacityFleet(t *testing.T) *capacityFleet {
	t.Helper()
	dir := t.TempDir()
	f := &capacityFleet{path: filepath.Join(dir, "fleet.yaml"), token: "e2e-token-0123456789",
		relays: map[string]*relayd{}, admins: map[string]string{}, relayAddrs: map[string]string{}}
	names := []string{"a", "b", "c"}
	admins := f.admins
	var b strings.Builder
	fmt.Fprintf(&b, "admin_token: %s\nrelays:\n", f.token)
	for _, n := range names {
		admins[n], f.relayAddrs[n] = freeAddr(t), freeAddr(t)
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %s, relay: %s}\n", n, n, admins[n], f.relayAddrs[n])
	}
	if err := os.WriteFile(f.path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := fleetSecretFile(t)
	for _, n := range names {
		cfg := filepath.Join(dir, n+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", f.path)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config", cfg, "--name", n, "--admin", admins[n], "--admin-token", f.token,
			"--relay-listen", f.relayAddrs[n], "--fleet-secret-file", secret}
		if n == "a" {
			// a reaches the relays but no destination on loopback: a
			// plan to one goes through a only with a relay after it,
			// and leans on a relay-to-relay segment (loopback's RTTs
			// are all alike, and would give no chain of two relays).
			args = append(args, "--relay-allow", "127.0.0.1/32")
		} else {
			args = append(args, "--allow-private")
		}
		if n == "c" {
			args = append(args, "--probe-capacity", "off")
		}
		f.relays[n] = startRelayd(t, args...)
	}
	waitRTT(t, f.path, func(m rttOut) bool { return len(m.Pairs) == 6 })
	return f
}

// capacityPlan is what the test reads of relayctl plan -o json.
type capacityPlan struct {
	Chain        []string          `json:"chain"`
	Segments     []planner.Segment `json:"segments"`
	Alternatives []planner.Plan    `json:"alternatives"`
	Notes        []string          `json:"notes"`
}

// relaySegment is the segment between the two relays of the plan through
// two relays (the best or an alternative), if planned.
func (p capacityPlan) relaySegment() (planner.Segment, bool) {
	plans := append([]planner.Plan{{Chain: p.Chain, Segments: p.Segments}}, p.Alternatives...)
	for _, pl := range plans {
		if len(pl.Chain) == 2 {
			return pl.Segments[1], true
		}
	}
	return planner.Segment{}, false
}

// TestCapacityProbe: a plan leaning on a relay segment whose capacity is
// unknown has the sending relay measure it, and plans again on the probed
// figure, which the relay then publishes with its pairs; --probe-capacity
// false keeps the bound.
func TestCapacityProbe(t *testing.T) {
	f := startCapacityFleet(t)
	dst := startServer(t, echo).addr()
	fleet := f.fleetFrom(t, "b")
	plan := func(extra ...string) capacityPlan {
		var p capacityPlan
		relayctlJSON(t, &p, append([]string{"plan", "--fleet", fleet, "--dst", dst, "--include", "a,b", "--max-hops", "2",
			"--bench-history", "", "--output", "json"}, extra...)...)
		return p
	}

	bound := plan("--probe-capacity=false")
	seg, ok := bound.relaySegment()
	if !ok || !slices.Contains(seg.Unknown, planner.UnknownCapacity) || seg.LearntBps != 0 {
		out, _ := relayctlCmd(t, "plan", "--fleet", fleet, "--dst", dst, "--include", "a,b", "--max-hops", "2", "--bench-history", "", "--probe-capacity=false").CombinedOutput()
		t.Fatalf("without the probe: %+v (planned %v); want a relay segment of unknown capacity\n%s", seg, ok, out)
	}

	probed := plan()
	seg, ok = probed.relaySegment()
	if !ok {
		t.Fatalf("no plan through two relays: %+v", probed)
	}
	// A download: the relay on the destination's side sends.
	if slices.Contains(seg.Unknown, planner.UnknownCapacity) || seg.LearntSource != planner.LearntFromProbe || !(seg.LearntBps > 0) || seg.Sender != seg.To {
		t.Fatalf("%s→%s after the probe: unknown %q, learnt %v bits/s from %q by %s; want %s's probed figure\nnotes: %q",
			seg.From, seg.To, seg.Unknown, seg.LearntBps, seg.LearntSource, seg.Sender, seg.To, probed.Notes)
	}
	if !slices.ContainsFunc(probed.Notes, func(n string) bool {
		return strings.Contains(n, "planned again after the relays' capacity probes measured 1 of the 1")
	}) {
		t.Errorf("notes %q do not say the plan was made again", probed.Notes)
	}
	t.Logf("%s→%s probed on loopback: %.3g bits/s", seg.Sender, seg.Receiver, seg.LearntBps)

	// The sender keeps it and publishes it with its pair to the receiver.
	var meas struct {
		Pairs []measuredPair
	}
	if err := json.Unmarshal([]byte(adminGet(t, f.relays[seg.Sender], "/v1/measurements", f.token)), &meas); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(meas.Pairs, func(p measuredPair) bool { return p.To == seg.Receiver })
	if i < 0 || meas.Pairs[i].SendSource != "probe" || meas.Pairs[i].SendBps != seg.LearntBps {
		t.Errorf("%s's published pairs %+v; want its pair to %s at %v bits/s from the probe", seg.Sender, meas.Pairs, seg.Receiver, seg.LearntBps)
	}
	// Asked again within the hour: the kept figure, no new trains.
	before := metricSum(adminGet(t, f.relays[seg.Receiver], "/metrics", f.token), "relaymesh_capacity_datagrams_total")
	again := plan()
	if s, _ := again.relaySegment(); s.LearntSource != planner.LearntFromProbe || s.LearntBps != seg.LearntBps {
		t.Errorf("a second plan: %s→%s learnt %v from %q, want the kept %v", s.From, s.To, s.LearntBps, s.LearntSource, seg.LearntBps)
	}
	if after := metricSum(adminGet(t, f.relays[seg.Receiver], "/metrics", f.token), "relaymesh_capacity_datagrams_total"); after != before {
		t.Errorf("%s received %v more train datagrams for a kept figure", seg.Receiver, after-before)
	}
}

// measuredPair is what the test reads of a pair in /v1/measurements.
type measuredPair struct {
	From, To   string
	SendBps    float64 `json:"send_bps"`
	SendSource string  `json:"send_source"`
}

// TestCapacityProbeOff: a relay with probe.capacity off neither sends
// trains nor lets a peer measure towards it, and has no UDP port for them.
func TestCapacityProbeOff(t *testing.T) {
	f := startCapacityFleet(t)
	var p capacityPlan
	dst := startServer(t, echo).addr()
	relayctlJSON(t, &p, "plan", "--fleet", f.fleetFrom(t, "c"), "--dst", dst, "--include", "a,c", "--max-hops", "2", "--bench-history", "", "--output", "json")
	seg, ok := p.relaySegment()
	if !ok || seg.From != "a" || seg.To != "c" || !slices.Contains(seg.Unknown, planner.UnknownCapacity) || seg.LearntBps != 0 {
		t.Errorf("%s→%s %+v (planned %v): want a→c's capacity still unknown", seg.From, seg.To, seg, ok)
	}
	// A download: c, the sender, is asked, and refuses.
	if !slices.ContainsFunc(p.Notes, func(n string) bool {
		return strings.Contains(n, "capacity c→a not probed") && strings.Contains(n, "probe.capacity is off")
	}) {
		t.Errorf("notes %q do not say why c→a was not probed", p.Notes)
	}
	// c asked directly: refused; a asked to measure towards c: c refuses
	// to expect its trains, and a sends none.
	for _, path := range []string{"/v1/capacity?to=a", "/v1/capacity/expect?from=a"} {
		if code, body := adminRequest(t, f.relays["c"], path, f.token); code != http.StatusForbidden || !strings.Contains(body, "probe.capacity is off") {
			t.Errorf("c %s: %d %s; want 403, probe.capacity is off", path, code, body)
		}
	}
	var ans packettrain.Answer
	if err := json.Unmarshal([]byte(adminGet(t, f.relays["a"], "/v1/capacity?to=c", f.token)), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.SendBps != 0 || !strings.Contains(ans.Error, "probe.capacity is off") {
		t.Errorf("a's capacity to c: %+v; want c's refusal", ans)
	}
	page := adminGet(t, f.relays["c"], "/metrics", f.token)
	if n := metricSum(page, "relaymesh_capacity_datagrams_total") + metricSum(page, "relaymesh_capacity_probes_total"); n != 0 {
		t.Errorf("c counted %v capacity datagrams and probes", n)
	}
	// Nothing listens on c's relay port over UDP: the kernel refuses.
	if err := udpAnswer(t, f.relayAddrs["c"], packettrain.Datagram{Nonce: packettrain.NewNonce()}.Marshal(nil)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a datagram to c's relay port: %v; want connection refused (no socket)", err)
	}
}

// TestCapacityProbeStranger: datagrams without a nonce the relay issued
// are counted and ignored, never answered; the admin endpoints need the
// token, and arrivals of a nonce never issued are refused.
func TestCapacityProbeStranger(t *testing.T) {
	f := startCapacityFleet(t)
	a := f.relays["a"]
	for _, b := range [][]byte{
		packettrain.Datagram{Nonce: packettrain.NewNonce(), Seq: 1}.Marshal(nil), // a guessed nonce
		[]byte("GET / HTTP/1.0\r\n\r\n"),                                         // not a train
	} {
		if err := udpAnswer(t, f.relayAddrs["a"], b); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a stranger's datagram to a's relay port: %v; want no answer (a timeout)", err)
		}
	}
	page := adminGet(t, a, "/metrics", f.token)
	if got := sampleValue(page, `relaymesh_capacity_datagrams_total{result="unexpected"}`); got != 1 {
		t.Errorf("unexpected datagrams counted: %v, want 1", got)
	}
	if got := sampleValue(page, `relaymesh_capacity_datagrams_total{result="bad"}`); got != 1 {
		t.Errorf("bad datagrams counted: %v, want 1", got)
	}
	if got := sampleValue(page, `relaymesh_capacity_datagrams_total{result="counted"}`); got != 0 {
		t.Errorf("a stranger's datagrams counted: %v", got)
	}
	for _, path := range []string{"/v1/capacity?to=b", "/v1/capacity/expect?from=x", "/v1/capacity/arrivals?nonce=" + packettrain.NewNonce().String()} {
		if code, _ := adminRequest(t, a, path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
	}
	if code, body := adminRequest(t, a, "/v1/capacity/arrivals?nonce="+packettrain.NewNonce().String(), f.token); code != http.StatusNotFound {
		t.Errorf("arrivals of a nonce never issued: %d %s, want 404", code, body)
	}
}

// udpAnswer sends b to addr from a connected UDP socket and waits 300 ms
// for anything back: the read's error (a timeout when nothing came, or
// connection refused when the kernel answered that no socket listens).
func udpAnswer(t *testing.T, addr string, b []byte) error {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 2048))
	return err
}

// sampleValue is the value of the sample named exactly (labels included)
// in a /metrics page; 0 when absent.
func sampleValue(page, sample string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// TestCapacityProbeIdentities: relays on identities from an operator CA
// share no secret and no token; one measures its sends to another all the
// same, calling the peer's admin API with its certificate.
func TestCapacityProbeIdentities(t *testing.T) {
	ca := newOpCA(t)
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	names := []string{"a", "b"}
	admins, relayAddrs := map[string]string{}, map[string]string{}
	var b strings.Builder
	b.WriteString("relays:\n") // no admin_token: every relay has its own
	for _, n := range names {
		admins[n], relayAddrs[n] = freeAddr(t), freeAddr(t)
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %s, relay: %s}\n", n, n, admins[n], relayAddrs[n])
	}
	if err := os.WriteFile(fleetPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	relays := map[string]*relayd{}
	for _, n := range names {
		cfg := filepath.Join(dir, n+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", fleetPath)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--config", cfg, "--name", n, "--admin", admins[n], "--admin-token", "own-token-of-" + n + "-0123456789",
			"--allow-private", "--relay-listen", relayAddrs[n]}, ca.issue(n, "relay")...)
		relays[n] = startRelayd(t, args...)
	}
	var ans packettrain.Answer
	if err := json.Unmarshal([]byte(adminGet(t, relays["a"], "/v1/capacity?to=b", "own-token-of-a-0123456789")), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Error != "" || !(ans.SendBps > 0) || ans.From != "a" || ans.To != "b" {
		t.Fatalf("a's capacity to b on identities: %+v\n%s", ans, relays["b"].logs())
	}
	page := adminGet(t, relays["b"], "/metrics", "own-token-of-b-0123456789")
	if got := sampleValue(page, `relaymesh_capacity_datagrams_total{result="counted"}`); got < float64(packettrain.PacketsPerTrain) {
		t.Errorf("b counted %v datagrams of a's trains", got)
	}
	// a's token opens a alone: b refuses it a nonce.
	if code, _ := adminRequest(t, relays["b"], "/v1/capacity/expect?from=a", "own-token-of-a-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("b's expect with a's token: %d, want 401", code)
	}
}
