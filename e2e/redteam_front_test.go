package e2e

// Red-team tests of the client front ends (SOCKS5 and HTTP): what a
// stranger, or a client's own destination, can hold there. Each failed
// before the guard it names (docs/security.md lists the findings).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
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
