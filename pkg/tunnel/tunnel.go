// Package tunnel is the one copy loop of the project: it joins two conns in
// both directions, propagates half-close, closes both on error, bounds the
// drain after a half-close, enforces an idle timeout, and waits for both
// directions before it returns.
//
// When both conns are *net.TCPConn, io.Copy moves the bytes with splice(2) in
// the kernel. Idle detection must not break that, so it does not count bytes
// in user space and sets no deadlines: a watchdog looks now and then at the
// kernel's TCP_INFO.tcpi_last_data_recv of both conns and closes the tunnel
// when neither received data for the limit. Closing, not a deadline, because
// a copy can be stuck in either half: waiting to read (nothing arrives) or
// waiting to write (the peer stopped reading and the send buffer is full;
// a read deadline never fires there, and a write deadline would lose the
// bytes already spliced into the pipe). A copy stuck writing stops reading
// its source, so the source's last_data_recv grows too: one measure covers
// both.
package tunnel

import (
	"errors"
	"io"
	"net"
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
	// which the other must move data: it closes when idle this long, also
	// when the peer that should read the rest stopped reading.
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
	n        int64
	err      error
}

// Watchdog period bounds: a tunnel is closed between limit and limit plus
// one period after it went quiet.
const (
	minCheckEvery = 10 * time.Millisecond
	maxCheckEvery = 5 * time.Second
)

// Pipe copies a→b and b→a until both directions are done, then closes both
// conns. It owns a and b from the call on.
func Pipe(a, b net.Conn, o Options) Result {
	ab := &direction{src: a, dst: b}
	ba := &direction{src: b, dst: a}
	if o.IdleTimeout > 0 || o.DrainTimeout > 0 {
		ab.since, ab.src = activity(a)
		ba.since, ba.src = activity(b)
	}
	done := make(chan *direction, 2)
	go proxyCopy(ab, done)
	go proxyCopy(ba, done)

	limit, timeoutErr := o.IdleTimeout, ErrIdle
	live := []*direction{ab, ba}
	var firstErr error
	var tick <-chan time.Time
	var ticker *time.Ticker
	watch := func() {
		if ticker != nil {
			ticker.Stop()
			ticker, tick = nil, nil
		}
		if limit > 0 {
			ticker = time.NewTicker(min(max(limit/8, minCheckEvery), maxCheckEvery))
			tick = ticker.C
		}
	}
	watch()
	for len(live) > 0 {
		select {
		case d := <-done:
			if live[0] == d {
				live = live[1:]
			} else {
				live = live[:1]
			}
			switch {
			case firstErr != nil:
				// Already ending: the rest is the fallout of closing.
			case d.err != nil:
				firstErr = d.err
				closeBoth(a, b)
			case len(live) == 1 && o.DrainTimeout > 0 && (o.IdleTimeout == 0 || o.DrainTimeout < o.IdleTimeout):
				// Half-close propagated; the other direction drains
				// under the shorter drain timeout.
				limit, timeoutErr = o.DrainTimeout, ErrDrain
				watch()
			}
		case <-tick:
			quiet := time.Duration(1<<63 - 1)
			for _, d := range live {
				quiet = min(quiet, d.since())
			}
			if quiet >= limit && firstErr == nil {
				firstErr = timeoutErr
				closeBoth(a, b)
			}
		}
	}
	if ticker != nil {
		ticker.Stop()
	}
	closeBoth(a, b)
	return Result{AToB: ab.n, BToA: ba.n, Err: firstErr}
}

// proxyCopy is named so goroutine dumps show tunnels plainly.
func proxyCopy(d *direction, done chan<- *direction) {
	defer func() { done <- d }()
	n, err := io.Copy(d.dst, d.src)
	d.n = n
	if err != nil {
		// Any error, including a conn closed under us (shutdown, the
		// watchdog), ends the tunnel; only the first is reported.
		d.err = err
		return
	}
	// Clean EOF from src: pass the half-close on.
	if cw, ok := d.dst.(interface{ CloseWrite() error }); ok {
		d.err = cw.CloseWrite()
	}
}

func closeBoth(a, b net.Conn) {
	a.Close()
	b.Close()
}

// activity returns a function telling how long ago c last received data, and
// the conn to read from. For TCP, and for a conn layered over TCP that says so
// with NetConn (a TLS relay link), the kernel's TCP_INFO tells, and c is read
// as is: a wrapper would hide the io.WriterTo and io.ReaderFrom that let
// io.Copy splice or batch. Any other conn is read through a timestamping
// wrapper.
func activity(c net.Conn) (func() time.Duration, net.Conn) {
	if tc, ok := tcpUnder(c); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			return func() time.Duration { return lastRecv(rc) }, c
		}
	}
	s := &stamped{Conn: c}
	s.last.Store(time.Now().UnixNano())
	return func() time.Duration { return time.Duration(time.Now().UnixNano() - s.last.Load()) }, s
}

// tcpUnder finds the TCP conn c is or is layered over.
func tcpUnder(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v, true
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil, false
		}
	}
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
