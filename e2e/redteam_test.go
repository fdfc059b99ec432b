package e2e

// The red-team file: attacks on a public relay, each run against real relayd
// processes with real clients. Every test here failed before the fix it
// names (docs/security.md lists the findings).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/route"
)

// upgradeServer answers every request with 101 Switching Protocols and then
// echoes, as a websocket endpoint does after its handshake.
func upgradeServer(t *testing.T) *server {
	return startServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Upgrade") == "" {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			return
		}
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_, _ = io.Copy(c, br)
	})
}

// TestRedTeamUpgradeSlots: protocol upgrades (websockets) through the HTTP
// front end give their connection slot back when they end. They used to
// keep it for good: a hijacked conn never reaches StateClosed, and after
// max_conns upgrades every new client was refused.
func TestRedTeamUpgradeSlots(t *testing.T) {
	srv := upgradeServer(t)
	r := startRelayd(t, "--allow-private", "--max-conns", "3")
	for i := range 5 {
		c, err := net.DialTimeout("tcp", r.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", srv.addr(), srv.addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("upgrade %d: %v", i, err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade %d: status %d, want 101 (slots leaked by earlier upgrades?)", i, resp.StatusCode)
		}
		c.Close()
	}
	// The relay notices the closes; then a plain request must get a slot.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := curl(t, "-sS", "--max-time", "5", "-x", "http://"+r.http, "http://"+srv.addr()+"/")
		if err == nil && string(out) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 closed upgrades with --max-conns 3, a plain request fails: %v %q\n%s", err, out, r.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(r.logs(), `"rule":"max_conns"`) {
		t.Fatalf("clients refused for max_conns:\n%s", r.logs())
	}
}

// TestRedTeamCRLFDomain: a SOCKS5 domain holding CR/LF is refused, never
// written into an HTTP next hop's CONNECT request (it used to go there
// verbatim: header injection into the next proxy).
func TestRedTeamCRLFDomain(t *testing.T) {
	var mu sync.Mutex
	var got strings.Builder
	next := startServer(t, func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(c, 4096))
		mu.Lock()
		got.Write(b)
		mu.Unlock()
	})
	r := startRelayd(t, "--next", "http://"+next.addr())
	host := "evil.example\r\nX-Injected: yes\r\n"
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = append(req, 0, 80)
	rep, err := socksRaw(t, r.socks, req)
	if err == nil && rep == 0x00 {
		t.Fatal("CONNECT to a domain with CR/LF succeeded")
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(got.String(), "X-Injected") || next.conn.get() != 0 {
		t.Fatalf("the next hop received %d connections and %q", next.conn.get(), got.String())
	}
}

