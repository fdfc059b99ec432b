package e2e

// Red-team tests of the client front ends (SOCKS5 and HTTP): what a
// stranger, or a client's own destination, can hold there. Each failed
// before the guard it names (docs/security.md lists the findings).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

const (
	frontUser = "alice"
	frontPass = "front-pw-0123"
)

// silentUpgradeServer answers every request with 101 Switching Protocols
// and then neither sends nor closes: after the client's half-close it keeps
// its end open until the test ends, as an attacker's websocket server can.
func silentUpgradeServer(t *testing.T) *server {
	done := make(chan struct{})
	srv := startServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_, _ = io.Copy(io.Discard, br) // up to the relay's half-close or close
		<-done
	})
	t.Cleanup(func() { close(done) }) // before the server's own cleanup waits for it
	return srv
}

// upgradeVia sends a websocket upgrade for srv through the HTTP front end
// at proxyAddr and returns the conn once the 101 is read; status is the
// answer's code when it is not 101.
func upgradeVia(t *testing.T, proxyAddr, dst string) (c net.Conn, br *bufio.Reader, status int, err error) {
	t.Helper()
	c, err = net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		return nil, nil, 0, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://%s/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", dst, dst)
	br = bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, nil, 0, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		return nil, nil, resp.StatusCode, nil
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, resp.StatusCode, nil
}

