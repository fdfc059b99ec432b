package linktls

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var secret = []byte("a-fleet-secret-of-32-bytes-long!")

// link handshakes a client identity (wanting name want) with a server
// identity over loopback TCP and returns both ends' results.
type dialer interface {
	Client(ctx context.Context, raw net.Conn, want string) (net.Conn, error)
}

// trustAll handshakes with its identity's certificate but checks nothing.
type trustAll struct{ id *Identity }

func (a *trustAll) Client(ctx context.Context, raw net.Conn, _ string) (net.Conn, error) {
	cfg := a.id.base()
	tc := tls.Client(raw, cfg)
	return tc, tc.HandshakeContext(ctx)
}

func link(t *testing.T, cli dialer, srv *Identity, want string) (client net.Conn, server *Conn, cerr, serr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		server, serr = srv.Server(context.Background(), c)
		if serr == nil {
			// TLS 1.3: the client is done before the server checked its
			// certificate; a read makes a rejection reach the client.
			_, _ = server.Write([]byte{'k'})
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, cerr = cli.Client(ctx, raw, want)
	if cerr == nil {
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		if _, err := client.Read(b[:]); err != nil {
			cerr = err
		}
	}
	<-done
	t.Cleanup(func() {
		if client != nil {
			client.Close()
		}
		if server != nil {
			server.Close()
		}
	})
	return client, server, cerr, serr
}

func mustNew(t *testing.T, s []byte, name, role string) *Identity {
	t.Helper()
	id, err := New(s, name, role)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSameFleetLinksAndNamesEachOther(t *testing.T) {
	r1 := mustNew(t, secret, "r1", RoleRelay)
	r2 := mustNew(t, secret, "r2", RoleRelay)
	c, s, cerr, serr := link(t, r1, r2, "r2")
	if cerr != nil || serr != nil {
		t.Fatalf("handshake: client %v, server %v", cerr, serr)
	}
	if p, ok := PeerOf(s); !ok || p != (Peer{Name: "r1", Role: RoleRelay}) {
		t.Errorf("server sees %+v %v, want relay r1", p, ok)
	}
	if p, ok := PeerOf(c); !ok || p != (Peer{Name: "r2", Role: RoleRelay}) {
		t.Errorf("client sees %+v %v, want relay r2", p, ok)
	}
	if v := c.(*Conn).ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", v)
	}
	bc, err := Binding(c)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := Binding(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(bc) != 32 || !bytes.Equal(bc, bs) {
		t.Fatalf("bindings differ: %x / %x", bc, bs)
	}
	// Another link between the same two relays has another binding.
	c2, _, cerr, serr := link(t, r1, r2, "")
	if cerr != nil || serr != nil {
		t.Fatalf("second handshake: client %v, server %v", cerr, serr)
	}
	if b2, _ := Binding(c2); bytes.Equal(b2, bc) {
		t.Fatal("two links share a binding")
	}
}

func TestTheCAIsTheSameForEverySecretHolder(t *testing.T) {
	_, a, err := fleetCA(secret)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := fleetCA(bytes.Clone(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Raw, b.Raw) {
		t.Fatal("two derivations of the fleet CA differ")
	}
	_, c, err := fleetCA([]byte("another-fleet-secret-32-bytes!!!"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.PublicKey.(ed25519.PublicKey), c.PublicKey.(ed25519.PublicKey)) {
		t.Fatal("another secret derives the same CA key")
	}
}

func TestAStrangerCannotLink(t *testing.T) {
	r1 := mustNew(t, secret, "r1", RoleRelay)
	stranger := mustNew(t, []byte("not-this-fleet-secret-32-bytes!!"), "r2", RoleRelay)
	t.Run("stranger dials a relay", func(t *testing.T) {
		// A stranger that believes any server still has no certificate
		// the relay accepts.
		careless := *stranger
		careless.roots = nil
		_, _, cerr, serr := link(t, &trustAll{&careless}, r1, "")
		if cerr == nil || serr == nil || !strings.Contains(serr.Error(), "not from this fleet") {
			t.Fatalf("client %v, server %v: want both to fail, the server on the certificate", cerr, serr)
		}
	})
	t.Run("relay dials a stranger", func(t *testing.T) {
		_, _, cerr, _ := link(t, r1, stranger, "")
		var he *HandshakeError
		if !errors.As(cerr, &he) || !strings.Contains(cerr.Error(), "not from this fleet") {
			t.Fatalf("client %v: want a HandshakeError on the certificate", cerr)
		}
	})
	t.Run("plain TCP to a TLS listener", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = c.Write([]byte("RMSH not TLS at all"))
				c.Close()
			}
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r1.Client(context.Background(), raw, ""); err == nil {
			t.Fatal("handshake with a plain listener succeeded")
		}
	})
}

func TestNamesAndRolesAreChecked(t *testing.T) {
	r1 := mustNew(t, secret, "r1", RoleRelay)
	r2 := mustNew(t, secret, "r2", RoleRelay)
	ctl := mustNew(t, secret, "relayctl", RoleClient)
	if _, _, cerr, _ := link(t, r1, r2, "r3"); cerr == nil || !strings.Contains(cerr.Error(), `expected relay "r3"`) {
		t.Errorf("dialing r3, reached r2: %v", cerr)
	}
	if _, _, cerr, serr := link(t, ctl, r1, "r1"); cerr != nil || serr != nil {
		t.Errorf("relayctl to a relay: client %v, server %v", cerr, serr)
	}
	// A relayctl certificate does not make a relay listener.
	if _, _, cerr, _ := link(t, r1, ctl, ""); cerr == nil || !strings.Contains(cerr.Error(), "not a relay") {
		t.Errorf("relay dialing a relayctl-certified server: %v", cerr)
	}
}

func TestPlainConnHasNoBinding(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if bind, err := Binding(a); bind != nil || err != nil {
		t.Fatalf("Binding(plain) = %x, %v", bind, err)
	}
	if _, ok := PeerOf(a); ok {
		t.Fatal("PeerOf(plain) ok")
	}
}

// sizes records the size of every write on a conn.
type sizes struct {
	net.Conn
	mu sync.Mutex
	w  []int
}

func (s *sizes) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.w = append(s.w, len(p))
	s.mu.Unlock()
	return s.Conn.Write(p)
}

// The handshake goes out in pieces below any MSS (so the kernel's window
// estimate is taken from data, not from a lone handshake packet), and data
// afterwards in whole writes.
func TestHandshakeWritesAreSmall(t *testing.T) {
	var cli, srv *sizes
	c, s := pair(t, func(raw net.Conn) net.Conn { cli = &sizes{Conn: raw}; return cli },
		func(raw net.Conn) net.Conn { srv = &sizes{Conn: raw}; return srv })
	cli.mu.Lock()
	hs := len(cli.w)
	cli.mu.Unlock()
	got := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(s, make([]byte, 64<<10))
		got <- err
	}()
	if _, err := c.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*sizes{"client": cli, "server": srv} {
		s.mu.Lock()
		total := 0
		n := len(s.w)
		if name == "client" {
			n = hs
		}
		for _, w := range s.w[:n] {
			total += w
			if w > handshakeSegmentBytes {
				t.Errorf("%s wrote %d bytes at once during the handshake", name, w)
			}
		}
		s.mu.Unlock()
		if total < 1000 {
			t.Errorf("%s's handshake was %d bytes: the test no longer covers a flight over one MSS", name, total)
		}
	}
	cli.mu.Lock()
	defer cli.mu.Unlock()
	if big := slices.Max(cli.w[hs:]); big <= handshakeSegmentBytes {
		t.Errorf("data after the handshake still written in pieces (largest write %d)", big)
	}
}

