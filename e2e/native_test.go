package e2e

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/route"
)

const fleetSecret = "e2e-fleet-secret-0123456789abcdef"

// nativeRelay is a relayd with a relay listener on a known port.
type nativeRelay struct {
	*relayd
	relayAddr string
	args      []string // to start it again on the same addresses
}

func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fleetSecretFile is a file holding fleetSecret, the e2e fleet's secret.
func fleetSecretFile(t *testing.T) string { return writeSecret(t, fleetSecret) }

// nativeChainOf starts n relays with relay listeners; the entry (first) lists
// the others as relaymesh:// next hops, so its SOCKS5/HTTP clients go
// entry → relays[1] → ... → relays[n-1] → destination with ONE header.
func nativeChainOf(t *testing.T, n int, extra ...string) []*nativeRelay {
	t.Helper()
	secretFile := writeSecret(t, fleetSecret)
	out := make([]*nativeRelay, n)
	for i := n - 1; i >= 0; i-- {
		addr := freeAddr(t)
		args := append([]string{"--allow-private", "--relay-listen", addr, "--fleet-secret-file", secretFile}, extra...)
		if i == 0 {
			for _, r := range out[1:] {
				args = append(args, "--next", "relaymesh://"+r.relayAddr)
			}
		}
		out[i] = &nativeRelay{relayd: startRelayd(t, args...), relayAddr: addr, args: args}
	}
	return out
}

