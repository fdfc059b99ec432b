package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/proxy"

	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// socksRaw runs a SOCKS5 handshake by hand and returns the reply code.
func socksRaw(t testing.TB, proxyAddr string, request []byte) (byte, error) {
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return 0, err
	}
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil {
		return 0, err
	}
	if _, err := c.Write(request); err != nil {
		return 0, err
	}
	var rep [4]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return 0, err
	}
	return rep[1], nil
}

func connectReq(host string, port int) []byte {
	b := []byte{5, 1, 0, 3, byte(len(host))}
	b = append(b, host...)
	return append(b, byte(port>>8), byte(port))
}

// TestDenyByDefault: without --allow-private every dangerous destination is
// refused with SOCKS5 0x02 / HTTP 403, by a relay and by the entry of a
// chain, through SOCKS5, HTTP CONNECT and a route header, and a canary
// listener sees nothing. The relays run in a network namespace with only
// loopback: were the policy wrong, a connection to a private or metadata
// address would fail to route (reply 0x03) instead of leaving the machine.
func TestDenyByDefault(t *testing.T) {
	ns := loopbackOnlyNetns(t)
	wrap := []string{"ip", "netns", "exec", ns}
	var canary *server
	inNetns(t, ns, func() { canary = startServer(t, func(net.Conn) {}) })
	port := canary.ln.Addr().(*net.TCPAddr).Port
	secretFile := writeSecret(t, fleetSecret)
	relayAddr := "127.0.0.1:7000" // the namespace is new: nothing else listens there
	r := startRelaydWrapped(t, wrap, "--relay-listen", relayAddr, "--fleet-secret-file", secretFile)
	// The entry of a chain: literal IPs refused before any hop. Its first
	// hop, r, is on loopback: relay hops reach it through --relay-allow,
	// which opens nothing to clients.
	chained := startRelaydWrapped(t, wrap, "--next", "socks5://"+r.socks, "--relay-allow", "127.0.0.1/32")
	hosts := []string{"127.0.0.1", "localhost", "::1", "0.0.0.0", "169.254.169.254", "10.0.0.1",
		"172.16.0.1", "192.168.1.1", "100.64.0.1", "::ffff:127.0.0.1", "fe80::1", "fc00::1", "127.1.2.3",
		// Through a translator to the ranges above, and a metadata address.
		"64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "2001:0:a9fe::1", "192.0.0.192", "198.18.0.1",
		// Documentation and benchmarking ranges.
		"192.0.2.1", "198.51.100.1", "203.0.113.1", "2001:db8::1"}
	inNetns(t, ns, func() {
		for _, h := range hosts {
			for _, entry := range []*relayd{r, chained} {
				rep, err := socksRaw(t, entry.socks, connectReq(h, port))
				if err != nil {
					t.Fatalf("%s: %v", h, err)
				}
				if rep != 0x02 {
					t.Errorf("SOCKS5 CONNECT %s: reply 0x%02x, want 0x02 (not allowed)", h, rep)
				}
			}
			resp := httpConnect(t, r.http, net.JoinHostPort(h, strconv.Itoa(port)))
			if resp != 403 {
				t.Errorf("HTTP CONNECT %s: status %d, want 403", h, resp)
			}
			// A route header from a fleet member, naming h as its
			// destination: the last relay's policy refuses it.
			req, err := route.NewRequest(nil, net.JoinHostPort(h, strconv.Itoa(port)), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			c := rawRelay(t, relayAddr, false, []byte(fleetSecret), req, nil)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			resp2, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce)
			c.Close()
			if err != nil || resp2.Status != route.StatusDenied {
				t.Errorf("route header to %s: status %+v, %v; want denied", h, resp2, err)
			}
		}
	})
	if n := canary.conn.get(); n != 0 {
		t.Fatalf("canary saw %d connections", n)
	}
	if !strings.Contains(r.logs(), `"rule":"loopback"`) || !strings.Contains(r.logs(), `"rule":"link-local"`) {
		t.Fatalf("denials not logged with their rule:\n%s", r.logs())
	}
	// --allow opens one range, and only that.
	open := startRelaydWrapped(t, wrap, "--allow", "127.0.0.0/8")
	inNetns(t, ns, func() {
		if rep, _ := socksRaw(t, open.socks, connectReq("127.0.0.1", port)); rep != 0x00 {
			t.Fatalf("--allow 127.0.0.0/8: reply 0x%02x, want success", rep)
		}
		if rep, _ := socksRaw(t, open.socks, connectReq("169.254.169.254", port)); rep != 0x02 {
			t.Fatalf("--allow 127.0.0.0/8 opened link-local: reply 0x%02x", rep)
		}
	})
}

