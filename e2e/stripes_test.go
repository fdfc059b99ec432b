package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/route"
)

// TestStripedChain carries tunnels through entry → r1 → r2 with both
// segments striped: entry → r1 over 3 links the entry opens itself, r1 → r2
// over 4 that r1 opens from the header. Bytes come out whole and in order
// (curl's body, SHA-256 both ways, half-close), over TLS links and plain
// ones, and each relay says it received striped segments. With optimistic
// data the entry's first bytes ride inside the striped stream.
func TestStripedChain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"tls", []string{"--transport", "tls"}},
		{"plain", []string{"--transport", "plain"}},
		{"tls, optimistic data", []string{"--transport", "tls", "--optimistic-data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secretFile := fleetSecretFile(t)
			common := append([]string{"--allow-private", "--fleet-secret-file", secretFile}, tc.extra...)
			r1Addr, r2Addr := freeAddr(t), freeAddr(t)
			r2 := startRelayd(t, append([]string{"--relay-listen", r2Addr}, common...)...)
			r1 := startRelayd(t, append([]string{"--relay-listen", r1Addr}, common...)...)
			entry := startRelayd(t, append(common,
				"--next", "relaymesh://"+r1Addr+"?stripes=3",
				"--next", "relaymesh://"+r2Addr+"?stripes=4")...)

			ts := fileServer(t)
			const body = 5 << 20
			got, err := curl(t, "-x", "socks5h://"+entry.socks, ts.URL+"/bytes/"+strconv.Itoa(body))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pattern(body)) {
				t.Fatalf("curl: body mismatch, %d bytes", len(got))
			}
			checkSHA256BothWays(t, entry.socks, 4<<20, time.Minute)
			const upBytes, downBytes = 2 << 20, 1 << 20
			checkHalfClose(t, entry.socks, startHalfCloseServer(t, upBytes, downBytes).addr(), upBytes, downBytes)

			if v := metricValue(t, r1, `relaymesh_striped_segments_total{links="3"}`); v != 3 {
				t.Fatalf("r1 received %v segments striped over 3 links, want 3", v)
			}
			if v := metricValue(t, r2, `relaymesh_striped_segments_total{links="4"}`); v != 3 {
				t.Fatalf("r2 received %v segments striped over 4 links, want 3", v)
			}
		})
	}
}

// stripedHeader is a striped request for dst (the receiver's segment over
// links links), MAC'd with secret for a plain link.
func stripedHeader(t *testing.T, dst string, links int, secret []byte) (*route.Request, []byte) {
	t.Helper()
	req, err := route.NewRequest(nil, dst, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req.InStripes = links
	hdr, err := req.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	return req, hdr
}

// joinBytes is link index's join to req, MAC'd with secret for a plain link.
func joinBytes(t *testing.T, req *route.Request, index, count int, secret []byte) []byte {
	t.Helper()
	j, err := route.NewJoin(req.Nonce, index, count, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A join only a fleet member can make: over plain links (where the MAC is
// the only guard) a join under another secret is refused without a word,
// a copy of a good join is refused as a replay, and a segment whose links
// did not all join is answered with a failure naming how many did, its
// request never reaching the destination.
func TestStripeJoinsOnlyFromTheFleet(t *testing.T) {
	secret := []byte(fleetSecret)
	relayAddr := freeAddr(t)
	r := startRelayd(t, "--allow-private", "--relay-listen", relayAddr, "--fleet-secret-file", fleetSecretFile(t),
		"--transport", "plain", "--handshake-timeout", "2s")
	srv := startServer(t, echo)

	req, hdr := stripedHeader(t, srv.addr(), 3, secret)
	first := linkTo(t, relayAddr, true, nil)
	if _, err := first.Write(hdr); err != nil {
		t.Fatal(err)
	}
	good := joinBytes(t, req, 1, 3, secret)
	if _, err := linkTo(t, relayAddr, true, nil).Write(good); err != nil {
		t.Fatal(err)
	}
	// Link 2: a stranger's join, then a copy of link 1's.
	stranger := linkTo(t, relayAddr, true, nil)
	if _, err := stranger.Write(joinBytes(t, req, 2, 3, []byte("a-stranger-guessing-the-secret!!"))); err != nil {
		t.Fatal(err)
	}
	replayed := linkTo(t, relayAddr, true, nil)
	if _, err := replayed.Write(good); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"stranger's join": stranger, "replayed join": replayed} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, _ := io.ReadAll(c); len(got) != 0 {
			t.Fatalf("%s: got %d bytes back", name, len(got))
		}
	}
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := route.ReadResponse(first, secret, req.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status == route.StatusOK || !strings.Contains(resp.Reason, "2 of 3 links joined") {
		t.Fatalf("status %v %q, want a failure saying 2 of 3 links joined", resp.Status, resp.Reason)
	}
	if n := srv.conn.get(); n != 0 {
		t.Fatalf("the destination saw %d connections", n)
	}
	if v := metricValue(t, r, `relaymesh_denials_total{reason="route_auth"}`); v != 1 {
		t.Fatalf("route_auth denials %v, want 1 (the stranger's join)", v)
	}
	if v := metricValue(t, r, `relaymesh_denials_total{reason="route_replay"}`); v != 1 {
		t.Fatalf("route_replay denials %v, want 1 (the copied join)", v)
	}
}

// A relay takes striped segments of at most limits.max_stripes links: it
// says so in /v1/info, and a header asking more is answered with why,
// before any join is waited for.
func TestStripesWithinTheRelaysLimit(t *testing.T) {
	secret := []byte(fleetSecret)
	relayAddr := freeAddr(t)
	r := startRelayd(t, "--allow-private", "--relay-listen", relayAddr, "--fleet-secret-file", fleetSecretFile(t),
		"--transport", "plain", "--max-stripes", "2")
	var info struct {
		MaxStripes int `json:"max_stripes"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, r, "/v1/info", "")), &info); err != nil || info.MaxStripes != 2 {
		t.Fatalf("/v1/info max_stripes %d (%v), want 2", info.MaxStripes, err)
	}
	srv := startServer(t, echo)
	req, hdr := stripedHeader(t, srv.addr(), 3, secret)
	c := linkTo(t, relayAddr, true, nil)
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := route.ReadResponse(c, secret, req.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status == route.StatusOK || !strings.Contains(resp.Reason, "at most 2 links") {
		t.Fatalf("status %v %q, want a failure saying at most 2 links", resp.Status, resp.Reason)
	}
}
