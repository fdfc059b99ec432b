package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/relaymesh/relaymesh/relay"
)

// A relay learns from a download what it sends to the client's host and
// tells that host in /v1/info: the rate its tunnel sustained, and the
// share of its bytes sent again (on loopback, none), which is absent
// until a MiB went there.
func TestRelayTellsTheClientWhatItLearntOfItsSegment(t *testing.T) {
	const token = "e2e-admin-token-0123"
	r := startRelayd(t, "--allow-private", "--admin-token", token)
	const sizeBytes = 4 << 20
	srv := startServer(t, func(c net.Conn) {
		defer c.Close()
		_, _ = c.Write(make([]byte, sizeBytes))
	})
	type learnt struct {
		LossToYou *float64 `json:"learnt_loss_to_you"`
		LossAgeS  *float64 `json:"learnt_loss_age_s"`
	}
	var before learnt
	if err := json.Unmarshal([]byte(adminGet(t, r, "/v1/info", token)), &before); err != nil {
		t.Fatal(err)
	}
	if before.LossToYou != nil || before.LossAgeS != nil {
		t.Fatalf("before any tunnel: learnt loss %v, age %v; want none", *before.LossToYou, before.LossAgeS)
	}
	c := dialThroughSOCKS(t, r.socks, srv.addr())
	n, err := io.Copy(io.Discard, c)
	c.Close()
	if err != nil || n != sizeBytes {
		t.Fatalf("downloaded %d of %d bytes: %v", n, sizeBytes, err)
	}
	// The tunnel is recorded when it ends, just after the client saw EOF.
	var after learnt
	for deadline := time.Now().Add(5 * time.Second); after.LossToYou == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		after = learnt{}
		if err := json.Unmarshal([]byte(adminGet(t, r, "/v1/info", token)), &after); err != nil {
			t.Fatal(err)
		}
	}
	if after.LossToYou == nil {
		t.Fatal("5 s after a 4 MiB download: no learnt loss in /v1/info")
	}
	// Loopback loses nothing, but the kernel counts what it sent again
	// for any reason (a tail-loss probe, a spurious timeout when the host
	// stalls the receiver): a few percent of a 4 MiB burst, now and then.
	// What is tested is that the relay reports it to the client, fresh.
	if after.LossAgeS == nil {
		t.Fatalf("after a 4 MiB download over loopback: learnt loss %v without its age", *after.LossToYou)
	}
	if *after.LossToYou < 0 || *after.LossToYou > 0.1 || *after.LossAgeS < 0 || *after.LossAgeS > 60 {
		t.Fatalf("after a 4 MiB download over loopback: learnt loss %v, age %v s; want under 0.1, just now", *after.LossToYou, *after.LossAgeS)
	}
}

// A tunnel that stays open teaches while it runs (every
// relay.LessonEvery), not only when it ends: a download's loss is in
// /v1/info while its tunnel is still open.
func TestRelayLearnsFromATunnelThatStaysOpen(t *testing.T) {
	const token = "e2e-admin-token-0123"
	r := startRelayd(t, "--allow-private", "--admin-token", token)
	const sizeBytes = 4 << 20
	release := make(chan struct{})
	defer close(release)
	srv := startServer(t, func(c net.Conn) {
		defer c.Close()
		_, _ = c.Write(make([]byte, sizeBytes))
		<-release // the tunnel stays open
	})
	c := dialThroughSOCKS(t, r.socks, srv.addr())
	defer c.Close()
	if n, err := io.CopyN(io.Discard, c, sizeBytes); err != nil {
		t.Fatalf("downloaded %d of %d bytes: %v", n, sizeBytes, err)
	}
	type learnt struct {
		LossToYou *float64 `json:"learnt_loss_to_you"`
	}
	var got learnt
	deadline := time.Now().Add(relay.LessonEvery + 5*time.Second)
	for got.LossToYou == nil && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if err := json.Unmarshal([]byte(adminGet(t, r, "/v1/info", token)), &got); err != nil {
			t.Fatal(err)
		}
	}
	if got.LossToYou == nil {
		t.Fatalf("%v after a 4 MiB download whose tunnel is still open: no learnt loss in /v1/info", relay.LessonEvery+5*time.Second)
	}
	// The tunnel is still open: its end did not teach it.
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the tunnel ended (%v) before its loss was learnt", err)
	}
}

// dialThroughSOCKS opens a tunnel to addr through the SOCKS5 proxy at
// socks (golang.org/x/net/proxy).
func dialThroughSOCKS(t *testing.T, socks, addr string) net.Conn {
	t.Helper()
	d, err := proxy.SOCKS5("tcp", socks, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