// loopbackOnlyNetns makes a network namespace whose only interface is lo
// (up), removed when the test ends. Root only: elsewhere the test is
// skipped, saying why (CI runs as root, so it runs there).
func loopbackOnlyNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Need(t, "needs root: the relays of this test run in a network namespace with only loopback, so a policy bug cannot reach another host; run it as root (sudo make test)")
	}
	name := fmt.Sprintf("rm-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// inNetns runs fn on this goroutine's thread moved into the namespace: the
// sockets fn opens (listeners, dials) live there. Goroutines fn starts do
// not run in it; sockets keep their namespace whatever thread uses them.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
		}
	}()
	fn()
}

func httpConnect(t testing.TB, proxyAddr, target string) int {
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestDialFailures: refused and unreachable destinations and a dead hop map to
// the right replies quickly, and the log names the failing hop.
func TestDialFailures(t *testing.T) {
	deadPort := refusedPort(t)
	r := startRelayd(t, "--allow-private")
	if rep, err := socksRaw(t, r.socks, connectReq("127.0.0.1", deadPort)); err != nil || rep != 0x05 {
		t.Fatalf("refused: reply 0x%02x %v, want 0x05", rep, err)
	}
	if code := httpConnect(t, r.http, "127.0.0.1:"+strconv.Itoa(deadPort)); code != 502 {
		t.Fatalf("refused over HTTP: %d, want 502", code)
	}
	switch rep, _ := socksRaw(t, r.socks, connectReq("no-such-host.invalid", 80)); rep {
	case 0x04:
	case 0x06:
		// No network here: a resolver that cannot be reached times out
		// instead of answering NXDOMAIN; that is the timeout mapping.
		t.Log("resolver timed out (no DNS server reachable): got 0x06")
	default:
		t.Fatalf("unresolvable: reply 0x%02x, want 0x04 (or 0x06 when DNS times out)", rep)
	}
	// A chain whose second hop is down: the entry says refused and names hop 2.
	entry := startRelayd(t, "--allow-private", "--next", "socks5://"+r.socks, "--next", "socks5://127.0.0.1:"+strconv.Itoa(deadPort))
	srv := startServer(t, echo)
	if rep, _ := socksRaw(t, entry.socks, connectReq("127.0.0.1", srv.ln.Addr().(*net.TCPAddr).Port)); rep != 0x05 {
		t.Fatalf("dead hop: reply 0x%02x, want 0x05", rep)
	}
	time.Sleep(100 * time.Millisecond)
	if !strings.Contains(entry.logs(), `"hop":2`) {
		t.Fatalf("log does not name hop 2:\n%s", entry.logs())
	}
}

// TestMalformedSOCKS is docs/reliability.md case 9: each input gets the right reply
// where one applies and the conn is closed within 1 s.
func TestMalformedSOCKS(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--handshake-timeout", "10s")
	full := append([]byte{5, 1, 0}, connectReq("example.com", 80)...)
	cases := []struct {
		name  string
		in    []byte
		reply []byte // expected bytes before close (nil: none checked beyond prefix)
	}{
		{"wrong version", []byte{4, 1, 0}, []byte{}},
		{"zero methods", []byte{5, 0}, []byte{}},
		{"unknown atyp", []byte{5, 1, 0, 5, 1, 0, 9, 1, 2, 3, 4, 0, 80}, []byte{5, 0, 5, 8}},
		{"empty domain", []byte{5, 1, 0, 5, 1, 0, 3, 0, 0, 80}, []byte{5, 0, 5, 1}},
		{"bind", []byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, 7}},
		// Answered, and over as soon as its control connection closes.
		{"udp associate", []byte{5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0, 5, 0, 0, 1, 127, 0, 0, 1}},
		{"request version 4", []byte{5, 1, 0, 4, 1, 0, 1, 127, 0, 0, 1, 0, 80}, []byte{5, 0}},
	}
	for i := 1; i < len(full); i++ {
		cases = append(cases, struct {
			name  string
			in    []byte
			reply []byte
		}{fmt.Sprintf("truncated at %d", i), full[:i], nil})
	}
	for _, tc := range cases {
		c, err := net.Dial("tcp", r.socks)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(tc.in); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(3 * time.Second))
		got, err := io.ReadAll(c)
		took := time.Since(start)
		c.Close()
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: not closed: %v", tc.name, err)
			continue
		}
		if took > time.Second {
			t.Errorf("%s: closed after %v, want < 1s", tc.name, took)
		}
		if tc.reply != nil && !bytes.HasPrefix(got, tc.reply) {
			t.Errorf("%s: got % x, want prefix % x", tc.name, got, tc.reply)
		}
	}
}

