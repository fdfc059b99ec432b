package relay

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/relaymesh/relaymesh/pkg/udpask"
)

// startAsked runs a relay as startAdmin does, whose probes may reach
// loopback, with admin_udp as given (nil: the default).
func startAsked(t *testing.T, adminUDP *bool) *Server {
	t.Helper()
	return startAdminWith(t, func(cfg *Config) {
		cfg.AdminUDP = adminUDP
		cfg.Policy.Allow = []string{"127.0.0.0/8"}
	})
}

// acceptingListener is a loopback TCP listener that accepts and closes
// every connection: a target to time handshakes to.
func acceptingListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}

// askOnce asks addr with key over a client of its own; it reports whether
// the ask was acknowledged within wait, and the RTTs of its reply.
func askOnce(t *testing.T, key udpask.Key, addr string, targets []string, wait time.Duration) (bool, []time.Duration) {
	t.Helper()
	c, err := udpask.NewClient(key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p, err := c.Ask(ctx, addr, 2, time.Second, targets, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cancel()
	select {
	case <-p.Acked():
	case <-ctx.Done():
		return false, nil
	}
	rtts, _, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("acknowledged, then: %v", err)
	}
	return true, rtts
}

// A relay answers an ask from a holder of the fleet secret and the admin
// token with its handshakes' RTTs (a target its destination policy denies
// unanswered), and nothing to anyone else: another key, a replay.
func TestRelayAnswersUDPAsks(t *testing.T) {
	s := startAsked(t, nil)
	if s.udp == nil {
		t.Fatal("admin_udp is on by default with a fleet secret and an admin token, but no socket")
	}
	ln := acceptingListener(t)
	key, err := udpask.DeriveKey(testSecret, s.cfg.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	// 169.254.169.254 is a cloud metadata service: denied, never dialed.
	acked, rtts := askOnce(t, key, s.AdminAddr(), []string{ln.Addr().String(), "169.254.169.254:80"}, 5*time.Second)
	if !acked || len(rtts) != 2 {
		t.Fatalf("acknowledged %v, RTTs %v", acked, rtts)
	}
	if rtts[0] < 0 || rtts[0] > time.Second {
		t.Errorf("a loopback listener: %v", rtts[0])
	}
	if rtts[1] >= 0 {
		t.Errorf("a target the policy denies: %v, want no answer", rtts[1])
	}
	if n := testutil.ToFloat64(s.metrics.udpAsks.WithLabelValues("answered")); n != 1 {
		t.Errorf("answered asks: %v", n)
	}
	// An ask for the relay's windows alone: what /v1/info says of them.
	c, err := udpask.NewClient(key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := c.Ask(ctx, s.AdminAddr(), 1, time.Second, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	none, info, err := p.Wait(ctx)
	limits := ReadLimits()
	if err != nil || len(none) != 0 || info == nil || info.WindowBytes != limits.WindowBytesApprox || info.TCPWmemMaxBytes != limits.TCPWmemMaxBytes || info.Congestion == "" {
		t.Errorf("the windows: %v, %+v (%v); /v1/info's limits %+v", none, info, err, limits)
	}

	other, _ := udpask.DeriveKey(testSecret, "another-admin-token-0123")
	if acked, _ := askOnce(t, other, s.AdminAddr(), []string{ln.Addr().String()}, 300*time.Millisecond); acked {
		t.Error("an ask under another admin token was acknowledged")
	}
	if n := testutil.ToFloat64(s.metrics.udpAsks.WithLabelValues("bad")); n != 1 {
		t.Errorf("asks refused as bad: %v", n)
	}

	// The same datagram twice: the second is a replay, unanswered.
	raw, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	b, err := key.SealAsk(udpask.Ask{Nonce: udpask.Nonce{7}, At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s.AdminAddr()))
	answers := func() int {
		n := 0
		buf := make([]byte, 2048)
		for {
			raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := raw.ReadFromUDP(buf); err != nil {
				return n
			}
			n++
		}
	}
	raw.WriteToUDP(b, to)
	if n := answers(); n != 2 {
		t.Errorf("a fresh ask: %d datagrams back, want an ack and a reply", n)
	}
	raw.WriteToUDP(b, to)
	if n := answers(); n != 0 {
		t.Errorf("the same ask again: %d datagrams back, want none", n)
	}
	if n := testutil.ToFloat64(s.metrics.udpAsks.WithLabelValues("replay")); n != 1 {
		t.Errorf("asks refused as replays: %v", n)
	}
}

// admin_udp: false opens no socket.
func TestAdminUDPOff(t *testing.T) {
	off := false
	s := startAsked(t, &off)
	if s.udp != nil {
		t.Fatal("admin_udp: false, yet a UDP socket")
	}
	key, _ := udpask.DeriveKey(testSecret, s.cfg.AdminToken)
	if acked, _ := askOnce(t, key, s.AdminAddr(), []string{"127.0.0.1:9"}, 300*time.Millisecond); acked {
		t.Error("admin_udp: false, yet an ask was acknowledged")
	}
}
