package chain

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestParseHop(t *testing.T) {
	good := map[string]Hop{
		"socks5://1.2.3.4:1080":        {Scheme: "socks5", Addr: "1.2.3.4:1080"},
		"socks5h://u:p@h.example:1080": {Scheme: "socks5", Addr: "h.example:1080", User: "u", Password: "p"},
		"http://[::1]:3128":            {Scheme: "http", Addr: "[::1]:3128"},
	}
	for raw, want := range good {
		got, err := ParseHop(raw)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", raw, got, err)
		}
	}
	for _, raw := range []string{"ftp://h:1", "socks5://h", "socks5://:1", "http://h:1/path", "h:1"} {
		if _, err := ParseHop(raw); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
	_, err := ParseHop("gopher://u:topsecret@h:1")
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("error must not carry the password: %v", err)
	}
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
		Hops:    []Hop{{Scheme: "socks5", Addr: "h1:1"}, {Scheme: "socks5", Addr: "h2:1"}, {Scheme: "socks5", Addr: "h3:1"}},
		Clients: []HopDialer{fakeHop{}, fakeHop{failFor: "h3:1"}, fakeHop{}},
		Base:    pipeDialer{},
	}
	_, err := c.DialContext(context.Background(), "tcp", "dst:80")
	var he *HopError
	if !errors.As(err, &he) || he.Hop != 3 || he.Kind != KindRefused {
		t.Fatalf("got %v, want hop 3 refused", err)
	}
	// The destination refusing is the last hop's report, about the destination.
	c.Clients = []HopDialer{fakeHop{}, fakeHop{}, fakeHop{failFor: "dst:80"}}
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
