package relay

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/proxy"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// stripedRelay is a relay listener on plain links, keyed by testSecret,
// whose striped streams share budgetBytes.
func stripedRelay(t *testing.T, budgetBytes int64) *Server {
	t.Helper()
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "", "", ""
	cfg.Relay = "127.0.0.1:0"
	cfg.FleetSecret = testSecret
	cfg.Transport = TransportPlain
	cfg.Policy.AllowPrivate = true
	cfg.Limits.MaxStripes = 2
	cfg.Limits.StripeReorderBytes = budgetBytes
	return startServer(t, cfg)
}

// openStriped asks relay for dst over a segment striped across two links,
// as a relay before it would: the header on one, a join on the other. It
// returns the relay's answer and, when it is OK, the stream.
func openStriped(t *testing.T, relay, dst string) (route.Response, *stripe.Conn) {
	t.Helper()
	key := []byte(testSecret)
	req, err := route.NewRequest(nil, dst, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req.InStripes = 2
	hdr, err := req.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	j, err := route.NewJoin(req.Nonce, 1, 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	join, err := j.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	links := make([]net.Conn, 2)
	for i, b := range [][]byte{hdr, join} {
		if links[i], err = net.Dial("tcp", relay); err != nil {
			t.Fatal(err)
		}
		if _, err := links[i].Write(b); err != nil {
			t.Fatal(err)
		}
	}
	_ = links[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := route.ReadResponse(links[0], key, req.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != route.StatusOK {
		for _, l := range links {
			l.Close()
		}
		return *resp, nil
	}
	_ = links[0].SetReadDeadline(time.Time{})
	sc, err := stripe.New(links, 0)
	if err != nil {
		t.Fatal(err)
	}
	return *resp, sc
}

// stripedEcho is a striped relay (the default budget) and a striped
// segment through it to an echo server, one round trip made.
func stripedEcho(t *testing.T) (*Server, *stripe.Conn) {
	t.Helper()
	s := stripedRelay(t, DefaultStripeReorderBytes)
	resp, sc := openStriped(t, s.RelayAddr(), echoServer(t))
	if sc == nil {
		t.Fatalf("striped segment: status %v %q, want OK", resp.Status, resp.Reason)
	}
	roundTrip(t, "striped segment", sc)
	return s, sc
}

// The relay's striped streams share limits.stripe_reorder_bytes: with room
// for one stream, a second segment is refused at assembly with a reason
// that names the limit, and counted, while the first holds its share; once
// the first ends, its share is free and a segment is taken again.
func TestStripeBudgetRefusesBeyondIt(t *testing.T) {
	one := stripe.HeldBytes(2, 0)
	s := stripedRelay(t, one+one/2)
	dst := echoServer(t)

	resp, first := openStriped(t, s.RelayAddr(), dst)
	if first == nil {
		t.Fatalf("first striped segment: status %v %q, want OK", resp.Status, resp.Reason)
	}
	roundTrip(t, "first striped segment", first)
	if got := s.stripeBudget.UsedBytes(); got != one {
		t.Fatalf("budget holds %d bytes with one stream open, want %d", got, one)
	}

	resp, second := openStriped(t, s.RelayAddr(), dst)
	if second != nil {
		second.Close()
		t.Fatal("second striped segment taken beyond the budget")
	}
	if resp.Status == route.StatusOK || !strings.Contains(resp.Reason, "limits.stripe_reorder_bytes") {
		t.Fatalf("second striped segment: status %v %q, want a failure naming limits.stripe_reorder_bytes", resp.Status, resp.Reason)
	}
	if n := testutil.ToFloat64(s.metrics.stripeBudgetRefusals.WithLabelValues(stripeIn)); n != 1 {
		t.Fatalf("refusals counted: %v, want 1", n)
	}
	roundTrip(t, "first striped segment, after the refusal", first)

	// The first ends: the relay's stream closes and gives its share back.
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.stripeBudget.UsedBytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("budget still holds %d bytes after the only stream ended", s.stripeBudget.UsedBytes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, third := openStriped(t, s.RelayAddr(), dst)
	if third == nil {
		t.Fatalf("striped segment after the first ended: status %v %q, want OK", resp.Status, resp.Reason)
	}
	defer third.Close()
	roundTrip(t, "striped segment after the first ended", third)
}

// A striped tunnel is handed off as any other: the handlers of its header
// and of its join return while it carries bytes, its links stay tracked
// (active) until it ends, and its end gives the budget back.
func TestStripedTunnelOutlivesItsHandlers(t *testing.T) {
	s, sc := stripedEcho(t)
	var held []string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		held = relayHandlersHeld()
		if len(held) == 0 {
			break
		}
	}
	if len(held) > 0 {
		t.Fatalf("with a striped tunnel open, its handlers are still running:\n%s", strings.Join(held, "\n\n"))
	}
	if n := s.active(); n != 2 {
		t.Errorf("active conns with a striped tunnel of 2 links open: %d, want 2", n)
	}
	roundTrip(t, "striped segment after its handlers returned", sc)
	sc.Close()
	for deadline := time.Now().Add(5 * time.Second); s.active() != 0 || s.stripeBudget.UsedBytes() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after the tunnel ended: %d conns active, %d bytes reserved, want none", s.active(), s.stripeBudget.UsedBytes())
		}
	}
}

// relayHandlersHeld is the stacks of goroutines inside a relay listener's
// handler.
func relayHandlersHeld() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var held []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Server).serveRelay") || strings.Contains(g, "(*Server).serveJoin") {
			held = append(held, g)
		}
	}
	return held
}

