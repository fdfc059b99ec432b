package pool

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server accepts on loopback and keeps every conn, so tests can see what
// the pool opened and closed.
type server struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	accepted atomic.Int32
	closed   atomic.Int32 // conns the pool side closed (EOF seen)
}

func newServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() {
				_, _ = io.Copy(io.Discard, c)
				s.closed.Add(1)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func newPool(t *testing.T, p *Pool) (*Pool, *sync.Map) {
	t.Helper()
	var d net.Dialer
	p.Dial = d.DialContext
	events := &sync.Map{}
	p.Observe = func(ev string) {
		v, _ := events.LoadOrStore(ev, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	t.Cleanup(p.Close)
	return p, events
}

func count(events *sync.Map, ev string) int32 {
	v, ok := events.Load(ev)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTakeMissThenWarmHit(t *testing.T) {
	srv := newServer(t)
	p, events := newPool(t, &Pool{})
	if c := p.Take(srv.addr()); c != nil {
		t.Fatal("empty pool handed out a connection")
	}
	if count(events, EventMiss) != 1 {
		t.Fatalf("miss not counted")
	}
	waitFor(t, "one warm conn after a miss", func() bool { return p.Idle(srv.addr()) == 1 })
	c := p.Take(srv.addr())
	if c == nil {
		t.Fatal("warm pool handed out nothing")
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("pooled conn is %T, want *net.TCPConn (splice needs it)", c)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if count(events, EventHit) != 1 {
		t.Fatal("hit not counted")
	}
}

func TestBrokenConnIsNeverHandedOut(t *testing.T) {
	srv := newServer(t)
	p, events := newPool(t, &Pool{})
	p.Warm(srv.addr())
	waitFor(t, "warm conn", func() bool { return p.Idle(srv.addr()) == 1 })
	// The peer closes the idle conn (as a relay past its header wait does).
	srv.mu.Lock()
	for _, c := range srv.conns {
		c.Close()
	}
	srv.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // let the FIN arrive
	if c := p.Take(srv.addr()); c != nil {
		c.Close()
		t.Fatal("a conn the peer had closed was handed out")
	}
	if count(events, EventBroken) != 1 {
		t.Fatalf("broken = %d, want 1", count(events, EventBroken))
	}
}

func TestIdleConnsExpire(t *testing.T) {
	srv := newServer(t)
	p, events := newPool(t, &Pool{IdleTimeout: 150 * time.Millisecond, UseWindow: 50 * time.Millisecond})
	p.Warm(srv.addr())
	waitFor(t, "warm conn", func() bool { return p.Idle(srv.addr()) == 1 })
	// Unused past UseWindow: the expired conn is closed and not replaced.
	waitFor(t, "expiry", func() bool { return count(events, EventExpired) >= 1 && p.Idle(srv.addr()) == 0 })
	waitFor(t, "peer sees the close", func() bool { return srv.closed.Load() == 1 })
	time.Sleep(200 * time.Millisecond)
	if n := srv.accepted.Load(); n != 1 {
		t.Fatalf("pool dialed %d conns to an unused peer, want 1", n)
	}
}

func TestPoolGrowsWithDemandUpToMaxIdle(t *testing.T) {
	srv := newServer(t)
	p, _ := newPool(t, &Pool{MaxIdle: 3})
	for range 6 {
		if c := p.Take(srv.addr()); c != nil {
			c.Close()
		}
	}
	waitFor(t, "pool at MaxIdle", func() bool { return p.Idle(srv.addr()) == 3 })
	time.Sleep(100 * time.Millisecond)
	if n := p.Idle(srv.addr()); n != 3 {
		t.Fatalf("idle = %d, want MaxIdle 3", n)
	}
}

func TestDialErrorsAreCountedNotRetriedInALoop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from now on
	p, events := newPool(t, &Pool{})
	if c := p.Take(addr); c != nil {
		t.Fatal("conn to a closed port")
	}
	waitFor(t, "dial error", func() bool { return count(events, EventDialError) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := count(events, EventDialError); n != 1 {
		t.Fatalf("%d refill dials to a dead peer after one Take, want 1", n)
	}
}

func TestCloseClosesIdleConns(t *testing.T) {
	srv := newServer(t)
	p, _ := newPool(t, &Pool{MaxIdle: 2})
	p.Take(srv.addr())
	p.Take(srv.addr())
	waitFor(t, "two warm conns", func() bool { return p.Idle(srv.addr()) == 2 })
	p.Close()
	waitFor(t, "peer sees both closed", func() bool { return srv.closed.Load() == 2 })
	if c := p.Take(srv.addr()); c != nil {
		t.Fatal("closed pool handed out a conn")
	}
}

func TestTargetFollowsRecentUse(t *testing.T) {
	base := time.Unix(1000, 0)
	var p peer
	if n := p.target(base, time.Minute, 4); n != 0 {
		t.Fatalf("unused peer target %d, want 0", n)
	}
	for range 3 {
		p.recordUse(base)
	}
	if n := p.target(base, time.Minute, 4); n != 3 {
		t.Fatalf("3 uses this second: target %d, want 3", n)
	}
	if n := p.target(base.Add(time.Second), time.Minute, 4); n != 3 {
		t.Fatalf("3 uses last second: target %d, want 3", n)
	}
	if n := p.target(base.Add(3*time.Second), time.Minute, 4); n != 1 {
		t.Fatalf("idle for 3 s but in use window: target %d, want 1", n)
	}
	if n := p.target(base.Add(2*time.Minute), time.Minute, 4); n != 0 {
		t.Fatalf("unused past the window: target %d, want 0", n)
	}
	for range 10 {
		p.recordUse(base.Add(5 * time.Minute))
	}
	if n := p.target(base.Add(5*time.Minute), time.Minute, 4); n != 4 {
		t.Fatalf("10 uses: target %d, want MaxIdle 4", n)
	}
}

// fakeClock is a Pool's clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A warm connection is replaced before it expires: a peer used less often
// than the idle timeout still finds a warm connection, never a cold dial.
func TestIdleConnsAreRenewedBeforeTheyExpire(t *testing.T) {
	srv := newServer(t)
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	p, events := newPool(t, &Pool{IdleTimeout: 30 * time.Second, now: clock.now})
	p.Warm(srv.addr())
	waitFor(t, "warm conn", func() bool { return p.Idle(srv.addr()) == 1 })

	clock.advance(25 * time.Second) // due for renewal, not expired
	p.sweep()
	waitFor(t, "a replacement dialed before the expiry", func() bool { return srv.accepted.Load() == 2 && p.Idle(srv.addr()) == 2 })
	p.sweep()
	waitFor(t, "the replaced conn closed", func() bool { return srv.closed.Load() == 1 && p.Idle(srv.addr()) == 1 })

	clock.advance(6 * time.Second) // past the first conn's expiry
	c := p.Take(srv.addr())
	if c == nil {
		t.Fatal("no warm conn once the first expired: the tunnel dials cold")
	}
	c.Close()
	if n := count(events, EventMiss); n != 0 {
		t.Errorf("%d misses", n)
	}
}