// The admin API's HTTPS handshake goes out in small pieces too, both
// ways, and its data in records as large as each write.
func TestHTTPSHandshakeWritesAreSmall(t *testing.T) {
	srvID, cliID := mustNew(t, secret, "r1", RoleRelay), mustNew(t, secret, "relayctl", RoleClient)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv := make(chan *sizes, 1)
	srvHS := make(chan int, 1) // the server's writes in its handshake
	errs := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		s := &sizes{Conn: raw}
		srv <- s
		tc, err := HTTPSServer(ctx, s, srvID.AdminServerConfig())
		s.mu.Lock()
		srvHS <- len(s.w)
		s.mu.Unlock()
		if err == nil {
			// Data: one 64 KiB write, which dynamic record sizing would
			// have cut into MSS-sized records.
			_, err = tc.Write(make([]byte, 64<<10))
		}
		errs <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cli := &sizes{Conn: raw}
	tc, err := HTTPSClient(ctx, cli, cliID.AdminClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	cli.mu.Lock()
	hs := len(cli.w)
	cli.mu.Unlock()
	if _, err := io.ReadFull(tc, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write([]byte("GET / HTTP/1.1\r\n\r\n" + strings.Repeat("x", 4000))); err != nil {
		t.Fatal(err)
	}
	s, shs := <-srv, <-srvHS
	s.mu.Lock()
	defer s.mu.Unlock()
	cli.mu.Lock()
	defer cli.mu.Unlock()
	if slices.Max(cli.w[:hs]) > handshakeSegmentBytes || slices.Max(s.w[:shs]) > handshakeSegmentBytes {
		t.Errorf("a handshake write over %d bytes: client %v, server %v", handshakeSegmentBytes, cli.w[:hs], s.w[:shs])
	}
	// The server's data: 64 KiB in whole 16 KiB records (Go writes each
	// record, header and tag with it, as one write).
	for _, w := range s.w[shs:] {
		if w < 16<<10 {
			t.Errorf("the server's data went out in writes of %v bytes: want whole 16 KiB records", s.w[shs:])
			break
		}
	}
	if big := slices.Max(cli.w[hs:]); big <= handshakeSegmentBytes {
		t.Errorf("the client's data after the handshake still written in pieces (largest write %d)", big)
	}
}