// A striped side has no one socket: /v1/tunnels records each of its links.
func TestStripedTunnelRecordShowsEachLink(t *testing.T) {
	s, sc := stripedEcho(t)
	sc.Close()
	var recs []adminapi.TunnelRecord
	for deadline := time.Now().Add(5 * time.Second); len(recs) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no tunnel recorded 5 s after the striped tunnel closed")
		}
		recs = s.recent.newestFirst()
	}
	rec := recs[0]
	if rec.Client != nil || len(rec.ClientLinks) != 2 {
		t.Fatalf("striped side recorded as socket %+v and links %+v: want no socket and 2 links", rec.Client, rec.ClientLinks)
	}
	for i, l := range rec.ClientLinks {
		if l.SentBytes == 0 && l.ReceivedBytes == 0 {
			t.Errorf("link %d recorded %+v: want its socket's bytes", i, l)
		}
	}
	if rec.Next == nil || len(rec.NextLinks) != 0 {
		t.Errorf("the destination's side recorded as socket %v and links %v: want one socket", rec.Next, rec.NextLinks)
	}
}

// The streams a relay opens toward its next hop share the same budget: with
// room for one, a second tunnel through a striped next hop is refused
// before any link is dialed, counted on the out side, and the first keeps
// carrying bytes.
func TestStripeBudgetRefusesAnOutgoingStream(t *testing.T) {
	one := stripe.HeldBytes(2, 0)
	next := stripedRelay(t, DefaultStripeReorderBytes)
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "", ""
	cfg.FleetSecret = testSecret
	cfg.Transport = TransportPlain
	cfg.Policy.AllowPrivate = true
	cfg.Next = []string{"relaymesh://" + next.RelayAddr() + "?stripes=2"}
	cfg.Limits.MaxStripes = 2
	cfg.Limits.StripeReorderBytes = one + one/2
	s := startServer(t, cfg)
	dst := echoServer(t)
	d, err := proxy.SOCKS5("tcp", s.SOCKSAddr(), nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}

	first, err := d.Dial("tcp", dst)
	if err != nil {
		t.Fatalf("first tunnel through the striped next hop: %v", err)
	}
	defer first.Close()
	roundTrip(t, "first tunnel", first)
	if got := s.stripeBudget.UsedBytes(); got != one {
		t.Fatalf("budget holds %d bytes with one outgoing stream, want %d", got, one)
	}

	if second, err := d.Dial("tcp", dst); err == nil {
		second.Close()
		t.Fatal("second tunnel opened a striped stream beyond the budget")
	}
	if n := testutil.ToFloat64(s.metrics.stripeBudgetRefusals.WithLabelValues(stripeOut)); n != 1 {
		t.Errorf("outgoing refusals counted: %v, want 1", n)
	}
	if n := testutil.ToFloat64(next.metrics.stripedSegments.WithLabelValues("2")); n != 1 {
		t.Errorf("striped segments the next hop received: %v, want the first only", n)
	}
	roundTrip(t, "first tunnel, after the refusal", first)
}
