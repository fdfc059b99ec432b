package relay

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/probe"
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
	p, err := c.Ask(ctx, "r1", addr, 2, time.Second, targets, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cancel()
	select {
	case <-p.Acked():
	case <-ctx.Done():
		return false, nil
	}
	rtts, _, _, err := p.Wait(ctx)
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
	p, err := c.Ask(ctx, s.cfg.Name, s.AdminAddr(), 1, time.Second, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	none, _, info, err := p.Wait(ctx)
	limits := hostnet.ReadLimits()
	if err != nil || len(none) != 0 || info == nil || info.Limits.WindowBytesApprox != limits.WindowBytesApprox || info.Limits.TCPWmemMaxBytes != limits.TCPWmemMaxBytes || info.CongestionControl == "" {
		t.Errorf("the windows: %v, %+v (%v); /v1/info's limits %+v", none, info, err, limits)
	}
	if want := s.info(netip.Addr{}).MaxStripes; want < 2 || info == nil || info.MaxStripes != want {
		t.Errorf("max_stripes over UDP: %+v, /v1/info's %d (want it 2 or more here)", info, want)
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
	b, err := key.SealAsk(udpask.Ask{Relay: s.cfg.Name, Nonce: udpask.Nonce{7}, At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{ln.Addr().String()}})
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

// rawAsker sends datagrams to a relay's UDP port from a socket of the
// test's own and reads what comes back.
type rawAsker struct {
	t    *testing.T
	conn *net.UDPConn
	to   *net.UDPAddr
}

func newRawAsker(t *testing.T, s *Server) *rawAsker {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawAsker{t: t, conn: conn, to: net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s.AdminAddr()))}
}

// ask sends b and returns the sizes of the datagrams back, until none
// came for wait.
func (r *rawAsker) ask(b []byte, wait time.Duration) []int {
	if _, err := r.conn.WriteToUDP(b, r.to); err != nil {
		r.t.Fatal(err)
	}
	var sizes []int
	buf := make([]byte, 2*udpask.MaxDatagram)
	for {
		_ = r.conn.SetReadDeadline(time.Now().Add(wait))
		n, _, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			return sizes
		}
		sizes = append(sizes, n)
	}
}

// An ask names the relay it is for: a relay refuses one for another name
// (a copy of an ask to a fleet peer), unanswered and before it records
// the nonce, so the same nonce in an ask for this relay is still answered.
func TestUDPAskForAnotherRelayRefused(t *testing.T) {
	s := startAsked(t, nil)
	ln := acceptingListener(t)
	key, err := udpask.DeriveKey(testSecret, s.cfg.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	r := newRawAsker(t, s)
	ask := udpask.Ask{Relay: "r2", Nonce: udpask.Nonce{9}, At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{ln.Addr().String()}}
	b, err := key.SealAsk(ask)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ask(b, 500*time.Millisecond); len(got) != 0 {
		t.Fatalf("an ask for relay r2 sent to r1: %d datagrams back, want none", len(got))
	}
	if n := testutil.ToFloat64(s.metrics.udpAsks.WithLabelValues("misdirected")); n != 1 {
		t.Errorf("asks refused as misdirected: %v", n)
	}
	ask.Relay = s.cfg.Name
	if b, err = key.SealAsk(ask); err != nil {
		t.Fatal(err)
	}
	if got := r.ask(b, 500*time.Millisecond); len(got) != 2 {
		t.Errorf("the same nonce in an ask for r1: %d datagrams back, want an ack and a reply", len(got))
	}
}

// A relay never sends more than it was sent: for asks of every shape a
// client makes (the windows alone, one target with and without them, up
// to a full probe.MaxTargets), the acknowledgement and the reply together,
// with the headers of the one datagram more, are no larger than the ask.
func TestUDPAnswersNoLargerThanTheAsk(t *testing.T) {
	s := startAsked(t, nil)
	ln := acceptingListener(t)
	key, err := udpask.DeriveKey(testSecret, s.cfg.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	r := newRawAsker(t, s)
	for i, c := range []struct {
		targets int
		flags   byte
	}{{0, udpask.FlagInfo}, {1, 0}, {1, udpask.FlagInfo}, {4, 0}, {probe.MaxTargets, 0}} {
		targets := make([]string, c.targets)
		for j := range targets {
			targets[j] = ln.Addr().String()
		}
		b, err := key.SealAsk(udpask.Ask{Relay: s.cfg.Name, Nonce: udpask.Nonce{byte(i + 1), 0xa5}, At: time.Now(),
			Handshakes: 1, TimeoutMs: 1000, Flags: c.flags, Targets: targets})
		if err != nil {
			t.Fatal(err)
		}
		got := r.ask(b, time.Second)
		if len(got) != 2 {
			t.Fatalf("%d targets, flags %d: %d datagrams back, want an ack and a reply", c.targets, c.flags, len(got))
		}
		sent := got[0] + got[1] + udpask.DatagramHeaderBytes
		t.Logf("%d targets, flags %d: ask %d bytes, answers %d + %d and %d of headers: %.2f of the ask", c.targets, c.flags, len(b), got[0], got[1], udpask.DatagramHeaderBytes, float64(sent)/float64(len(b)))
		if sent > len(b) {
			t.Errorf("%d targets, flags %d: the relay sent %d bytes (%d + %d, and a datagram's headers) for an ask of %d", c.targets, c.flags, sent, got[0], got[1], len(b))
		}
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
