package route

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// pipeDialer hands out one end of a net.Pipe per dial and serves the other
// end with relay, recording what was dialed.
type pipeDialer struct {
	dialed []string
	relay  func(c net.Conn)
}

func (d *pipeDialer) DialContext(_ context.Context, _, addr string) (net.Conn, error) {
	d.dialed = append(d.dialed, addr)
	a, b := net.Pipe()
	go func() { defer b.Close(); d.relay(b) }()
	return a, nil
}

// TestChainSendsOneHeader: consecutive relaymesh:// hops are ONE header to
// the first relay naming the others, and statuses map to the right hop.
func TestChainSendsOneHeader(t *testing.T) {
	rc := Client{Secret: key}
	hops := []chain.Hop{{Scheme: "relaymesh", Addr: "a:7000", Client: rc}, {Scheme: "relaymesh", Addr: "b:7000", Client: rc},
		{Scheme: "relaymesh", Addr: "c:7000", Client: rc}}
	for _, tc := range []struct {
		name     string
		resp     *Response // nil: close without a response
		wantHop  int
		wantKind chain.Kind
	}{
		{"ok", &Response{Status: StatusOK}, 0, 0},
		{"destination refused at the last relay", &Response{Status: StatusRefused, Hop: 2}, 3, chain.KindRefused},
		{"first relay cannot reach the second", &Response{Status: StatusRefused, Hop: 1}, 2, chain.KindRefused},
		{"denied by the first relay", &Response{Status: StatusDenied, Hop: 0, Reason: "loopback"}, 1, chain.KindDenied},
		{"out-of-range hop is clamped", &Response{Status: StatusGeneral, Hop: 200}, 3, chain.KindGeneral},
		{"first relay refuses our header", nil, 1, chain.KindAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *Request
			d := &pipeDialer{relay: func(c net.Conn) {
				req, err := ReadRequest(c, key, nil)
				if err != nil {
					return
				}
				got = req
				if tc.resp == nil {
					return
				}
				b, _ := tc.resp.Marshal(key, req.Nonce)
				_, _ = c.Write(b)
			}}
			ch := &chain.Chain{Hops: hops, Base: d}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := ch.DialContext(ctx, "tcp", "example.com:443")
			if !slices.Equal(d.dialed, []string{"a:7000"}) {
				t.Fatalf("dialed %v, want only the first relay", d.dialed)
			}
			if got == nil || !slices.Equal(got.Hops, []string{"b:7000", "c:7000"}) || got.Dst != "example.com:443" {
				t.Fatalf("header = %+v, want hops [b c] and the destination", got)
			}
			if tc.wantHop == 0 {
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
				return
			}
			var he *chain.HopError
			if !errors.As(err, &he) || he.Hop != tc.wantHop || he.HopName != hops[tc.wantHop-1].Name() || chain.Classify(err) != tc.wantKind {
				t.Fatalf("err = %v (%+v), want hop %d kind %v", err, he, tc.wantHop, tc.wantKind)
			}
		})
	}
}

// TestChainMixedHops: a socks5 hop after a relaymesh run is that run's target.
func TestChainMixedHops(t *testing.T) {
	rc := Client{Secret: key}
	hops := []chain.Hop{{Scheme: "relaymesh", Addr: "a:7000", Client: rc}, {Scheme: "relaymesh", Addr: "b:7000", Client: rc},
		{Scheme: "socks5", Addr: "s:1080", Client: failingHop{}}}
	var got *Request
	d := &pipeDialer{relay: func(c net.Conn) {
		req, err := ReadRequest(c, key, nil)
		if err != nil {
			return
		}
		got = req
		b, _ := (&Response{Status: StatusOK}).Marshal(key, req.Nonce)
		_, _ = c.Write(b)
		// The socks5 hop's greeting arrives next; close to end the test.
	}}
	ch := &chain.Chain{Hops: hops, Base: d}
	_, err := ch.DialContext(context.Background(), "tcp", "example.com:443")
	if got == nil || !slices.Equal(got.Hops, []string{"b:7000"}) || got.Dst != "s:1080" {
		t.Fatalf("header = %+v, want hops [b] and destination s:1080", got)
	}
	var he *chain.HopError
	if !errors.As(err, &he) || he.Hop != 3 {
		t.Fatalf("err = %v, want hop 3", err)
	}
}

type failingHop struct{}

func (failingHop) Through(context.Context, net.Conn, string) error {
	return &chain.RemoteError{Kind: chain.KindGeneral, Msg: "test hop"}
}
