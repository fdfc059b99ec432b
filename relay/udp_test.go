package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

// The queue holds at most its bound in frames: a datagram that does not
// fit is refused (the caller drops and counts it), and what is queued is
// taken whole, in order.
func TestUDPQueueBound(t *testing.T) {
	q := newUDPQueue(minUDPBufferBytes)
	d := route.Datagram{IP: netip.MustParseAddr("192.0.2.1"), Port: 53, Payload: make([]byte, 30000)}
	for i, want := range []bool{false, false, true} { // 2 × 30,009 fit in 65,537; a third does not
		if full, err := q.push(&d); err != nil || full != want {
			t.Fatalf("push %d: full %v, %v; want %v", i, full, err, want)
		}
	}
	frames, ok := q.take(nil)
	if !ok {
		t.Fatal("take: closed")
	}
	for i := range 2 {
		var got route.Datagram
		var err error
		if got, frames, err = route.SplitFrame(frames); err != nil || len(got.Payload) != 30000 {
			t.Fatalf("frame %d: %d bytes, %v", i, len(got.Payload), err)
		}
	}
	if len(frames) != 0 {
		t.Fatalf("%d bytes more than was queued", len(frames))
	}
	if _, err := q.push(&route.Datagram{Host: "bad host", Port: 53}); err == nil {
		t.Fatal("an address the protocol cannot carry was queued")
	}
	done := make(chan bool)
	go func() { _, ok := q.take(nil); done <- ok }()
	q.Close()
	if <-done {
		t.Fatal("take after Close returned frames")
	}
	if full, _ := q.push(&d); !full {
		t.Fatal("a closed queue took a datagram")
	}
}

// Associations are bounded in all and per client address; loopback, where
// every application of the host shares one address, is exempt from the
// latter; a released one frees its place.
func TestUDPAssociationLimits(t *testing.T) {
	var u udpAssociations
	a, b, lo := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("127.0.0.1")
	for range 2 {
		if _, ok := u.admitEntry(a, 5, 2); !ok {
			t.Fatal("a: refused under its limit")
		}
	}
	if rule, ok := u.admitEntry(a, 5, 2); ok || rule != "udp_max_per_source" {
		t.Fatalf("a's third: %q %v, want udp_max_per_source", rule, ok)
	}
	for range 3 {
		if _, ok := u.admitEntry(lo, 5, 2); !ok {
			t.Fatal("loopback held to the per-source limit")
		}
	}
	if rule, ok := u.admitEntry(b, 5, 2); ok || rule != "udp_max_associations" {
		t.Fatalf("b over the total: %q %v", rule, ok)
	}
	u.releaseEntry(a)
	if _, ok := u.admitEntry(b, 5, 2); !ok {
		t.Fatal("b refused after a released one")
	}
	if !u.admitExit(1) || u.admitExit(1) {
		t.Fatal("exit associations: want one, then a refusal")
	}
	u.releaseExit()
	if !u.admitExit(1) {
		t.Fatal("exit association refused after a release")
	}
}

// The entry takes a client's datagrams only from the control
// connection's address; the first locks the port, and a port the client
// named as its own is held to from the start.
func TestUDPEntryAdmit(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.9")
	e := &udpEntry{ctrlIP: ip}
	if e.admit(netip.MustParseAddrPort("192.0.2.10:4000")) {
		t.Fatal("another address admitted")
	}
	if !e.admit(netip.AddrPortFrom(ip, 4000)) || e.admit(netip.AddrPortFrom(ip, 4001)) || !e.admit(netip.AddrPortFrom(ip, 4000)) {
		t.Fatal("the first source did not lock the association")
	}
	named := &udpEntry{ctrlIP: ip, wantPort: 5000}
	if named.admit(netip.AddrPortFrom(ip, 4000)) || !named.admit(netip.AddrPortFrom(ip, 5000)) {
		t.Fatal("the port the client named was not held to")
	}
}

