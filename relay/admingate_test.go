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
		c, _, ok := g.admit(remoteAt(t, addr))
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

// closeCounter is a conn that counts its closes.
type closeCounter struct {
	fakeRemote
	closed *int
}

func (c closeCounter) Close() error { *c.closed++; return nil }

// With every place taken, a newcomer takes the place of the oldest
// connection that carried no authenticated request; authenticated ones
// are never closed for it, and a host over its own cap is refused still.
func TestAdminGateEvictsOldestAnonymous(t *testing.T) {
	g := newAdminGate(nil, func() {})
	g.maxTotal, g.maxHost = 3, 2
	closes := make([]int, 8)
	conn := func(i int, addr string) net.Conn {
		return closeCounter{fakeRemote: remoteAt(t, addr).(fakeRemote), closed: &closes[i]}
	}
	member, _ := g.admitEvicting(conn(0, "192.0.2.1:1"))
	g.known(member) // its request was authenticated
	if _, ok := g.admitEvicting(conn(1, "198.51.100.1:1")); !ok {
		t.Fatal("refused under the total")
	}
	if _, ok := g.admitEvicting(conn(2, "198.51.100.2:1")); !ok {
		t.Fatal("refused under the total")
	}
	// Full: a newcomer evicts the oldest anonymous one (1), not the member.
	if _, ok := g.admitEvicting(conn(3, "203.0.113.9:1")); !ok {
		t.Fatal("a newcomer refused while anonymous connections held the places")
	}
	if closes[1] != 1 || closes[0] != 0 || closes[2] != 0 {
		t.Fatalf("closes %v: want the oldest anonymous (1) closed, the member (0) kept", closes[:4])
	}
	// A host over its own cap is refused, evicting nobody.
	g.maxTotal = 10
	g.admitEvicting(conn(4, "203.0.113.9:2"))
	if _, ok := g.admitEvicting(conn(5, "203.0.113.9:3")); ok || closes[2] != 0 {
		t.Fatalf("a host's third connection admitted, or evicted someone (closes %v)", closes[:6])
	}
	// Every place authenticated: a newcomer is refused.
	g2 := newAdminGate(nil, func() {})
	g2.maxTotal = 1
	m, _ := g2.admitEvicting(conn(6, "192.0.2.1:2"))
	g2.known(m)
	if _, ok := g2.admitEvicting(conn(7, "192.0.2.3:1")); ok || closes[6] != 0 {
		t.Fatal("an authenticated connection was closed for a newcomer")
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
