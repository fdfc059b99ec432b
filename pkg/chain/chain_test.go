package chain

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestHopNameHasNoCredentials(t *testing.T) {
	if n := (Hop{Scheme: "socks5", Addr: "h:1", User: "u", Password: "p"}).Name(); strings.Contains(n, "p@") {
		t.Errorf("Name leaks credentials: %s", n)
	}
}

// fakeHop fails when asked for a given target.
type fakeHop struct{ failFor string }

func (f fakeHop) Through(_ context.Context, _ net.Conn, addr string) error {
	if addr == f.failFor {
		return &RemoteError{Kind: KindRefused, Msg: "refused"}
	}
	return nil
}

type pipeDialer struct{}

func (pipeDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	a, _ := net.Pipe()
	return a, nil
}

func TestChainBlamesTheUnreachableHop(t *testing.T) {
	c := &Chain{
		Hops: []Hop{{Scheme: "socks5", Addr: "h1:1", Client: fakeHop{}}, {Scheme: "socks5", Addr: "h2:1", Client: fakeHop{failFor: "h3:1"}},
			{Scheme: "socks5", Addr: "h3:1", Client: fakeHop{}}},
		Base: pipeDialer{},
	}
	_, err := c.DialContext(context.Background(), "tcp", "dst:80")
	var he *HopError
	if !errors.As(err, &he) || he.Hop != 3 || he.Kind != KindRefused {
		t.Fatalf("got %v, want hop 3 refused", err)
	}
	// The destination refusing is the last hop's report, about the destination.
	c.Hops[1].Client, c.Hops[2].Client = fakeHop{}, fakeHop{failFor: "dst:80"}
	_, err = c.DialContext(context.Background(), "tcp", "dst:80")
	if !errors.As(err, &he) || he.Hop != 3 || he.Target != "dst:80" {
		t.Fatalf("got %v", err)
	}
}

func TestClassify(t *testing.T) {
	cases := map[error]Kind{
		&net.OpError{Err: syscall.ECONNREFUSED}:       KindRefused,
		&net.OpError{Err: syscall.ENETUNREACH}:        KindNetUnreachable,
		&net.DNSError{Err: "no such host"}:            KindHostUnreachable,
		context.DeadlineExceeded:                      KindTimeout,
		&DeniedError{Addr: "127.0.0.1", Reason: "lo"}: KindDenied,
		&HopAuthError{Msg: "no"}:                      KindAuth,
		errors.New("something else"):                  KindGeneral,
	}
	for err, want := range cases {
		if got := Classify(err); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
	for k := KindGeneral; k <= KindAuth; k++ {
		if got, ok := ParseKindLabel(k.Label()); !ok || got != k {
			t.Errorf("label round trip %v", k)
		}
	}
}

// routeHop records what a RouteHopDialer was asked; err fails the handshake.
type routeHop struct {
	calls *[]string // "via>target:early"
	err   error
}

func (r routeHop) Through(ctx context.Context, c net.Conn, addr string) error {
	return r.ThroughRoute(ctx, c, nil, addr, nil)
}

func (r routeHop) ThroughRoute(_ context.Context, _ net.Conn, via []Hop, addr string, early []byte) error {
	addrs := make([]string, len(via))
	for i, h := range via {
		addrs[i] = h.Addr
	}
	*r.calls = append(*r.calls, strings.Join(addrs, ",")+">"+addr+":"+string(early))
	return r.err
}

// warmOnce hands out one pipe conn for addr, then nothing.
type warmOnce struct {
	addr  string
	taken int
}

func (w *warmOnce) Take(addr string) net.Conn {
	if addr != w.addr || w.taken > 0 {
		return nil
	}
	w.taken++
	a, _ := net.Pipe()
	return a
}

type countingDialer struct{ n int }

func (d *countingDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	d.n++
	a, _ := net.Pipe()
	return a, nil
}

func TestDialEarlyRidesTheLastRouteRun(t *testing.T) {
	var calls []string
	rh := routeHop{calls: &calls}
	c := &Chain{
		Hops: []Hop{{Scheme: "socks5", Addr: "s:1", Client: fakeHop{}}, {Scheme: "relaymesh", Addr: "r1:7", Client: rh},
			{Scheme: "relaymesh", Addr: "r2:7", Client: rh}},
		Base: pipeDialer{},
	}
	conn, err := c.DialEarly(context.Background(), "dst:80", []byte("GET"))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if len(calls) != 1 || calls[0] != "r2:7>dst:80:GET" {
		t.Fatalf("route handshakes %q, want one naming r2 with the early bytes", calls)
	}
}

func TestWarmConnRetriedColdOnlyWhenSafe(t *testing.T) {
	var calls []string
	// The warm conn's peer closed it: the handshake sees EOF.
	eof := &HopAuthError{Msg: "closed without a status", Err: io.EOF}
	c := &Chain{
		Hops: []Hop{{Scheme: "relaymesh", Addr: "r1:7", Client: routeHop{calls: &calls, err: eof}}},
	}
	base := &countingDialer{}
	c.Base = base
	c.Warm = &warmOnce{addr: "r1:7"}
	if _, err := c.DialContext(context.Background(), "tcp", "dst:80"); err == nil {
		t.Fatal("want the cold attempt's error too")
	}
	if base.n != 1 || len(calls) != 2 {
		t.Fatalf("cold dials %d, handshakes %d: want one retry after the dead warm conn", base.n, len(calls))
	}
	// With early data the peer may have passed it on: no retry.
	calls, base.n = nil, 0
	c.Warm = &warmOnce{addr: "r1:7"}
	if _, err := c.DialEarly(context.Background(), "dst:80", []byte("x")); err == nil {
		t.Fatal("dead warm conn succeeded")
	}
	if base.n != 0 || len(calls) != 1 {
		t.Fatalf("cold dials %d, handshakes %d: want no retry with early data", base.n, len(calls))
	}
	// Any other failure is the chain's answer: no retry.
	calls = nil
	c.Hops[0].Client = routeHop{calls: &calls, err: &RemoteError{Kind: KindRefused, Msg: "refused"}}
	c.Warm = &warmOnce{addr: "r1:7"}
	if _, err := c.DialContext(context.Background(), "tcp", "dst:80"); Classify(err) != KindRefused || base.n != 0 {
		t.Fatalf("refusal: %v, cold dials %d", err, base.n)
	}
}

// A hop without a client is a failed dial naming the hop, not a panic in
// the connection's goroutine.
func TestHopWithoutClientFailsTheDial(t *testing.T) {
	c := &Chain{
		Hops: []Hop{{Scheme: "socks5", Addr: "h1:1", Client: fakeHop{}}, {Scheme: "socks5", Addr: "h2:1"}},
		Base: pipeDialer{},
	}
	_, err := c.DialContext(context.Background(), "tcp", "dst:80")
	var he *HopError
	if !errors.As(err, &he) || he.Hop != 2 || !strings.Contains(err.Error(), "no client") {
		t.Fatalf("got %v, want hop 2 failing for want of a client", err)
	}
}
