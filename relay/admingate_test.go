package relay

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// fakeRemote is a conn whose remote address is whatever the test says.
type fakeRemote struct {
	net.Conn
	remote net.Addr
}

func (c fakeRemote) RemoteAddr() net.Addr { return c.remote }
func (c fakeRemote) Close() error         { return nil }

func remoteAt(t *testing.T, hostPort string) net.Conn {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	return fakeRemote{remote: a}
}

// One address other than loopback holds at most maxHost connections;
// loopback only counts towards the total; a closed one gives its place
// back.
func TestAdminGateCaps(t *testing.T) {
	g := newAdminGate(nil, func() {})
	g.maxTotal, g.maxHost = 6, 2
	var held []*gatedConn
	admit := func(addr string) bool {
		c, ok := g.admit(remoteAt(t, addr))
		if ok {
			held = append(held, c)
		}
		return ok
	}
	if !admit("203.0.113.5:1000") || !admit("203.0.113.5:1001") {
		t.Fatal("a host's first two connections refused")
	}
	if admit("203.0.113.5:1002") {
		t.Fatal("a host's third connection admitted over the per-host cap of 2")
	}
	if !admit("[::ffff:198.51.100.7]:1000") || !admit("198.51.100.7:1001") || admit("198.51.100.7:1002") {
		t.Fatal("another host, IPv4-mapped or not, is not capped on its own")
	}
	if !admit("127.0.0.1:1000") || !admit("127.0.0.1:1001") {
		t.Fatal("loopback refused under the total")
	}
	if admit("127.0.0.1:1002") {
		t.Fatal("admitted over the total of 6")
	}
	held[0].Close()
	held[0].Close() // a second close gives back nothing more
	if !admit("203.0.113.5:1003") || admit("203.0.113.5:1004") || admit("127.0.0.1:1003") {
		t.Fatal("a closed connection's place is not given back exactly once")
	}
}

// A kept-alive connection that carried no authenticated request is closed
// once idle anonIdle; one that did is kept.
func TestAdminGateClosesAnonymousIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := newAdminGate(ln, func() {})
	g.anonIdle = 100 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/v1/info", func(w http.ResponseWriter, r *http.Request) { markAuthed(r.Context()); w.Write([]byte("{}\n")) })
	srv := &http.Server{Handler: mux, ConnContext: adminConnContext, ConnState: g.connState, IdleTimeout: time.Minute}
	go srv.Serve(g)
	defer srv.Close()

	request := func(path string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return c
	}
	anon, member := request("/healthz"), request("/v1/info")
	defer anon.Close()
	defer member.Close()
	_ = anon.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := anon.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an idle anonymous connection still open after 2 s (%v)", err)
	}
	_ = member.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := member.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an authenticated idle connection was closed (%v)", err)
	}
}
