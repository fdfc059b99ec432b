package e2e

// The red-team file: attacks on a public relay, each run against real relayd
// processes with real clients. Every test here failed before the fix it
// names (docs/security.md lists the findings).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
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
	r := startRelayd(t, "--next", "http://"+next.addr(), "--relay-allow", "127.0.0.1/32") // the next hop is on loopback
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
	relays := startPlanFleet(t)
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

// startPlanFleet starts relays a and b routing by plan on a fleet file,
// measuring each other: relay hops and their probes reach 127.0.0.1
// (--relay-allow), clients' destinations there stay denied.
func startPlanFleet(t *testing.T) []*fleetRelay {
	t.Helper()
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
		fr.r = startRelayd(t, "--config", cfg, "--name", fr.name, "--admin", fr.admin, "--admin-token", token,
			"--relay-listen", freeAddr(t), "--fleet-secret-file", secretFile, "--relay-allow", "127.0.0.1/32")
	}
	waitRTT(t, fleetPath, func(m rttOut) bool { return len(m.Pairs) >= 2 })
	return relays
}

// TestRedTeamPlantedAdmin: a registry entry whose admin address is not a
// relay of the fleet (a Consul writer's planted registration, an edited
// fleet file) never receives the fleet admin token. Relays and relayctl
// used to send it there in every pull, in clear text; now they speak
// HTTPS and send a request only after the server proved a certificate
// from the fleet CA. Both kinds of impostor are tried: plain HTTP, and
// HTTPS with a certificate of its own.
func TestRedTeamPlantedAdmin(t *testing.T) {
	for _, kind := range []string{"http", "https"} {
		t.Run(kind, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("Authorization"))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"pairs":[]}`)
			})
			impostor := httptest.NewUnstartedServer(h)
			impostor.Config.ErrorLog = log.New(io.Discard, "", 0) // the relays' refused handshakes
			if kind == "https" {
				impostor.StartTLS()
			} else {
				impostor.Start()
			}
			defer impostor.Close()
			dir := t.TempDir()
			fleetPath := filepath.Join(dir, "fleet.yaml")
			const token = "e2e-token-0123456789"
			a := &fleetRelay{name: "a", admin: freeAddr(t)}
			b := &fleetRelay{name: "b", admin: impostor.Listener.Addr().String()}
			writeFleetFile(t, fleetPath, token, []*fleetRelay{a, b})
			startFleetRelay(t, dir, fleetPath, token, a)
			waitRTT(t, fleetPath, func(m rttOut) bool { return len(m.Pairs) >= 1 }) // a probes b: 1 pair
			time.Sleep(time.Second)                                                 // a pulls every 300 ms
			mu.Lock()
			defer mu.Unlock()
			for _, auth := range seen {
				if auth != "" {
					t.Fatalf("the impostor at b's admin address received %q (%d requests)", auth, len(seen))
				}
			}
		})
	}
}

// TestRedTeamStrangerSlots: strangers knocking on the relay listener take
// neither the clients' slots nor their own for long. They used to share
// max_conns with SOCKS5 and HTTP, and a silent one was kept 60 s: ten of
// them locked every client out of a relay with --max-conns 2.
func TestRedTeamStrangerSlots(t *testing.T) {
	srv := startServer(t, echo)
	relayAddr := freeAddr(t)
	r := startRelayd(t, "--allow-private", "--max-conns", "2", "--max-relay-conns", "4", "--handshake-timeout", "1s",
		"--relay-listen", relayAddr, "--fleet-secret-file", fleetSecretFile(t), "--transport", "tls")
	var strangers []net.Conn
	for range 10 {
		c, err := net.DialTimeout("tcp", relayAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		strangers = append(strangers, c)
	}
	for i := range 2 {
		c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
		if err != nil {
			t.Fatalf("client %d refused while strangers sit on the relay listener: %v", i, err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("k")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	// Every silent stranger is dropped once the handshake deadline (1 s)
	// passed: a read sees the close well within 5 s.
	for i, c := range strangers {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stranger %d still held after 5 s (%v)", i, err)
		}
	}
}

// TestRedTeamAdminSideDoors: the admin API bounds what a token holder can
// take: a transfer asks for at most 16 GiB, at most 8 run at a time. There
// used to be no such bounds (64 GiB per request, any number of transfers).
func TestRedTeamAdminSideDoors(t *testing.T) {
	const token = "e2e-token-0123456789"
	r := startRelayd(t, "--admin-token", token)
	// Each request on a connection of its own: a kept-alive one would
	// already hold one of the 64 places.
	get := func(path string, timeout time.Duration) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return (&http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	}
	resp, err := get("/v1/traffic/bytes/68719476736", 5*time.Second) // 64 GiB
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a 64 GiB transfer: %s, want 400", resp.Status)
	}
	// Eight endless-looking transfers (16 GiB each, read slowly), then a
	// ninth is refused at once.
	var held []*http.Response
	for i := range 8 {
		resp, err := get("/v1/traffic/bytes/17179869184", 0)
		if err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		defer resp.Body.Close()
		held = append(held, resp)
	}
	resp, err = get("/v1/traffic/bytes/1024", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a ninth transfer: %s, want 503", resp.Status)
	}
	for _, h := range held {
		h.Body.Close()
	}
}

// TestRedTeamAdminStrangerLock: a stranger (no token) that keeps 1,100
// connections open to the admin port, each after a GET /healthz, holds
// none of them for long: each is closed within 5 s of going idle, and a
// fleet call made while they are held is served within seconds. The
// listener used to serve 64 connections at once and keep an idle one 2
// minutes: 64 kept-alive /healthz connections locked out the peers'
// pulls, relayctl and the health checks, and the relay dropped out of
// plans. (The per-address cap, which loopback is exempt from, has its own
// test in package relay.)
func TestRedTeamAdminStrangerLock(t *testing.T) {
	const token = "e2e-token-0123456789"
	r := startRelayd(t, "--admin-token", token)
	var strangers []net.Conn
	for i := range 1100 {
		c, err := net.DialTimeout("tcp", r.admin, 5*time.Second)
		if err != nil {
			t.Fatalf("stranger %d: %v", i, err)
		}
		defer c.Close()
		// Written, not waited for: the relay answers the ones it keeps.
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")); err != nil {
			t.Fatalf("stranger %d: %v", i, err)
		}
		strangers = append(strangers, c)
	}
	start := time.Now()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var served time.Duration
	for time.Since(start) < 10*time.Second {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.admin+"/v1/info", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				served = time.Since(start)
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if served == 0 {
		t.Fatal("no fleet call served in 10 s while a stranger held the admin port")
	}
	t.Logf("a fleet call served %v after the stranger's connections were opened", served.Round(time.Millisecond))
	// Every stranger's connection ends: a read sees the close (after the
	// relay's answer, for the ones it admitted) within 8 s.
	deadline := time.Now().Add(8 * time.Second)
	for i, c := range strangers {
		_ = c.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stranger %d's connection still open 8 s on", i)
		}
	}
}
