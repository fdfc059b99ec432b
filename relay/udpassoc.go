package relay

import (
	"errors"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/route"
)

// A UDP association (SOCKS5 UDP ASSOCIATE, RFC 1928 §7) lives on two
// relays: the entry, which holds the client's control connection and a UDP
// socket for its datagrams, and the exit, which sends them to their
// destinations from a UDP socket of its own. Between them (a chain) the
// datagrams travel as frames on one relay link (route.Datagram); without a
// chain the entry is the exit. udp.go is the entry, udpexit.go the exit;
// this file is what both hold: the association's life and its queues.

// Association sides, the metrics' side label: entry faces the SOCKS5
// client, exit the destinations.
const (
	sideEntry = "entry"
	sideExit  = "exit"
)

// Why an association ended, the metrics' reason label.
const (
	endClientClosed = "client_closed" // the client closed its control connection
	endIdle         = "idle_timeout"  // no datagram either way for limits.udp_idle_timeout
	endLinkClosed   = "link_closed"   // the other relay closed the association's link
	endLinkError    = "link_error"    // the link failed, or carried a malformed frame
	endChainFailed  = "chain_failed"  // the entry could not reach the exit
	endShutdown     = "shutdown"      // the relay shut down
)

// association is one UDP association's life on this relay: it ends once,
// for the first reason, closing everything it holds so that every
// goroutine working for it returns; its owner waits for them.
type association struct {
	s    *Server
	log  *zap.Logger
	side string
	// lastNs is when a datagram last passed either way (UnixNano).
	lastNs atomic.Int64
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	reason string
	held   []io.Closer
	start  time.Time
}

func (s *Server) newAssociation(log *zap.Logger, side string) *association {
	a := &association{s: s, log: log, side: side, done: make(chan struct{}), start: time.Now()}
	a.touch()
	s.metrics.udpActive.WithLabelValues(side).Inc()
	s.metrics.udpOpened.WithLabelValues(side).Inc()
	return a
}

// hold makes c close when the association ends (at once if it has).
func (a *association) hold(c io.Closer) {
	a.mu.Lock()
	if a.reason == "" {
		a.held = append(a.held, c)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	c.Close()
}

// end ends the association for reason; later calls change nothing.
func (a *association) end(reason string) {
	a.mu.Lock()
	if a.reason != "" {
		a.mu.Unlock()
		return
	}
	a.reason = reason
	held := a.held
	a.held = nil
	a.mu.Unlock()
	close(a.done)
	for _, c := range held {
		c.Close()
	}
}

// goRun runs f for the association; finish waits for every such f.
func (a *association) goRun(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.recoverPanic()
		f()
	}()
}

// recoverPanic keeps a panic in one association from killing the
// process: it ends the association instead.
func (a *association) recoverPanic() {
	if r := recover(); r != nil {
		a.s.metrics.panics.Inc()
		a.log.Error("panic in UDP association", zap.Any("panic", r), zap.Stack("stack"))
		a.end(endLinkError)
	}
}

// finish waits for the association's goroutines once it has ended, and
// accounts for it.
func (a *association) finish() {
	<-a.done
	a.wg.Wait()
	a.s.metrics.udpActive.WithLabelValues(a.side).Dec()
	a.s.metrics.udpClosed.WithLabelValues(a.side, a.reason).Inc()
	a.log.Debug("udp association closed", zap.String("side", a.side), zap.String("result", a.reason),
		zap.Duration("duration", time.Since(a.start)))
}

func (a *association) touch() { a.lastNs.Store(time.Now().UnixNano()) }

// watchIdle ends the association once no datagram has passed either way
// for timeout.
func (a *association) watchIdle(timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-a.done:
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, a.lastNs.Load()))
		if idle >= timeout {
			a.end(endIdle)
			return
		}
		t.Reset(timeout - idle)
	}
}

// drop counts a datagram dropped for reason.
func (a *association) drop(side, reason string) {
	a.s.metrics.udpDrops.WithLabelValues(side, reason).Inc()
}

// denied drops a datagram to dst that err (a *chain.DeniedError, or one
// wrapping it) refuses: counted by its rule, logged at most once a second
// (a client decides how often this runs), with the relay's hop 0.
func (a *association) denied(side, dst string, err error, fields ...zap.Field) {
	a.drop(side, "denied")
	rule := "denied"
	var de *chain.DeniedError
	if errors.As(err, &de) {
		rule = de.Reason
	}
	a.s.metrics.denials.WithLabelValues(rule).Inc()
	if n, ok := a.s.refusals.allow("udp_denied"); ok {
		a.log.Warn("udp destination denied", append(fields, zap.String("side", side), zap.String("dst", dst),
			zap.String("rule", rule), zap.Int("hop", 0), zap.Int("not_logged_since_last", n))...)
	}
}

// passed counts a datagram of n payload bytes carried in direction (up:
// toward the destination) on side, and keeps the association alive.
func (a *association) passed(side, direction string, n int) {
	a.touch()
	a.s.metrics.udpDatagrams.WithLabelValues(side, direction).Inc()
	a.s.metrics.udpBytes.WithLabelValues(side, direction).Add(float64(n))
}

// minUDPBufferBytes is the frame of the largest datagram: a queue must
// hold one (limits.udp_buffer_bytes).
const minUDPBufferBytes = 2 + route.MaxFrameBytes

// udpQueue holds an association's datagrams, framed, on their way to one
// consumer (a relay link, or this relay's exit socket), bounded in bytes
// (limits.udp_buffer_bytes): a datagram that does not fit is dropped, as a
// full socket buffer would drop it, rather than wait. One goroutine takes
// what is queued in one batch (one write on a link).
type udpQueue struct {
	mu     sync.Mutex
	buf    []byte // frames, oldest first
	limit  int
	closed bool
	ready  chan struct{} // a token when buf turns non-empty or the queue closes
}

func newUDPQueue(limitBytes int) *udpQueue {
	return &udpQueue{limit: limitBytes, ready: make(chan struct{}, 1)}
}

// push queues d. full: it does not fit (or the queue is closed); err: the
// protocol cannot carry d's address.
func (q *udpQueue) push(d *route.Datagram) (full bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return true, nil
	}
	was := len(q.buf)
	b, err := route.AppendFrame(q.buf, d)
	if err != nil {
		return false, err
	}
	if len(b) > q.limit {
		q.buf = b[:was]
		return true, nil
	}
	q.buf = b
	if was == 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return false, nil
}

// take waits for queued frames and returns all of them, keeping spare (the
// batch taken before, done with) as the buffer to fill next. ok is false
// once the queue is closed.
func (q *udpQueue) take(spare []byte) (frames []byte, ok bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil, false
		}
		if len(q.buf) > 0 {
			frames, q.buf = q.buf, spare[:0]
			q.mu.Unlock()
			return frames, true
		}
		q.mu.Unlock()
		<-q.ready
	}
}

// Close wakes the consumer; nothing more is queued or taken.
func (q *udpQueue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.buf = nil
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// writeFrames writes what q holds to the link w, a batch a write, until q
// closes (nil) or a write fails.
func writeFrames(q *udpQueue, w io.Writer) error {
	var spare []byte
	for {
		frames, ok := q.take(spare)
		if !ok {
			return nil
		}
		if _, err := w.Write(frames); err != nil {
			return err
		}
		spare = frames
	}
}

// unmapped is ap with an IPv4-mapped address as IPv4: a dual-stack socket
// reports IPv4 peers mapped.
func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
