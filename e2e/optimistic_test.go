package e2e

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// With --optimistic-data, a SOCKS5 client through three native relays gets
// every byte both ways, the first ones (sent right after "succeeded", so
// carried with the route header) exactly once and in order.
func TestOptimisticDataCarriesEverything(t *testing.T) {
	relays := nativeChainOf(t, 3)
	entry := startRelayd(t, "--allow-private", "--optimistic-data", "--fleet-secret-file", fleetSecretFile(t),
		"--next", "relaymesh://"+relays[1].relayAddr, "--next", "relaymesh://"+relays[2].relayAddr)
	srv := startServer(t, echo)
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	for i := range 3 {
		c, _, err := xnetDial(t, entry.socks, srv.addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() { _, _ = c.Write(payload) }()
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("tunnel %d: %d bytes back, equal %v, %v", i, len(got), bytes.Equal(got, payload), err)
		}
		c.Close()
	}
}

// The client's first bytes leave with the route header, before any status
// came back: here the next relay is a listener that never answers, and the
// bytes still reach it. Without optimistic data the client would still be
// waiting for "succeeded".
func TestOptimisticDataRidesWithTheHeader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var got []byte
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for !bytes.Contains(got, []byte("GET /first")) {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		seen <- got
	}()
	entry := startRelayd(t, "--allow-private", "--optimistic-data", "--transport", "plain",
		"--fleet-secret-file", fleetSecretFile(t), "--next", "relaymesh://"+ln.Addr().String(), "--pool-max-idle", "0")
	c, _, err := xnetDial(t, entry.socks, "192.0.2.1:80", nil)
	if err != nil {
		t.Fatalf("optimistic entry did not answer before the chain was up: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /first HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-seen:
		if !bytes.Contains(got, []byte("GET /first")) {
			t.Fatalf("the next relay got %d bytes, without the client's request", len(got))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the next relay never got the client's request")
	}
}

// A chain that fails after the optimistic "succeeded" resets the client,
// and the entry counts it by kind; a destination the entry refuses itself
// is still refused in the reply.
func TestOptimisticDataFailures(t *testing.T) {
	closed := freeAddr(t) // nothing listens here
	entry := startRelayd(t, "--optimistic-data", "--fleet-secret-file", fleetSecretFile(t), "--next", "relaymesh://"+closed,
		"--relay-allow", "127.0.0.1/32") // the next relay is on loopback
	c, _, err := xnetDial(t, entry.socks, "dst.example:80", nil)
	if err != nil {
		t.Fatalf("optimistic entry: %v", err)
	}
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	_, err = c.Read(make([]byte, 1))
	c.Close()
	var ne *net.OpError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("client read after a failed chain: %v, want a connection reset", err)
	}
	if n := metricWithPrefix(t, entry, `relaymesh_optimistic_resets_total{`); n != 1 {
		t.Fatalf("optimistic resets counted: %v, want 1", n)
	}
	if !strings.Contains(entry.logs(), "optimistic tunnel failed") {
		t.Fatalf("no log of the reset:\n%s", entry.logs())
	}

	// Loopback is refused by the entry's own policy: the reply says so.
	srv := startServer(t, echo)
	if _, _, err := xnetDial(t, entry.socks, srv.addr(), nil); err == nil {
		t.Fatal("a denied destination was answered succeeded")
	}
}

// metricWithPrefix sums the samples of r's /metrics whose line starts with
// prefix (a metric name and "{", for every label value).
func metricWithPrefix(t *testing.T, r *relayd, prefix string) float64 {
	t.Helper()
	var sum float64
	for _, line := range metricLines(t, r) {
		if strings.HasPrefix(line, prefix) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}
