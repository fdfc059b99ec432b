package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/udpask"
)

// The red-team tests of the relay policy and of probe asks over UDP. Every
// address a policy must refuse here is on loopback (127.0.0.2, or
// 127.0.0.1 for a relay not told to reach it), so a policy bug reaches a
// canary of the test's own, never another host.

const policyToken = "e2e-policy-token-0123456789"

// policyRelay is one relay of a fleet file: its name and addresses.
type policyRelay struct {
	name, admin, relay string
}

// writePolicyFleet writes a fleet file listing relays, with their relay
// listeners (what plans chain through).
func writePolicyFleet(t *testing.T, path string, relays []policyRelay) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin_token: %s\nrelays:\n", policyToken)
	for _, r := range relays {
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %q, relay: %q}\n", r.name, r.name, r.admin, r.relay)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRedTeamRegistryAddrs: a registry entry (a Consul writer's, an edited
// fleet file) cannot make a relay connect to an address its relay policy
// refuses, and so learn from the measurements the relay publishes which
// internal ports answer. The relays' own fleet is on 127.0.0.1
// (--relay-allow 127.0.0.1/32); the planted relay "victim" names two
// canaries on 127.0.0.2, refused. Each prober, the survey and a chain's
// cold first hop is tried on its own; they used to dial unchecked.
func TestRedTeamRegistryAddrs(t *testing.T) {
	secretFile := writeSecret(t, fleetSecret)
	// victim is the planted entry: every address a canary on 127.0.0.2.
	// seen counts the connections a policy had to refuse: at the admin
	// address those closed before a byte (a probe's timed handshake), at
	// the relay address any. The admin API client's connections (fleet
	// pulls, the survey's reads: a TLS ClientHello at once) are counted
	// apart, by talkers, for the admin client's own test.
	var talkers func() int
	plant := func(t *testing.T) (policyRelay, func() int) {
		var probes, talkersSeen atomicCounter
		admin := startServerAt(t, "127.0.0.2:0", func(c net.Conn) {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, _ := c.Read(make([]byte, 1)); n == 0 {
				probes.inc()
			} else {
				talkersSeen.inc()
			}
		})
		relay := startServerAt(t, "127.0.0.2:0", func(net.Conn) {})
		talkers = func() int { return talkersSeen.get() }
		return policyRelay{name: "victim", admin: admin.addr(), relay: relay.addr()},
			func() int { return probes.get() + relay.conn.get() }
	}
	// fleet starts one relay per name in a fleet file that lists them and
	// victim, each with the config body given and --relay-allow
	// 127.0.0.1/32 (b in relayB's).
	var relayB string
	fleet := func(t *testing.T, victim policyRelay, body string, names ...string) []*relayd {
		dir := t.TempDir()
		path := filepath.Join(dir, "fleet.yaml")
		relays := []policyRelay{victim}
		for _, n := range names {
			relays = append(relays, policyRelay{name: n, admin: freeAddr(t), relay: freeAddr(t)})
		}
		writePolicyFleet(t, path, relays)
		var out []*relayd
		for _, r := range relays[1:] {
			cfg := filepath.Join(dir, r.name+".yaml")
			if err := os.WriteFile(cfg, []byte(body+"fleet: "+path+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			allow := "127.0.0.1/32"
			if r.name == "b" && relayB != "" {
				allow = relayB
			}
			out = append(out, startRelayd(t, "--config", cfg, "--name", r.name, "--admin", r.admin, "--relay-listen", r.relay,
				"--admin-token", policyToken, "--fleet-secret-file", secretFile, "--relay-allow", allow))
		}
		return out
	}
	// refusedInLog waits for r's log to say the relay policy refused a
	// registry address (the probe was made, and stopped at connect), or
	// for a canary to see a connection (it was not).
	refusedInLog := func(t *testing.T, r *relayd, seen func() int, by string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(r.logs(), "refused by the relay policy") {
			if n := seen(); n > 0 {
				t.Fatalf("the planted relay's addresses saw %d connections from the %s", n, by)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no probe of the planted relay in 5 s:\n%s", r.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("mesh prober", func(t *testing.T) {
		victim, seen := plant(t)
		a := fleet(t, victim, "probe: {interval: 200ms, window: 5, timeout: 1s, pull_interval: 300ms}\n", "a")[0]
		refusedInLog(t, a, seen, "mesh prober")
		time.Sleep(500 * time.Millisecond) // more probe intervals
		if n := seen(); n != 0 {
			t.Fatalf("the planted relay's addresses saw %d connections from the mesh prober", n)
		}
	})

	t.Run("admin API client", func(t *testing.T) {
		// Fleet pulls of the planted relay's measurements, every 300 ms.
		victim, _ := plant(t)
		a := fleet(t, victim, "probe: {interval: 200ms, window: 5, timeout: 1s, pull_interval: 300ms}\n", "a")[0]
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(a.logs(), "refused by the relay policy") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // three pull intervals more
		if n := talkers(); n != 0 {
			t.Fatalf("the planted admin address saw %d admin API connections from relay a", n)
		}
	})

	t.Run("coordinate prober", func(t *testing.T) {
		victim, seen := plant(t)
		// 600 a minute: one probe every 100 ms, all of them to victim,
		// the only peer.
		a := fleet(t, victim, "probe: {mode: coordinates, per_minute: 600, timeout: 1s, pull_interval: 300ms}\n", "a")[0]
		refusedInLog(t, a, seen, "coordinate prober")
		time.Sleep(500 * time.Millisecond)
		if n := seen(); n != 0 {
			t.Fatalf("the planted relay's addresses saw %d connections from the coordinate prober", n)
		}
	})

	t.Run("survey", func(t *testing.T) {
		victim, seen := plant(t)
		dst := startServer(t, echo)
		// Relay a plans each destination: its survey times this host's
		// handshakes to every healthy relay. Relay b's operator opened
		// 127.0.0.0/8 to its relay hops: b's probe of victim, at start,
		// answers, and a takes victim for healthy (a fleet file's relay
		// is healthy when a peer's probe of it answered; with Consul, when
		// its check passes, which a Consul writer sets). The destination
		// is on 127.0.0.1, opened to a's clients.
		relayB = "127.0.0.0/8"
		defer func() { relayB = "" }()
		rs := fleet(t, victim, "probe: {interval: 1h, window: 5, timeout: 1s, pull_interval: 300ms}\nrouting: plan\npolicy: {allow: [127.0.0.1/32]}\n", "a", "b")
		// interval 1h: the mesh probers' first round is at start, then
		// none; what connects to victim later is a's survey.
		refusedInLog(t, rs[0], func() int { return 0 }, "")
		time.Sleep(1500 * time.Millisecond) // a pulls b's pairs: victim answered b
		before := seen()
		if before == 0 {
			t.Fatal("relay b's probe of victim did not connect: victim is not healthy, and no survey would time it")
		}
		port := dst.ln.Addr().(*net.TCPAddr).Port
		if _, err := socksRaw(t, rs[0].socks, connectReq("127.0.0.1", port)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the survey times 3 handshakes to each relay
		if n := seen() - before; n != 0 {
			t.Fatalf("the planted relay's addresses saw %d connections from relay a's survey", n)
		}
	})

	t.Run("cold first hop", func(t *testing.T) {
		canary := startServer(t, func(net.Conn) {})
		port := canary.ln.Addr().(*net.TCPAddr).Port
		dst := startServer(t, echo)
		// A name, checked when dialed (an IP literal is refused at
		// start, TestRedTeamPolicyMigration); no warm pool, so the
		// chain's own dialer connects. A planned chain is built the
		// same way (Server.buildChain).
		entry := startRelayd(t, "--fleet-secret-file", secretFile, "--pool-max-idle", "0", "--allow", "127.0.0.1/32",
			"--next", "relaymesh://localhost:"+strconv.Itoa(port))
		rep, err := socksRaw(t, entry.socks, connectReq("127.0.0.1", dst.ln.Addr().(*net.TCPAddr).Port))
		if err != nil {
			t.Fatal(err)
		}
		if rep == 0x00 {
			t.Fatal("a tunnel through a relay hop on loopback, which no relay_allow opens, was opened")
		}
		if n := canary.conn.get(); n != 0 {
			t.Fatalf("the first hop on loopback saw %d connections (--allow opens destinations, not relay hops)", n)
		}
	})
}

// TestRedTeamRelayAllowNotForClients: policy.relay_allow opens a fleet's
// private range to relay hops only. A relay that reaches its peer on
// 127.0.0.1 through --relay-allow links to it (a route header's next hop),
// while its clients, and a route header's destination, are refused there.
// A fleet on a private network used to open that network to every client
// (one list for both).
func TestRedTeamRelayAllowNotForClients(t *testing.T) {
	secretFile := writeSecret(t, fleetSecret)
	dst := startServer(t, echo)
	dstPort := dst.ln.Addr().(*net.TCPAddr).Port
	// b, the next relay, lets its own clients reach dst.
	bRelay := freeAddr(t)
	startRelayd(t, "--relay-listen", bRelay, "--fleet-secret-file", secretFile, "--allow", "127.0.0.1/32")
	aRelay := freeAddr(t)
	a := startRelayd(t, "--relay-listen", aRelay, "--fleet-secret-file", secretFile, "--relay-allow", "127.0.0.0/8")

	// A route header through a to b, for dst: a links to b. dst by name:
	// a middle relay refuses an IP literal its own destination policy
	// denies before any hop; the name is resolved and checked by b.
	req, err := route.NewRequest([]string{bRelay}, "localhost:"+strconv.Itoa(dstPort), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := rawRelay(t, aRelay, false, []byte(fleetSecret), req, nil)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce)
	if err != nil || resp.Status != route.StatusOK {
		t.Fatalf("a relay hop in --relay-allow: status %+v, %v; want OK", resp, err)
	}
	c.Close()
	// The destination counts that connection in its own goroutine, maybe
	// after the status came back: wait for it before counting others.
	for deadline := time.Now().Add(2 * time.Second); dst.conn.get() < 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	before := dst.conn.get()

	// a's clients: refused at dst, with --relay-allow 127.0.0.0/8.
	if rep, err := socksRaw(t, a.socks, connectReq("127.0.0.1", dstPort)); err != nil || rep != 0x02 {
		t.Errorf("SOCKS5 CONNECT 127.0.0.1 at a relay with only --relay-allow 127.0.0.0/8: reply 0x%02x (%v), want 0x02 (not allowed)", rep, err)
	}
	if code := httpConnect(t, a.http, dst.addr()); code != 403 {
		t.Errorf("HTTP CONNECT 127.0.0.1 at a relay with only --relay-allow: status %d, want 403", code)
	}
	// A route header whose destination is dst, a the last relay: the
	// destination policy, not the relay policy.
	req, err = route.NewRequest(nil, dst.addr(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c = rawRelay(t, aRelay, false, []byte(fleetSecret), req, nil)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if resp, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce); err != nil || resp.Status != route.StatusDenied {
		t.Errorf("a route header's destination in --relay-allow only: status %+v, %v; want denied", resp, err)
	}
	if n := dst.conn.get() - before; n != 0 {
		t.Fatalf("the destination saw %d connections from a's clients", n)
	}
}

// TestRedTeamPolicyMigration: a config written before relay hops had a
// list of their own (the fleet's range in policy.allow) fails at start,
// saying what to change, rather than run with every link and probe
// refused, or with the fleet's network open to clients.
func TestRedTeamPolicyMigration(t *testing.T) {
	secretFile := writeSecret(t, fleetSecret)
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	writePolicyFleet(t, path, []policyRelay{{name: "a", admin: freeAddr(t), relay: freeAddr(t)}, {name: "b", admin: freeAddr(t), relay: freeAddr(t)}})
	peer := freeAddr(t)
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"fleet file", []string{"--fleet", path, "--name", "a", "--admin-token", policyToken, "--allow", "127.0.0.1/32"},
			[]string{"relay b's admin address", "policy.allow (127.0.0.1/32) opens it to clients' destinations only", "--relay-allow 127.0.0.1/32"}},
		{"next hop", []string{"--allow", "127.0.0.0/8", "--next", "relaymesh://" + peer},
			[]string{"next[0] " + peer, "policy.allow (127.0.0.0/8)", "--relay-allow 127.0.0.0/8"}},
		{"next hop, no list", []string{"--next", "relaymesh://" + peer},
			[]string{"next[0] " + peer, "loopback", "policy.relay_allow"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run", "--socks", "127.0.0.1:0", "--http", "", "--admin", "127.0.0.1:0", "--fleet-secret-file", secretFile}, c.args...)
			cmd := exec.Command(relaydBin, args...)
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("relayd started:\n%s", out)
			}
			if err == nil {
				t.Fatalf("relayd exited 0:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the refusal does not say %q:\n%s", w, out)
				}
			}
		})
	}
	// Moved to --relay-allow, the same fleet starts.
	startRelayd(t, "--fleet", path, "--name", "a", "--admin-token", policyToken, "--fleet-secret-file", secretFile, "--relay-allow", "127.0.0.1/32")
}

// TestRedTeamUDPAskBoundToItsRelay: one probe ask over UDP, captured on
// its way to relay a, is answered by a and by no other relay of the fleet
// (each keeps its own nonces: an ask used to be answered once by every
// relay). What a sends back, an acknowledgement and a reply, is no larger
// than the ask, counting the headers of the second datagram.
func TestRedTeamUDPAskBoundToItsRelay(t *testing.T) {
	secretFile := writeSecret(t, fleetSecret)
	var relays []*relayd
	for _, n := range []string{"a", "b"} {
		relays = append(relays, startRelayd(t, "--name", n, "--fleet-secret-file", secretFile, "--admin-token", policyToken))
	}
	key, err := udpask.DeriveKey(fleetSecret, policyToken)
	if err != nil {
		t.Fatal(err)
	}
	target := startServer(t, func(net.Conn) {})
	ask, err := key.SealAsk(udpask.Ask{Relay: "a", Nonce: udpask.Nonce{0x5e, 0xed}, At: time.Now(), Handshakes: 1, TimeoutMs: 1000,
		Flags: udpask.FlagInfo, Targets: []string{target.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answers := func(r *relayd) []int {
		to, err := net.ResolveUDPAddr("udp", r.admin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDP(ask, to); err != nil {
			t.Fatal(err)
		}
		var sizes []int
		buf := make([]byte, 2*udpask.MaxDatagram)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return sizes
			}
			sizes = append(sizes, n)
		}
	}
	got := answers(relays[0])
	if len(got) != 2 {
		t.Fatalf("relay a: %d datagrams back for an ask for it, want an ack and a reply\n%s", len(got), relays[0].logs())
	}
	if sent := got[0] + got[1] + udpask.DatagramHeaderBytes; sent > len(ask) {
		t.Errorf("relay a sent %d + %d bytes and a datagram's headers (%d) for an ask of %d", got[0], got[1], sent, len(ask))
	}
	if got := answers(relays[1]); len(got) != 0 {
		t.Fatalf("relay b answered an ask for relay a with %d datagrams", len(got))
	}
	if !strings.Contains(relays[1].logs(), `"result":"misdirected"`) {
		t.Errorf("relay b did not log the ask for another relay:\n%s", relays[1].logs())
	}
}

// TestRedTeamProbeTargets: /v1/probe (and a probe ask over UDP, which
// shares its code) times a relay's handshakes to a relay of the registry
// under the relay policy, and to anything else under the destination
// policy. A fleet on a private network so measures its relays with their
// range in --relay-allow only, and the admin token is not a scanner of
// that network: an address no relay is registered at stays refused.
func TestRedTeamProbeTargets(t *testing.T) {
	secretFile := writeSecret(t, fleetSecret)
	peer := startServer(t, func(net.Conn) {})  // relay b's admin port, as far as a can tell
	other := startServer(t, func(net.Conn) {}) // no relay's
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	aAdmin := freeAddr(t)
	writePolicyFleet(t, path, []policyRelay{{name: "a", admin: aAdmin, relay: freeAddr(t)}, {name: "b", admin: peer.addr(), relay: freeAddr(t)}})
	cfg := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(cfg, []byte("probe: {interval: 1h, window: 5, timeout: 1s}\nfleet: "+path+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startRelayd(t, "--config", cfg, "--name", "a", "--admin", aAdmin, "--admin-token", policyToken,
		"--fleet-secret-file", secretFile, "--relay-allow", "127.0.0.1/32")
	probeOf := func(target string) int {
		req, err := http.NewRequest("GET", "http://"+a.admin+"/v1/probe?count=1&target="+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+policyToken)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		t.Logf("/v1/probe?target=%s: %d %s", target, resp.StatusCode, strings.TrimSpace(string(body)))
		return resp.StatusCode
	}
	peerBefore := peer.conn.get()
	code := probeOf(peer.addr())
	// The probe's handshake completes in the kernel; the test server
	// counts the conn when it accepts it, which may come a moment after
	// the probe's answer.
	for deadline := time.Now().Add(2 * time.Second); peer.conn.get() == peerBefore && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if code != http.StatusOK || peer.conn.get() == peerBefore {
		t.Errorf("a probe of relay b's admin address, in --relay-allow: status %d, %d connections; want 200 and one", code, peer.conn.get()-peerBefore)
	}
	if code := probeOf(other.addr()); code != http.StatusForbidden {
		t.Errorf("a probe of a loopback address no relay is registered at: status %d, want 403", code)
	}
	if n := other.conn.get(); n != 0 {
		t.Fatalf("the address no relay is registered at saw %d connections", n)
	}
}