// echoOnce sends msg through a SOCKS5 entry to an echo server and checks it
// comes back.
func echoOnce(t *testing.T, socks, dst, msg string) {
	t.Helper()
	c, _, err := xnetDial(t, socks, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
}

// TestNativeWarmPool: after the first tunnel, each relay hands the next one
// a warm connection (pool hits on the entry and the middle relay). When the
// middle relay restarts, its shutdown closes the warm connections it was
// holding at once (no grace-period wait for them), and the entry notices
// they are dead: every new tunnel still works.
func TestNativeWarmPool(t *testing.T) {
	relays := nativeChainOf(t, 3)
	srv := startServer(t, echo)
	for i := range 5 {
		echoOnce(t, relays[0].socks, srv.addr(), "warm-"+strconv.Itoa(i))
		time.Sleep(50 * time.Millisecond) // let the pools refill
	}
	for i, r := range relays[:2] {
		if hits := metricValue(t, r.relayd, `relaymesh_pool_events_total{event="hit"}`); hits < 4 {
			t.Fatalf("relay %d: %v pool hits in 5 tunnels, want >= 4 (only the first may be cold)", i, hits)
		}
	}

	mid := relays[1]
	mid.stop(t)
	if strings.Contains(mid.logs(), "grace period over") {
		t.Fatalf("idle warm connections held the restarting relay for its grace period:\n%s", mid.logs())
	}
	relays[1] = &nativeRelay{relayd: startRelayd(t, mid.args...), relayAddr: mid.relayAddr, args: mid.args}
	time.Sleep(100 * time.Millisecond) // the closes reach the entry
	for i := range 5 {
		echoOnce(t, relays[0].socks, srv.addr(), "after-restart-"+strconv.Itoa(i))
	}
	if broken := metricValue(t, relays[0].relayd, `relaymesh_pool_events_total{event="broken"}`); broken < 1 {
		t.Fatalf("entry counted %v broken warm conns after the middle relay restarted, want >= 1", broken)
	}
}

// TestNativeEarlyData: bytes written right behind a route header (before
// the status) reach the destination exactly once and in order with the bytes
// sent after the status, through two relays.
func TestNativeEarlyData(t *testing.T) {
	relays := nativeChainOf(t, 2)
	srv := startServer(t, echo)
	req, err := route.NewRequest([]string{relays[1].relayAddr}, srv.addr(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := rawRelay(t, relays[0].relayAddr, false, []byte(fleetSecret), req, []byte("early-bytes|"))
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce)
	if err != nil || resp.Status != route.StatusOK {
		t.Fatalf("status %+v, %v", resp, err)
	}
	if _, err := c.Write([]byte("after-status")); err != nil {
		t.Fatal(err)
	}
	want := "early-bytes|after-status"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("echo: %q, %v; want %q", got, err, want)
	}
}

// TestNativeChain: curl and x/net/proxy through a 3-relay native chain; a few
// MiB of random data each way at once with SHA-256 at both ends, and a
// half-close that must not cut the reply.
func TestNativeChain(t *testing.T) {
	relays := nativeChainOf(t, 3)
	entry := relays[0]

	ts := fileServer(t)
	const body = 3 << 20
	url := ts.URL + "/bytes/" + strconv.Itoa(body)
	for _, args := range [][]string{
		{"-x", "socks5h://" + entry.socks, url},
		{"-x", "http://" + entry.http, url},
		{"-p", "-x", "http://" + entry.http, url},
	} {
		got, err := curl(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pattern(body)) {
			t.Fatalf("curl %v: body mismatch, %d bytes", args, len(got))
		}
	}

	t.Run("sha256 both directions", func(t *testing.T) { checkSHA256BothWays(t, entry.socks, 4<<20, time.Minute) })

	t.Run("half-close", func(t *testing.T) {
		const upBytes, downBytes = 2 << 20, 1 << 20
		checkHalfClose(t, entry.socks, startHalfCloseServer(t, upBytes, downBytes).addr(), upBytes, downBytes)
	})

	// One header, not nested handshakes: the middle relay accepted exactly
	// the tunnels above on its relay listener and saw no SOCKS5 client.
	if v := metricValue(t, relays[1].relayd, `relaymesh_tunnel_requests_total{frontend="relay",result="ok"}`); v != 5 {
		t.Fatalf("middle relay opened %v native tunnels, want 5", v)
	}
	if v := metricValue(t, relays[2].relayd, `relaymesh_tunnel_requests_total{frontend="relay",result="ok"}`); v != 5 {
		t.Fatalf("last relay opened %v native tunnels, want 5", v)
	}
	if strings.Contains(relays[1].logs(), `"frontend":"socks5"`) {
		t.Fatal("the middle relay served a SOCKS5 client: the chain nested handshakes")
	}
}

// TestNativeRefused: the last relay cannot reach the destination; the entry
// answers SOCKS5 0x05 and its log names the last hop.
func TestNativeRefused(t *testing.T) {
	relays := nativeChainOf(t, 3)
	deadPort := refusedPort(t)
	if rep, err := socksRaw(t, relays[0].socks, connectReq("127.0.0.1", deadPort)); err != nil || rep != 0x05 {
		t.Fatalf("reply 0x%02x %v, want 0x05", rep, err)
	}
	if code := httpConnect(t, relays[0].http, "127.0.0.1:"+strconv.Itoa(deadPort)); code != 502 {
		t.Fatalf("HTTP CONNECT: %d, want 502", code)
	}
	time.Sleep(100 * time.Millisecond)
	logs := relays[0].logs()
	last := `"hop_name":"relaymesh://` + relays[2].relayAddr + `"`
	if !strings.Contains(logs, `"hop":2`) || !strings.Contains(logs, last) || !strings.Contains(logs, `"kind":"refused"`) {
		t.Fatalf("entry log does not name hop 2 (%s) as refused:\n%s", last, logs)
	}

	// A middle relay that is down is named too (hop 1 cannot reach hop 2).
	relays[2].stop(t)
	srv := startServer(t, echo)
	if rep, _ := socksRaw(t, relays[0].socks, connectReq("127.0.0.1", srv.ln.Addr().(*net.TCPAddr).Port)); rep != 0x05 {
		t.Fatalf("dead last relay: reply 0x%02x, want 0x05", rep)
	}
	if srv.conn.get() != 0 {
		t.Fatal("destination reached through a dead relay?")
	}
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(relays[0].logs(), `"hop":2,"hop_name":"relaymesh://`+relays[2].relayAddr+`"`); n != 3 {
		t.Fatalf("entry named the dead last relay in %d of 3 failures:\n%s", n, relays[0].logs())
	}
}

// rawRelay connects to a relay listener as a member of the fleet with
// secret (TLS with the fleet's certificates, unless plain), binds req to
// that link, and sends its header with extra right behind it.
func rawRelay(t *testing.T, addr string, plain bool, secret []byte, req *route.Request, extra []byte) net.Conn {
	t.Helper()
	c := linkTo(t, addr, plain, secret)
	var err error
	if req.Bind, err = linktls.Binding(c); err != nil {
		t.Fatal(err)
	}
	hdr, err := req.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(append(hdr, extra...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// linkTo opens a relay link to addr as a holder of secret (TLS with the
// fleet's certificates, or plain TCP).
func linkTo(t *testing.T, addr string, plain bool, secret []byte) net.Conn {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if plain {
		return raw
	}
	id, err := linktls.New(secret, "e2e", linktls.RoleClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := id.Client(ctx, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNativeStranger: a client without the fleet secret gets nothing through
// the relay listener (no response at all), and the target sees no
// connection: over TLS (the default) it cannot even finish the handshake,
// nor does a clear-text header get past it; over plain links the header's
// MAC stops it.
func TestNativeStranger(t *testing.T) {
	stranger := []byte("a-stranger-guessing-the-secret!!")
	nothingBack := func(t *testing.T, c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if len(got) != 0 {
			t.Fatalf("stranger got %d bytes back: %q", len(got), got)
		}
		if err != nil {
			t.Logf("closed with %v", err) // a reset is fine too
		}
	}
	for _, transport := range []string{"tls", "plain"} {
		t.Run(transport, func(t *testing.T) {
			relays := nativeChainOf(t, 2, "--transport", transport)
			srv := startServer(t, echo)
			for _, hops := range [][]string{nil, {relays[1].relayAddr}} {
				req, err := route.NewRequest(hops, srv.addr(), time.Now())
				if err != nil {
					t.Fatal(err)
				}
				hdr, err := req.Marshal(stranger)
				if err != nil {
					t.Fatal(err)
				}
				// A clear-text header, as a plain relay would send it.
				c := linkTo(t, relays[0].relayAddr, true, nil)
				if _, err := c.Write(hdr); err != nil {
					t.Fatal(err)
				}
				nothingBack(t, c)
				if transport == "tls" {
					// TLS with a certificate of another fleet.
					raw, err := net.DialTimeout("tcp", relays[0].relayAddr, 5*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					id, err := linktls.New(stranger, "stranger", linktls.RoleRelay)
					if err != nil {
						t.Fatal(err)
					}
					if c, err := id.Client(context.Background(), raw, ""); err == nil {
						c.Close()
						t.Fatal("a stranger finished the TLS handshake with a relay")
					}
				}
			}
			if n := srv.conn.get(); n != 0 {
				t.Fatalf("target saw %d connections from a stranger", n)
			}
			rule, want := "route_auth", 2.0
			if transport == "tls" {
				rule, want = "link_auth", 4
			}
			metricReaches(t, relays[0].relayd, `relaymesh_denials_total{reason="`+rule+`"}`, want)
			if strings.Contains(relays[0].logs(), fleetSecret) {
				t.Fatal("the fleet secret appeared in the logs")
			}
		})
	}
}

// TestNativeReplay: a valid header (our own client, built with the codec)
// works once. The same bytes sent again are refused without a response: on
// plain links by the replay guard; over TLS already by the MAC, which covers
// the link's channel binding, so a copy is refused by the relay it was made
// for and by any other relay of the fleet alike.
func TestNativeReplay(t *testing.T) {
	for _, transport := range []string{"tls", "plain"} {
		t.Run(transport, func(t *testing.T) {
			plain := transport == "plain"
			relays := nativeChainOf(t, 2, "--transport", transport)
			srv := startServer(t, echo)
			secret := []byte(fleetSecret)
			req, err := route.NewRequest(nil, srv.addr(), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			c := rawRelay(t, relays[0].relayAddr, plain, secret, req, nil)
			hdr, err := req.Marshal(secret) // the bytes just sent
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := route.ReadResponse(c, secret, req.Nonce)
			if err != nil || resp.Status != route.StatusOK {
				t.Fatalf("first use: %+v %v", resp, err)
			}
			msg := []byte("hello through the native protocol")
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			_ = c.(interface{ CloseWrite() error }).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo: %q %v", got, err)
			}

			// The copy, on a fresh link of a fleet member: to the same
			// relay, then to another one.
			others := relays
			if plain {
				others = relays[:1]
			}
			for _, r := range others {
				c2 := linkTo(t, r.relayAddr, plain, secret)
				if _, err := c2.Write(hdr); err != nil {
					t.Fatal(err)
				}
				_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
				if got, _ := io.ReadAll(c2); len(got) != 0 {
					t.Fatalf("replayed header got %d bytes back from %s", len(got), r.relayAddr)
				}
			}
			if n := srv.conn.get(); n != 1 {
				t.Fatalf("target saw %d connections, want 1 (the replay must not reach it)", n)
			}
			rule := "route_auth"
			if plain {
				// Plain links: only the receiving relay's guard knows
				// the nonce; another relay would take the copy within
				// the replay window (not tried: it would reach the
				// target). TLS's binding closes that.
				rule = "route_replay"
			}
			if v := metricValue(t, relays[0].relayd, `relaymesh_denials_total{reason="`+rule+`"}`); v != 1 {
				t.Fatalf("%s denials on the relay it was made for = %v, want 1", rule, v)
			}
			if !strings.Contains(relays[0].logs(), `"rule":"`+rule+`"`) {
				t.Fatalf("replay not logged:\n%s", relays[0].logs())
			}
			if !plain {
				if v := metricValue(t, relays[1].relayd, `relaymesh_denials_total{reason="route_auth"}`); v != 1 {
					t.Fatalf("route_auth denials on another relay = %v, want 1", v)
				}
			}
		})
	}
}

// TestNativeChurnNoLeak: successes, refused destinations, strangers and
// resets through a 3-relay native chain leave no goroutines or fds behind on
// any relay.
func TestNativeChurnNoLeak(t *testing.T) {
	// Warm pools hold connections by design; a short pool idle time lets
	// them expire back to the steady state (one per peer in use).
	relays := nativeChainOf(t, 3, "--log-level", "info", "--pool-idle-timeout", "1s")
	srv := startServer(t, echo)
	dead := "127.0.0.1:" + strconv.Itoa(refusedPort(t))
	stranger, err := (&route.Request{Dst: srv.addr(), Time: time.Now()}).Marshal([]byte("not-the-fleet-secret-at-all"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	type stats struct{ g, fd int }
	base := make([]stats, len(relays))
	for i, r := range relays {
		base[i].g, base[i].fd = relayStats(t, r.relayd)
	}
	n := 300
	if full() {
		n = 10000 // docs/reliability.md case 1: 10,000 through 3 hops
	}
	for i := 0; i < n; i++ {
		switch i % 4 {
		case 0:
			c, _, err := xnetDial(t, relays[0].socks, srv.addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write([]byte("x"))
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			c.Close()
		case 1:
			if c, _, err := xnetDial(t, relays[0].socks, dead, nil); err == nil {
				c.Close()
				t.Fatal("dial to a closed port succeeded")
			}
		case 2:
			c := linkTo(t, relays[1].relayAddr, true, nil) // a header under another secret
			if _, err := c.Write(stranger); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.ReadAll(c)
			c.Close()
		case 3:
			c, raw, err := xnetDial(t, relays[0].socks, srv.addr(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(bytes.Repeat([]byte("y"), 4096))
			_ = raw.SetLinger(0) // RST instead of FIN
			c.Close()
		}
	}
	for i, r := range relays {
		var g, fd int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if g, fd = relayStats(t, r.relayd); g <= base[i].g+5 && fd <= base[i].fd+5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("relay %d after churn: goroutines %d (baseline %d), fds %d (baseline %d)", i, g, base[i].g, fd, base[i].fd)
			}
		}
	}
}
