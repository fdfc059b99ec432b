// Package tunnel is the one copy loop of the project: it joins two conns in
// both directions, propagates half-close, closes both on error, bounds the
// drain after a half-close, enforces an idle timeout, and waits for both
// directions before it returns.
//
// When both conns are *net.TCPConn, io.Copy moves the bytes with splice(2) in
// the kernel. Idle detection must not break that, so it does not count bytes
// in user space: a read deadline wakes the copy, and the kernel's own
// TCP_INFO.tcpi_last_data_recv says whether either side saw data recently.
// A read deadline only fires while splice waits for data to arrive, before any
// byte is taken from the socket, so waking up and resuming loses nothing.
package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Options configure Pipe. Zero values disable the corresponding timeout.
type Options struct {
	// IdleTimeout closes the tunnel when no data moved in either direction for
	// this long. A transfer that keeps moving is never cut.
	IdleTimeout time.Duration
	// DrainTimeout bounds the time after one direction ended (half-close) in
	// which the other must move data: it closes when idle this long.
	DrainTimeout time.Duration
}

// Result reports what moved. AToB counts bytes read from a and written to b.
type Result struct {
	AToB, BToA int64
	// Err is the first error that ended the tunnel (nil for a clean close on
	// both sides): ErrIdle, ErrDrain, or an I/O error.
	Err error
}

var (
	ErrIdle  = errors.New("tunnel idle timeout")
	ErrDrain = errors.New("tunnel drain timeout after half-close")
)

// direction is one half of a tunnel.
type direction struct {
	src, dst net.Conn
	since    func() time.Duration // time since src last received data
	done     atomic.Bool
	n        int64
	err      error
}

// Pipe copies a→b and b→a until both directions are done, then closes both
// conns. It owns a and b from the call on.
func Pipe(a, b net.Conn, o Options) Result {
	ab := &direction{src: a, dst: b}
	ba := &direction{src: b, dst: a}
	if o.IdleTimeout > 0 || o.DrainTimeout > 0 {
		ab.since, ab.src = activity(a)
		ba.since, ba.src = activity(b)
	}
	t := &tunnel{limit: o.IdleTimeout}
	done := make(chan *direction, 2)
	go t.proxyCopy(ab, ba, done)
	go t.proxyCopy(ba, ab, done)

	first := <-done
	var firstErr error
	if first.err != nil {
		firstErr = first.err
		closeBoth(a, b)
		<-done
	} else {
		// Half-close propagated; the other direction now drains under the
		// drain timeout (if shorter than the idle timeout).
		other := ba
		if first == ba {
			other = ab
		}
		draining := o.DrainTimeout > 0 && (o.IdleTimeout == 0 || o.DrainTimeout < o.IdleTimeout)
		if draining {
			t.setLimit(other, o.DrainTimeout)
		}
		second := <-done
		firstErr = second.err
		if firstErr == ErrIdle && draining {
			firstErr = ErrDrain
		}
	}
	closeBoth(a, b)
	return Result{AToB: ab.n, BToA: ba.n, Err: firstErr}
}

type tunnel struct {
	mu    sync.Mutex // orders limit changes with deadline updates
	limit time.Duration
}

func (t *tunnel) currentLimit() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limit
}

// setLimit changes the idle limit and makes d re-evaluate it now.
func (t *tunnel) setLimit(d *direction, limit time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limit = limit
	_ = d.src.SetReadDeadline(time.Now().Add(limit))
}

// armDeadline sets src's read deadline wait from now, or clears it.
func (t *tunnel) armDeadline(d *direction, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.limit <= 0 {
		_ = d.src.SetReadDeadline(time.Time{})
		return
	}
	if wait <= 0 || wait > t.limit {
		wait = t.limit
	}
	_ = d.src.SetReadDeadline(time.Now().Add(wait))
}

// proxyCopy is named so goroutine dumps show tunnels plainly.
func (t *tunnel) proxyCopy(d, other *direction, done chan<- *direction) {
	defer func() { done <- d }()
	defer d.done.Store(true)
	t.armDeadline(d, 0)
	for {
		n, err := io.Copy(d.dst, d.src)
		d.n += n
		if err == nil {
			// Clean EOF from src: pass the half-close on.
			if cw, ok := d.dst.(interface{ CloseWrite() error }); ok {
				d.err = cw.CloseWrite()
			}
			return
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || d.since == nil {
			// Any error, including a conn closed under us (shutdown), ends
			// the tunnel; only the first direction's error is reported.
			d.err = err
			return
		}
		limit := t.currentLimit()
		if limit <= 0 {
			t.armDeadline(d, 0)
			continue
		}
		// Woken by the deadline: was anything moving in the last limit?
		quiet := d.since()
		if !other.done.Load() {
			quiet = min(quiet, other.since())
		}
		if quiet >= limit {
			d.err = ErrIdle
			return
		}
		t.armDeadline(d, limit-quiet)
	}
}

func closeBoth(a, b net.Conn) {
	a.Close()
	b.Close()
}

// activity returns a function telling how long ago c last received data, and
// the conn to read from (c itself for TCP; a timestamping wrapper otherwise,
// which costs nothing since only TCP↔TCP can splice anyway).
func activity(c net.Conn) (func() time.Duration, net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			return func() time.Duration { return lastRecv(rc) }, c
		}
	}
	s := &stamped{Conn: c}
	s.last.Store(time.Now().UnixNano())
	return func() time.Duration { return time.Duration(time.Now().UnixNano() - s.last.Load()) }, s
}

// lastRecv reads tcpi_last_data_recv (milliseconds) from the kernel.
func lastRecv(rc interface {
	Control(func(fd uintptr)) error
}) time.Duration {
	var ms uint32
	ok := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			ms, ok = info.Last_data_recv, true
		}
	})
	if !ok {
		return 0 // unknown: assume active rather than cut a live tunnel
	}
	return time.Duration(ms) * time.Millisecond
}

// stamped records when data was last read from a non-TCP conn.
type stamped struct {
	net.Conn
	last atomic.Int64 // unix ns
}

func (s *stamped) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if n > 0 {
		s.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func (s *stamped) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
