package tunnel

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tcpPair returns two connected TCP conns on loopback.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// setup: client <-> [a | Pipe | b] <-> server
func setup(t *testing.T, o Options) (client, server *net.TCPConn, done chan Result) {
	client, a := tcpPair(t)
	b, server := tcpPair(t)
	done = make(chan Result, 1)
	go func() { done <- Pipe(a, b, o) }()
	return client, server, done
}

func TestHalfCloseAndCounts(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: time.Minute, DrainTimeout: time.Minute})
	_, _ = client.Write([]byte("request"))
	_ = client.CloseWrite()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "request" {
		t.Fatalf("server got %q %v", got, err)
	}
	_, _ = server.Write([]byte("answer after EOF"))
	_ = server.CloseWrite()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "answer after EOF" {
		t.Fatalf("client got %q %v", got, err)
	}
	res := <-done
	if res.Err != nil || res.AToB != 7 || res.BToA != 16 {
		t.Fatalf("result %+v", res)
	}
}

func TestIdleTimeout(t *testing.T) {
	_, _, done := setup(t, Options{IdleTimeout: 300 * time.Millisecond})
	select {
	case res := <-done:
		if !errors.Is(res.Err, ErrIdle) {
			t.Fatalf("got %v, want ErrIdle", res.Err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("idle tunnel not closed")
	}
}

func TestActiveOneWayNotCut(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: 300 * time.Millisecond})
	go func() { _, _ = io.Copy(io.Discard, server) }()
	for i := 0; i < 10; i++ {
		if _, err := client.Write([]byte("tick")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case res := <-done:
		t.Fatalf("active tunnel closed: %+v", res)
	default:
	}
}

func TestDrainTimeout(t *testing.T) {
	client, _, done := setup(t, Options{IdleTimeout: time.Minute, DrainTimeout: 300 * time.Millisecond})
	_ = client.CloseWrite() // the server never answers nor closes
	select {
	case res := <-done:
		if !errors.Is(res.Err, ErrDrain) {
			t.Fatalf("got %v, want ErrDrain", res.Err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("half-closed tunnel not drained")
	}
}

func TestErrorClosesBoth(t *testing.T) {
	client, server, done := setup(t, Options{})
	_ = client.SetLinger(0)
	client.Close() // RST
	_ = server.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadAll(server); err != nil {
		t.Fatalf("server side not closed: %v", err)
	}
	<-done
}

func TestNonTCPConns(t *testing.T) {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	done := make(chan Result, 1)
	go func() { done <- Pipe(a2, b1, Options{IdleTimeout: 200 * time.Millisecond}) }()
	go func() { _, _ = a1.Write([]byte("hi")) }()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(b2, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("%q %v", buf, err)
	}
	select {
	case res := <-done:
		if !errors.Is(res.Err, ErrIdle) {
			t.Fatalf("got %v", res.Err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("idle pipe tunnel not closed")
	}
}

// A half-closed tunnel whose remaining reader stopped reading: the copy is
// stuck writing, where no read deadline fires. The drain timeout still ends
// it (it used to be held forever).
func TestDrainPeerNotReading(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: time.Minute, DrainTimeout: 300 * time.Millisecond})
	_ = client.CloseWrite() // the client is done sending...
	stuckWriters(t, server) // ...and never reads the answer
	select {
	case res := <-done:
		if !errors.Is(res.Err, ErrDrain) {
			t.Fatalf("got %v, want ErrDrain", res.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tunnel stuck writing to a peer that stopped reading was not closed")
	}
}

// stuckWriters has each conn write more than the socket buffers on both
// sides hold, so the copy that reads it ends up stuck writing to a peer
// that does not read. The test's end closes the conns and waits for the
// writers (goleak checks for them).
func stuckWriters(t *testing.T, conns ...*net.TCPConn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { _, _ = c.Write(make([]byte, 64<<20)) })
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
}

// Both peers send and neither reads: both copies are stuck writing.
func TestIdleBothStuckWriting(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: 300 * time.Millisecond})
	stuckWriters(t, client, server)
	select {
	case res := <-done:
		if !errors.Is(res.Err, ErrIdle) {
			t.Fatalf("got %v, want ErrIdle", res.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tunnel stuck writing both ways was not closed")
	}
}

// layered is a conn over a TCP conn that names it, as a TLS relay link does.
type layered struct{ net.Conn }

func (l layered) NetConn() net.Conn { return l.Conn }

// A conn layered over TCP is watched through the socket's TCP_INFO and read
// as is, so io.Copy still finds its io.WriterTo; only a conn with no socket
// under it gets the timestamping wrapper.
func TestActivityReadsLayeredConnsAsIs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := layered{c}
	if _, got := activity(l); got != net.Conn(l) {
		t.Errorf("a conn over TCP was wrapped in %T", got)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, got := activity(layered{a}); got == net.Conn(layered{a}) {
		t.Error("a conn with no socket under it was not wrapped: its idle time would be unknown")
	}
}

// A tunnel reports each socket's TCP_INFO as it ended: on a download the
// client side sent what the server side received, and both were read
// before Pipe closed them; also when a timeout ended the tunnel.
func TestResultCarriesSocketStats(t *testing.T) {
	const size = 4 << 20
	client, server, done := setup(t, Options{IdleTimeout: time.Minute, DrainTimeout: time.Minute})
	go func() {
		_, _ = server.Write(make([]byte, size))
		_ = server.CloseWrite()
	}()
	if n, err := io.Copy(io.Discard, client); err != nil || n != size {
		t.Fatalf("client read %d bytes, %v", n, err)
	}
	client.Close()
	res := <-done
	if !res.A.Valid || !res.B.Valid {
		t.Fatalf("stats not read: %+v", res)
	}
	// bytes_acked may count the FIN's sequence number too.
	if a := res.A.SentBytes; a < size || a > size+1 {
		t.Fatalf("client side sent %d bytes, want %d", a, size)
	}
	if b := res.B.ReceivedBytes; b < size || b > size+1 {
		t.Fatalf("server side received %d bytes, want %d", b, size)
	}
	if res.A.RTTMs <= 0 || res.A.PeerWindowBytes == 0 || res.B.WindowBytes == 0 {
		t.Fatalf("client side %+v, server side %+v", res.A, res.B)
	}

	_, _, done = setup(t, Options{IdleTimeout: 50 * time.Millisecond})
	if res := <-done; !errors.Is(res.Err, ErrIdle) || !res.A.Valid || !res.B.Valid {
		t.Fatalf("after an idle timeout: %+v", res)
	}
}

// The app-limited bit sits in Go's padding of TCPInfo: a socket that sent a
// little and waits for more has it set, one whose writer keeps its queue
// full does not (at least once in a few samples), and the byte before it
// holds the window scales, which proves the offset.
func TestAppLimitedBit(t *testing.T) {
	c, peer := tcpPair(t)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(peer, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	var st SocketStats
	for range 100 { // until the ACK of the five bytes arrived
		if st = Stats(c); st.SentBytes >= 6 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !st.AppLimited {
		t.Fatalf("after 5 bytes and their ACK: %+v, want app-limited", st)
	}

	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	go func() {
		buf := make([]byte, 1<<20)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	defer close(stop)
	busy := false
	for range 200 {
		time.Sleep(time.Millisecond)
		if st := Stats(c); st.Valid && !st.AppLimited {
			busy = true
			break
		}
	}
	if !busy {
		t.Errorf("a socket whose writer keeps it full was app-limited in every sample")
	}
	rc, _ := c.SyscallConn()
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Fatal(err)
		}
		if info.Options&4 /* TCPI_OPT_WSCALE */ != 0 && (*[8]byte)(unsafe.Pointer(info))[6] == 0 {
			t.Errorf("window scaling on but byte 6 (the scales) is 0: the layout is not the kernel's")
		}
	})
}

// The direction that ends last reports its error too: a client that
// half-closed cleanly, then a destination that reset, is a tunnel that
// failed, not one that closed cleanly.
func TestLastDirectionsErrorReported(t *testing.T) {
	client, server, done := setup(t, Options{IdleTimeout: time.Minute})
	if err := client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(server); err != nil {
		t.Fatal(err)
	}
	_ = server.SetLinger(0) // close with a reset
	server.Close()
	if res := <-done; res.Err == nil {
		t.Fatalf("result %+v: the reset after a clean half-close went unreported", res)
	}
}

// linked is a conn carried over several links, as a striped stream is.
type linked struct {
	net.Conn
	links []net.Conn
}

func (l linked) NetConns() []net.Conn { return l.links }

// A conn over several links (NetConns) is read link by link as the tunnel
// ends: no one socket is the conn's.
func TestResultReadsEachLink(t *testing.T) {
	a1, b1 := tcpPair(t)
	a2, b2 := tcpPair(t)
	defer b1.Close()
	defer b2.Close()
	c, up := net.Pipe()
	go func() { _, _ = io.Copy(io.Discard, up); up.Close() }()
	a := linked{Conn: c, links: []net.Conn{a1, a2}}
	other, far := tcpPair(t)
	defer far.Close()
	done := make(chan Result, 1)
	Start(a, other, Options{}, func(r Result) { done <- r })
	far.Close() // ends b→a; a's copy ends when the pipe closes
	c.Close()
	res := <-done
	if res.A.Valid || len(res.ALinks) != 2 || !res.ALinks[0].Valid || !res.ALinks[1].Valid {
		t.Fatalf("A %+v, ALinks %+v: want A invalid and both links read", res.A, res.ALinks)
	}
	if !res.B.Valid || res.BLinks != nil {
		t.Fatalf("B valid %v, BLinks %v: want B read as one socket", res.B.Valid, res.BLinks)
	}
	a1.Close()
	a2.Close()
}