// TestHandshakeDeadline: a silent client and a one-byte-a-second client are
// closed at the handshake deadline; a tunnel idle longer than that deadline
// still works afterwards (the deadline was cleared).
func TestHandshakeDeadline(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--handshake-timeout", "1s")
	for _, drip := range []bool{false, true} {
		c, err := net.Dial("tcp", r.socks)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if drip {
			go func() {
				for _, b := range []byte{5, 1, 0, 5, 1, 0, 3} {
					if _, err := c.Write([]byte{b}); err != nil {
						return
					}
					time.Sleep(300 * time.Millisecond)
				}
			}()
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadAll(c)
		took := time.Since(start)
		c.Close()
		if took < 900*time.Millisecond || took > 2*time.Second {
			t.Errorf("drip=%v: closed after %v, want about 1s", drip, took)
		}
	}
	srv := startServer(t, echo)
	c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(1500 * time.Millisecond)
	_, _ = c.Write([]byte("late"))
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "late" {
		t.Fatalf("tunnel after the handshake deadline: %q %v", got, err)
	}
}

// TestIdleTimeout: a silent tunnel is closed; one that keeps moving is not.
func TestIdleTimeout(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--idle-timeout", "1s")
	srv := startServer(t, echo)
	c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if took := time.Since(start); err == nil || took > 2500*time.Millisecond {
		t.Fatalf("silent tunnel: read returned %v after %v, want close after ~1s", err, took)
	}
	c.Close()

	// Only the upload direction moves (the server discards), for 3 s.
	sink := startServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	c, _, err = xnetDial(t, r.socks, sink.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 12; i++ {
		if _, err := c.Write([]byte("tick")); err != nil {
			t.Fatalf("active one-way tunnel cut after %d ticks: %v", i, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestChurnNoLeak: after 1,000 connections (10,000 with RELAYMESH_FULL:
// success, refused dial, denied destination, reset mid-stream) goroutines
// and fds return to baseline (+5).
func TestChurnNoLeak(t *testing.T) {
	n := 1000
	if full() {
		n = 10000
	}
	r := startRelayd(t, "--allow-private", "--log-level", "info")
	srv := startServer(t, echo)
	dead := "127.0.0.1:" + strconv.Itoa(refusedPort(t))
	time.Sleep(200 * time.Millisecond)
	g0, fd0 := relayStats(t, r)
	for i := 0; i < n; i++ {
		switch i % 4 {
		case 0:
			c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write([]byte("x"))
			_, _ = io.ReadFull(c, make([]byte, 1))
			c.Close()
		case 1:
			if c, _, err := xnetDial(t, r.socks, dead, nil); err == nil {
				c.Close()
				t.Fatal("dial to a closed port succeeded")
			}
		case 2:
			if rep, err := socksRaw(t, r.socks, []byte{5, 9, 0, 1, 127, 0, 0, 1, 0, 80}); err != nil || rep != 0x07 {
				t.Fatalf("unknown command: reply 0x%02x %v, want 0x07", rep, err)
			}
		case 3:
			c, raw, err := xnetDial(t, r.socks, srv.addr(), &proxy.Auth{})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(bytes.Repeat([]byte("y"), 4096))
			_ = raw.SetLinger(0) // RST instead of FIN
			c.Close()
		}
	}
	var g, fd int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if g, fd = relayStats(t, r); g <= g0+5 && fd <= fd0+5 {
			return
		}
	}
	t.Fatalf("after churn: goroutines %d (baseline %d), fds %d (baseline %d)", g, g0, fd, fd0)
}

// relayStats reads go_goroutines from /metrics and counts /proc/PID/fd.
func relayStats(t testing.TB, r *relayd) (goroutines, fds int) {
	resp, err := http.Get("http://" + r.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			goroutines, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return goroutines, len(ents)
}

// TestConnCap: connection N+1 is refused at once, existing ones keep working.
func TestConnCap(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--max-conns", "2")
	srv := startServer(t, echo)
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	start := time.Now()
	if c, _, err := xnetDial(t, r.socks, srv.addr(), nil); err == nil {
		c.Close()
		t.Fatal("connection over max-conns accepted")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("refusal took %v", took)
	}
	for _, c := range held {
		_, _ = c.Write([]byte("k"))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("existing tunnel broken by the cap: %v", err)
		}
	}
}

// TestStartupSafety: off-loopback listeners need credentials or --open.
func TestStartupSafety(t *testing.T) {
	out, err := exec.Command(relaydBin, "run", "--socks", "0.0.0.0:0", "--http", "", "--admin", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--open") {
		t.Fatalf("non-loopback without credentials: err=%v, output %s", err, out)
	}
	r := startRelayd(t, "--socks", "0.0.0.0:0", "--http", "", "--open")
	if !strings.Contains(r.logs(), "OPEN PROXY") {
		t.Fatal("--open did not warn")
	}
	out, err = exec.Command(relaydBin, "run", "--next", "ftp://x:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "next[0]") {
		t.Fatalf("bad --next: err=%v, output %s", err, out)
	}
}

// TestGracefulShutdown: SIGTERM lets a live tunnel finish within the grace,
// then relayd exits 0 within grace + 1 s.
func TestGracefulShutdown(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--shutdown-grace", "2s")
	srv := startServer(t, echo)
	c, _, err := xnetDial(t, r.socks, srv.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	if _, err := net.DialTimeout("tcp", r.socks, time.Second); err == nil {
		t.Error("still accepting after SIGTERM")
	}
	_, _ = c.Write([]byte("z"))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("live tunnel broken during grace: %v", err)
	}
	<-r.exited
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("exit took %v, want <= grace+1s", took)
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// TestHTTPHeaderDeadline (docs/reliability.md case 19): headers dripped past the
// header timeout close the conn; an established CONNECT tunnel outlives it.
func TestHTTPHeaderDeadline(t *testing.T) {
	r := startRelayd(t, "--allow-private", "--handshake-timeout", "1s")
	drip, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() {
		for _, b := range []byte("CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n") {
			if _, err := drip.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	_ = drip.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.ReadAll(drip)
	drip.Close()
	if took := time.Since(start); took < 900*time.Millisecond || took > 2*time.Second {
		t.Fatalf("dripped headers: closed after %v, want about 1s", took)
	}

	srv := startServer(t, echo)
	c, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", srv.addr(), srv.addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	time.Sleep(1500 * time.Millisecond)
	_, _ = c.Write([]byte("late"))
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "late" {
		t.Fatalf("CONNECT tunnel after the header timeout: %q %v", got, err)
	}
}