// A chain carries UDP only through relays: its first hop's route client is
// made to send an association's header, and a chain with another kind of
// hop is refused.
func TestAssociateChain(t *testing.T) {
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "", ""
	cfg.FleetSecret = "0123456789abcdef-udp"
	s, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Chain([]string{"relaymesh://a:7000", "relaymesh://b:7000"})
	if err != nil {
		t.Fatal(err)
	}
	ach, err := associateChain(ch)
	if err != nil {
		t.Fatal(err)
	}
	if rc, ok := ach.Hops[0].Client.(route.Client); !ok || !rc.UDP {
		t.Fatalf("first hop's client %#v, want a route.Client sending an association", ach.Hops[0].Client)
	}
	if rc := ch.Hops[0].Client.(route.Client); rc.UDP {
		t.Fatal("associateChain changed the chain it was given")
	}
	mixed, err := s.Chain([]string{"relaymesh://a:7000", "socks5://b:1080"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := associateChain(mixed); err == nil || !strings.Contains(err.Error(), "socks5://b:1080") {
		t.Fatalf("a chain with a SOCKS5 hop: %v", err)
	}
}

// An association without a chain: the relay is the entry and the exit.
// A datagram goes out and its answer comes back with the SOCKS5 header
// naming its source; the control connection's close ends it, and nothing
// is left running.
func TestUDPAssociateDirect(t *testing.T) {
	s, ctrl, c, relayUDP := startUDPAssociation(t, nil)
	echo, got := startUDPEchoServer(t)
	dst := echo.LocalAddr().(*net.UDPAddr).AddrPort()
	msg := append(socks5.AppendUDPHeader(nil, socks5.Addr{IP: dst.Addr(), Port: dst.Port()}), "ping"...)
	if _, err := c.WriteToUDPAddrPort(msg, relayUDP); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	src, payload, err := socks5.ParseUDPDatagram(buf[:n])
	if err != nil || string(payload) != "ping" || src.IP != dst.Addr() || src.Port != dst.Port() || got.Load() != 1 {
		t.Fatalf("answer %q from %v: %v", payload, src, err)
	}
	ctrl.Close()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.assocs.mu.Lock()
		n := s.assocs.entry
		s.assocs.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the association outlived its control connection by 2 s")
		}
	}
}

// A REJECT rule refuses a datagram at the entry, as it refuses a
// connection there: it never leaves the relay, and the association goes
// on carrying the others.
func TestUDPRejectRule(t *testing.T) {
	refused, refusedGot := startUDPEchoServer(t)
	allowed, allowedGot := startUDPEchoServer(t)
	rp := refused.LocalAddr().(*net.UDPAddr).AddrPort()
	set, err := rules.Parse(strings.NewReader(fmt.Sprintf("DST-PORT,%d,REJECT\nMATCH,DIRECT\n", rp.Port())), "rules.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, c, relayUDP := startUDPAssociation(t, func(s *Server) {
		direct, err := s.Chain(nil)
		if err != nil {
			t.Fatal(err)
		}
		s.SetRouter(rules.NewRouter(rules.RouterConfig{Rules: set, Plan: staticRouter{direct}, Direct: direct}))
	})
	for _, dst := range []netip.AddrPort{rp, allowed.LocalAddr().(*net.UDPAddr).AddrPort()} {
		msg := append(socks5.AppendUDPHeader(nil, socks5.Addr{IP: dst.Addr(), Port: dst.Port()}), "x"...)
		if _, err := c.WriteToUDPAddrPort(msg, relayUDP); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := c.ReadFromUDPAddrPort(make([]byte, 2048)); err != nil {
		t.Fatalf("the datagram no rule refuses: %v", err)
	}
	if refusedGot.Load() != 0 || allowedGot.Load() != 1 {
		t.Fatalf("the rejected destination received %d datagrams, the other %d; want 0 and 1", refusedGot.Load(), allowedGot.Load())
	}
}

type staticRouter struct{ ch *chain.Chain }

func (r staticRouter) Route(context.Context, string) (*chain.Chain, error) { return r.ch, nil }

// startUDPEchoServer answers every datagram on loopback with itself, and
// counts them.
func startUDPEchoServer(t *testing.T) (*net.UDPConn, *atomic.Int64) {
	t.Helper()
	echo, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	var got atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			got.Add(1)
			_, _ = echo.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return echo, &got
}

// startUDPAssociation starts a relay on loopback (setup, when not nil,
// before it starts) and opens an association on it: its control
// connection, the client's UDP socket and the relay's.
func startUDPAssociation(t *testing.T, setup func(*Server)) (*Server, net.Conn, *net.UDPConn, netip.AddrPort) {
	t.Helper()
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "", ""
	cfg.Policy.AllowPrivate = true
	var setups []func(*Server)
	if setup != nil {
		setups = append(setups, setup)
	}
	s := startServer(t, cfg, setups...)
	ctrl, err := net.Dial("tcp", s.SOCKSAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = ctrl.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = ctrl.Write(socks5.MarshalGreeting(socks5.MethodNoAuth))
	if _, err := socks5.ReadMethodChoice(ctrl); err != nil {
		t.Fatal(err)
	}
	_, _ = ctrl.Write(socks5.MarshalRequest(socks5.CmdUDPAssociate, socks5.Addr{IP: netip.IPv4Unspecified()}))
	rep, bound, err := socks5.ReadReply(ctrl)
	if err != nil || rep != socks5.ReplySucceeded || bound.IP != netip.MustParseAddr("127.0.0.1") || bound.Port == 0 {
		t.Fatalf("reply %v bound %v: %v", rep, bound, err)
	}
	_ = ctrl.SetDeadline(time.Time{})
	t.Cleanup(func() { ctrl.Close() })
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, ctrl, c, netip.AddrPortFrom(bound.IP, bound.Port)
}