// TestRedTeamUpgradeSilentBackend: a websocket whose client has gone
// gives its slot back within the drain timeout even when the destination
// stays silent and open. The upgrade copier of Go's reverse proxy
// half-closed toward the destination and waited for it for good: two quick
// upgrades to such a server locked a relay with --max-conns 2.
func TestRedTeamUpgradeSilentBackend(t *testing.T) {
	srv := silentUpgradeServer(t)
	r := startRelayd(t, "--allow-private", "--max-conns", "2", "--drain-timeout", "1s")
	for i := range 5 {
		deadline := time.Now().Add(6 * time.Second)
		for {
			c, _, status, err := upgradeVia(t, r.http, srv.addr())
			if err == nil && status == http.StatusSwitchingProtocols {
				c.Close() // the client leaves at once
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("upgrade %d: status %d, %v: slots still held by the %d upgrades whose clients left\n%s", i, status, err, i, r.logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// floodAfterEOF is a destination that reads the request up to the
// client's half-close (after a 101 when upgrade is set) and then writes
// 512 MiB, reporting how its write ended.
func floodAfterEOF(t *testing.T, upgrade bool, writeErr chan<- error) *server {
	return startServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if upgrade {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		}
		_, _ = io.Copy(io.Discard, br)
		_, err := c.Write(make([]byte, 512<<20))
		writeErr <- err
	})
}

// TestRedTeamHTTPDrain: on every HTTP path, a client that stops reading
// cannot hold its tunnel (and the destination's socket, and a slot)
// beyond the drain timeout: a CONNECT tunnel and a websocket whose client
// half-closed, and a forwarded GET whose client never reads the answer.
// The upgrade and the forward were held forever: the reverse proxy's
// copies had no deadline.
func TestRedTeamHTTPDrain(t *testing.T) {
	wait := func(t *testing.T, r *relayd, writeErr <-chan error) {
		t.Helper()
		select {
		case err := <-writeErr:
			if err == nil {
				t.Fatal("the destination wrote 512 MiB to a client that reads nothing")
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("a client that reads nothing still held its destination 20 s after a 1 s drain timeout\n%s", r.logs())
		}
	}
	t.Run("connect", func(t *testing.T) {
		writeErr := make(chan error, 1)
		srv := floodAfterEOF(t, false, writeErr)
		r := startRelayd(t, "--allow-private", "--drain-timeout", "1s")
		c, err := net.DialTimeout("tcp", r.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", srv.addr(), srv.addr())
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		_, _ = c.Write([]byte("request"))
		_ = c.(*net.TCPConn).CloseWrite() // and never reads
		wait(t, r, writeErr)
	})
	t.Run("upgrade", func(t *testing.T) {
		writeErr := make(chan error, 1)
		srv := floodAfterEOF(t, true, writeErr)
		r := startRelayd(t, "--allow-private", "--drain-timeout", "1s")
		c, _, status, err := upgradeVia(t, r.http, srv.addr())
		if err != nil || status != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: status %d, %v", status, err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("frame"))
		_ = c.(*net.TCPConn).CloseWrite() // and never reads
		wait(t, r, writeErr)
	})
	t.Run("forward", func(t *testing.T) {
		writeErr := make(chan error, 1)
		srv := startServer(t, func(c net.Conn) {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 512<<20)
			_, err := c.Write(make([]byte, 512<<20))
			writeErr <- err
		})
		r := startRelayd(t, "--allow-private", "--drain-timeout", "1s")
		c, err := net.DialTimeout("tcp", r.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/big HTTP/1.1\r\nHost: %s\r\n\r\n", srv.addr(), srv.addr()) // and never reads
		wait(t, r, writeErr)
	})
}

// TestRedTeamHTTP407Closes: a connection that was answered 407 is closed
// with it; it cannot send another unauthenticated request. It used to be
// kept alive 60 s, renewed by every new request: a stranger held it (and a
// client slot) for as long as it liked.
func TestRedTeamHTTP407Closes(t *testing.T) {
	r := startRelayd(t, "--user", frontUser, "--password", frontPass)
	c, err := net.DialTimeout("tcp", r.http, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		if _, err := fmt.Fprint(c, "GET http://example.invalid/ HTTP/1.1\r\nHost: example.invalid\r\n\r\n"); err != nil {
			if i == 0 {
				t.Fatal(err)
			}
			return // closed: the second request is not even taken
		}
		resp, err := http.ReadResponse(br, nil)
		if i == 1 {
			if err == nil {
				t.Fatalf("a second unauthenticated request on the conn of a 407 was answered %s: the conn is kept alive", resp.Status)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("no credentials: %s, want 407", resp.Status)
		}
		if !resp.Close {
			t.Errorf("the 407 does not say Connection: close")
		}
	}
}

// holdSilent opens n connections to addr that send nothing.
func holdSilent(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var out []net.Conn
	for i := range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("stranger %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// closedSoon says whether the relay closed c within d (reads see EOF or
// a reset, after a 503 on HTTP, rather than the deadline).
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// servedWithCredentials checks that a client with credentials gets a
// SOCKS5 tunnel to srv at socksAddr, and then (while that tunnel is open)
// a CONNECT tunnel at httpAddr; "" skips either.
func servedWithCredentials(t *testing.T, socksAddr, httpAddr string, srv *server) {
	t.Helper()
	if socksAddr != "" {
		c, _, err := xnetDial(t, socksAddr, srv.addr(), &proxy.Auth{User: frontUser, Password: frontPass})
		if err != nil {
			t.Fatalf("SOCKS5 client with credentials refused: %v", err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("k")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("SOCKS5 client with credentials: %v", err)
		}
	}
	if httpAddr == "" {
		return
	}
	hc, err := net.DialTimeout("tcp", httpAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	_ = hc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(hc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", srv.addr(), srv.addr(), basicAuth(frontUser, frontPass))
	resp, err := http.ReadResponse(bufio.NewReader(hc), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP client with credentials refused: %v %v", resp, err)
	}
}

func basicAuth(user, pass string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

// TestRedTeamPreauthSlots: strangers that connect and say nothing take
// none of the clients' slots. They used to take one each for the
// handshake timeout, and reconnect: twenty of them locked a relay with
// --max-conns 2 against clients with credentials.
func TestRedTeamPreauthSlots(t *testing.T) {
	srv := startServer(t, echo)
	r := startRelayd(t, "--allow-private", "--user", frontUser, "--password", frontPass,
		"--max-conns", "2", "--handshake-timeout", "30s")
	holdSilent(t, r.socks, 10)
	holdSilent(t, r.http, 10)
	time.Sleep(200 * time.Millisecond) // all accepted
	servedWithCredentials(t, r.socks, r.http, srv)
}

// TestRedTeamPreauthListenerCap: a client listener keeps at most
// limits.max_preauth_conns connections that have not authenticated; a
// newcomer over it takes the place of the oldest (closed at once, counted,
// logged sampled), so a listener full of strangers still serves a client.
// There was no such cap: every stranger was kept the whole handshake
// timeout; then a full budget refused every newcomer, the client too.
func TestRedTeamPreauthListenerCap(t *testing.T) {
	srv := startServer(t, echo)
	r := startRelayd(t, "--allow-private", "--user", frontUser, "--password", frontPass,
		"--max-preauth-conns", "8", "--handshake-timeout", "30s")
	strangers := holdSilent(t, r.socks, 20)
	time.Sleep(300 * time.Millisecond) // all accepted
	var closed []int
	for i, c := range strangers {
		if closedSoon(c, 200*time.Millisecond) {
			closed = append(closed, i)
		}
	}
	if len(closed) != 12 || closed[0] != 0 || closed[11] != 11 {
		t.Fatalf("silent strangers closed %v with --max-preauth-conns 8, want the 12 oldest (0..11)\n%s", closed, r.logs())
	}
	// The budget is full of strangers (the 8 newest): a client with
	// credentials takes the oldest one's place and is served, on both
	// listeners (the HTTP one has its own budget).
	servedWithCredentials(t, r.socks, r.http, srv)
	if v := metricValue(t, r, `relaymesh_denials_total{reason="max_preauth_conns"}`); v != 13 {
		t.Fatalf("max_preauth_conns denials = %v, want 13 (12 strangers and one for the client)", v)
	}
	if n := strings.Count(r.logs(), `"rule":"max_preauth_conns"`); n < 1 || n > 2 {
		t.Fatalf("%d log lines for 12 refusals within a second: want them sampled (one a second)", n)
	}
}

// nonLoopbackAddr is an address of this host other than loopback, for a
// connection whose source counts per address (loopback is exempt).
func nonLoopbackAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	testenv.Need(t, "needs an IPv4 address other than loopback on this host (any interface up with one)")
	return ""
}

// TestRedTeamPreauthPerSource: one source address keeps at most
// limits.max_preauth_per_source connections that have not authenticated
// on the client listeners; one over it is closed at once, while other
// sources are served. There was no such cap: one stranger could take the
// whole listener's budget.
func TestRedTeamPreauthPerSource(t *testing.T) {
	ip := nonLoopbackAddr(t)
	srv := startServer(t, echo)
	r := startRelayd(t, "--allow-private", "--user", frontUser, "--password", frontPass,
		"--socks", "0.0.0.0:0", "--http", "0.0.0.0:0",
		"--max-preauth-per-source", "4", "--handshake-timeout", "30s")
	_, port, _ := net.SplitHostPort(r.socks)
	_, httpPort, _ := net.SplitHostPort(r.http)
	strangers := append(holdSilent(t, net.JoinHostPort(ip, port), 6), holdSilent(t, net.JoinHostPort(ip, httpPort), 4)...)
	time.Sleep(300 * time.Millisecond) // all accepted
	closed := 0
	for _, c := range strangers {
		if closedSoon(c, 200*time.Millisecond) {
			closed++
		}
	}
	if closed != 6 {
		t.Fatalf("%d of 10 silent strangers from %s closed at once with --max-preauth-per-source 4, want 6\n%s", closed, ip, r.logs())
	}
	// Loopback is another source (and exempt): it is served.
	servedWithCredentials(t, "127.0.0.1:"+port, "127.0.0.1:"+httpPort, srv)
	if v := metricValue(t, r, `relaymesh_denials_total{reason="max_preauth_per_source"}`); v != 6 {
		t.Fatalf("max_preauth_per_source denials = %v, want 6", v)
	}
}

// TestRedTeamAuthLogsSampled: wrong passwords are counted each and logged
// at most once a second: a stranger guessing cannot flood the log. Every
// one used to be a WARN line.
func TestRedTeamAuthLogsSampled(t *testing.T) {
	r := startRelayd(t, "--user", frontUser, "--password", frontPass)
	start := time.Now()
	const n = 40
	for i := range n {
		rep, err := socksAuthRaw(r.socks, frontUser, "wrong-"+strconv.Itoa(i))
		if err != nil || rep == 0 {
			t.Fatalf("guess %d: status %d, %v", i, rep, err)
		}
		c, err := net.DialTimeout("tcp", r.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET http://example.invalid/ HTTP/1.1\r\nHost: example.invalid\r\nProxy-Authorization: Basic %s\r\n\r\n", basicAuth(frontUser, "wrong"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("HTTP guess %d: %v %v", i, resp, err)
		}
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond) // the log reader
	if v := metricValue(t, r, `relaymesh_denials_total{reason="auth"}`); v != 2*n {
		t.Fatalf("auth denials = %v, want %d", v, 2*n)
	}
	lines := strings.Count(r.logs(), `"rule":"auth"`)
	if most := int(took/time.Second) + 2; lines < 1 || lines > most {
		t.Fatalf("%d auth denials in %v logged %d times: want at least one and at most one a second (%d)", 2*n, took.Round(time.Millisecond), lines, most)
	}
}

// socksAuthRaw runs a SOCKS5 username/password exchange and returns the
// server's auth status (0: accepted).
func socksAuthRaw(addr, user, pass string) (byte, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte{5, 1, 2, 1, byte(len(user))}
	msg = append(append(msg, user...), byte(len(pass)))
	msg = append(msg, pass...)
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	var rep [4]byte // method choice, auth status
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return 0, err
	}
	return rep[3], nil
}