// TestRedTeamDrainNonReader: a client that half-closes and then never reads
// the answer cannot hold the tunnel (and the destination's socket) beyond
// the drain timeout. The copy toward it is stuck writing, where the read
// deadlines of the old copy loop never fired: held forever.
func TestRedTeamDrainNonReader(t *testing.T) {
	writeErr := make(chan error, 1)
	srv := startServer(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // the request, up to the client's half-close
		_, err := c.Write(make([]byte, 512<<20))
		writeErr <- err
	})
	r := startRelayd(t, "--allow-private", "--drain-timeout", "1s")
	c, raw, err := xnetDial(t, r.socks, srv.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("request"))
	_ = raw.CloseWrite() // and never reads
	select {
	case err := <-writeErr:
		if err == nil {
			t.Fatal("the server wrote 512 MiB to a client that reads nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("tunnel to a non-reading, half-closed client still open 20 s after a 1 s drain timeout\n%s", r.logs())
	}
}

// TestRedTeamErrorBodies: an HTTP 502 says what failed and at which hop,
// never the address of a hop behind the relay (the SOCKS5 front end never
// did; the log has the details).
func TestRedTeamErrorBodies(t *testing.T) {
	dead := refusedPort(t)
	hop := "127.0.0.1:" + strconv.Itoa(dead)
	r := startRelayd(t, "--allow-private", "--next", "socks5://"+hop)
	requireCmd(t, "curl")
	out, _ := exec.Command("curl", "-sS", "--max-time", "10", "-x", "http://"+r.http, "http://example.invalid/").Output()
	if strings.Contains(string(out), hop) || strings.Contains(string(out), strconv.Itoa(dead)) {
		t.Fatalf("502 body names the hop behind the relay: %q", out)
	}
	if !strings.Contains(string(out), "at hop 1") {
		t.Fatalf("502 body does not say which hop failed: %q", out)
	}
	if !strings.Contains(r.logs(), hop) {
		t.Fatal("the log lost the failing hop's address")
	}
}

// TestRedTeamHeaderHop: a holder of the fleet secret cannot make a relay
// connect to its own loopback (or any denied range) by naming it as the
// next hop of a route header: the first hop is dialed through the
// destination policy (it used to be dialed unchecked, and pooled).
func TestRedTeamHeaderHop(t *testing.T) {
	canary := startServer(t, func(net.Conn) {})
	secretFile := writeSecret(t, fleetSecret)
	addr := freeAddr(t)
	startRelayd(t, "--relay-listen", addr, "--fleet-secret-file", secretFile, "--transport", "tls") // no --allow-private
	for _, hop := range []string{canary.addr(), "localhost:" + strconv.Itoa(canary.ln.Addr().(*net.TCPAddr).Port)} {
		req, err := route.NewRequest([]string{hop}, "192.0.2.1:80", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := rawRelay(t, addr, false, []byte(fleetSecret), req, nil)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce)
		if err != nil {
			t.Fatalf("hop %s: %v", hop, err)
		}
		if resp.Status == route.StatusOK {
			t.Fatalf("hop %s: the relay connected through a denied first hop", hop)
		}
	}
	if n := canary.conn.get(); n != 0 {
		t.Fatalf("the relay connected to its own loopback %d times for a route header", n)
	}
}

// TestRedTeamPlanSurveyDenied: a relay routing by plan is asked for a
// destination its policy refuses (another loopback address): it answers
// "not allowed" without surveying it, so the destination never sees a
// connection (the survey used to TCP-connect to it first, and the reply
// time told closed, open or filtered).
func TestRedTeamPlanSurveyDenied(t *testing.T) {
	canary := startServerAt(t, "127.0.0.2:0", func(net.Conn) {})
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	const token = "e2e-token-0123456789"
	relays := []*fleetRelay{{name: "a", admin: freeAddr(t)}, {name: "b", admin: freeAddr(t)}}
	writeFleetFile(t, fleetPath, token, relays)
	secretFile := writeSecret(t, fleetSecret)
	for _, fr := range relays {
		cfg := filepath.Join(dir, fr.name+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\nrouting: plan\n", fleetPath)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		// 127.0.0.1 is where the relays are; 127.0.0.2 stays denied.
		fr.r = startRelayd(t, "--config", cfg, "--name", fr.name, "--admin", fr.admin, "--admin-token", token,
			"--relay-listen", freeAddr(t), "--fleet-secret-file", secretFile, "--allow", "127.0.0.1/32")
	}
	waitRTT(t, fleetPath, func(m rttOut) bool { return len(m.Pairs) >= 2 })
	port := canary.ln.Addr().(*net.TCPAddr).Port
	// Only a loopback target here: this test runs on the host, and a
	// policy bug must not send a probe off the machine (TestDenyByDefault
	// covers the other ranges inside a loopback-only namespace).
	rep, err := socksRaw(t, relays[0].r.socks, connectReq("127.0.0.2", port))
	if err != nil {
		t.Fatal(err)
	}
	if rep != 0x02 {
		t.Errorf("CONNECT 127.0.0.2 through a relay routing by plan: reply 0x%02x, want 0x02 (not allowed)", rep)
	}
	time.Sleep(500 * time.Millisecond) // a survey in flight would have connected by now
	if n := canary.conn.get(); n != 0 {
		t.Fatalf("the denied destination saw %d connections from the relay's survey", n)
	}
}
