// Package tunnel is the one copy loop of the project: it joins two conns in
// both directions, propagates half-close, closes both on error, bounds the
// drain after a half-close, enforces an idle timeout, and reports what
// moved once both directions are done.
//
// When both conns are *net.TCPConn, the bytes move with splice(2) in the
// kernel, through a pipe held only while they move (splice.go). Idle detection must not break that, so it does not count bytes
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

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
	// A and B are the kernel's view of a's and b's sockets as the tunnel
	// ended (before they were closed); Valid is false for a conn not
	// over TCP.
	A, B SocketStats
	// ALinks and BLinks, for a conn carried over several links (a
	// striped stream: LinksUnder), are each link's socket, in order; its
	// A or B is then not Valid: no one socket is the conn's.
	ALinks, BLinks []SocketStats
	// Err is the first error that ended the tunnel (nil for a clean close on
	// both sides): ErrIdle, ErrDrain, or an I/O error.
	Err error
}

var (
	ErrIdle  = errors.New("tunnel idle timeout")
	ErrDrain = errors.New("tunnel drain timeout after half-close")
)

// SocketStats is one socket's TCP_INFO, what says which limit a sender
// ran into: its own congestion window, the receiver's window, or its send
// buffer.
type SocketStats struct {
	Valid     bool   `json:"-"`
	SentBytes uint64 `json:"sent_bytes"` // acknowledged by the peer
	// RetransmittedBytes is what the socket sent again (lost, or taken
	// for lost): over SentBytes, the segment's loss as this sender saw it.
	RetransmittedBytes uint64  `json:"retransmitted_bytes"`
	ReceivedBytes      uint64  `json:"received_bytes"` // from the peer
	RTTMs              float64 `json:"rtt_ms"`         // smoothed
	// MinRTTMs is the least RTT the socket saw (its path without queues);
	// RTTMs well above it means a standing queue on the path.
	MinRTTMs    float64 `json:"min_rtt_ms"`
	Retransmits uint32  `json:"retransmits"`
	// BusyMs is how long the socket had data in flight; RwndLimitedMs
	// and SndbufLimitedMs how much of that the receiver's window and the
	// send buffer held it back (the rest: congestion control).
	BusyMs          uint64 `json:"busy_ms"`
	RwndLimitedMs   uint64 `json:"rwnd_limited_ms"`
	SndbufLimitedMs uint64 `json:"sndbuf_limited_ms"`
	// PeerWindowBytes is the receive window the peer advertised last;
	// WindowBytes the one this socket advertised last.
	PeerWindowBytes uint32 `json:"peer_window_bytes"`
	WindowBytes     uint32 `json:"window_bytes"`
	// SendBufferBytes is the socket's send buffer (SO_SNDBUF, as
	// autotuning left it, capped by tcp_wmem's max): what it may hold of
	// sent-but-unacknowledged data and its overhead. The kernel counts
	// SndbufLimitedMs only while nothing unsent is queued, so a sender
	// held by its buffer can show 0 there; compare this with
	// PeerWindowBytes.
	SendBufferBytes int `json:"send_buffer_bytes"`
	// UnreadBytes is what the socket received that its owner has not read
	// yet (SIOCINQ): a relay that keeps up with its sender leaves next to
	// nothing here; one held back by what it forwards to fills its buffer,
	// and the window it advertises shrinks below this.
	UnreadBytes int `json:"unread_bytes"`
	// NotsentBytes is what the socket's owner wrote that it has not sent
	// yet (tcpi_notsent_bytes): a relay that keeps up with its onward
	// socket leaves at most a read's worth here; one that its onward
	// socket holds back (its window, its congestion window) fills its send
	// buffer with it.
	NotsentBytes    uint32 `json:"notsent_bytes"`
	DeliveryRateBps uint64 `json:"delivery_rate_bps"` // the kernel's most recent rate sample, bits/s
	// AppLimited says the most recent rate sample was taken while the
	// socket had less to send than its congestion window allowed: the
	// application, not the path, set the rate then.
	AppLimited bool `json:"app_limited"`
}

// Stats reads c's socket's TCP_INFO (through layers that offer NetConn);
// Valid is false when c is not over TCP or the socket is gone. To read one
// socket again and again, keep a StatsReader.
func Stats(c net.Conn) SocketStats { return NewStatsReader(c).Read() }

// StatsReader reads one conn's socket's TCP_INFO as Stats does, again and
// again, without allocating: the idle watch and the learnt rates read every
// tunnel's sockets every few seconds, and a relay holds thousands. The
// kernel's struct is read into a buffer from a pool, not one kept per
// reader: a tunnel has several readers, and a relay keeps thousands of
// tunnels open. Safe for concurrent use.
type StatsReader struct {
	rc syscall.RawConn // nil: not over TCP

	mu     sync.Mutex
	fn     func(fd uintptr) // r.read, made once
	info   *unix.TCPInfo    // from tcpInfoPool while a read runs
	sndbuf int
	unread int32
	ok     bool
}

// tcpInfoPool holds the buffers StatsReaders read TCP_INFO into.
var tcpInfoPool = sync.Pool{New: func() any { return new(unix.TCPInfo) }}

// NewStatsReader makes the reader of c's socket (through layers that offer
// NetConn).
func NewStatsReader(c net.Conn) *StatsReader {
	r := &StatsReader{}
	if tc, ok := TCPUnder(c); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			r.rc = rc
		}
	}
	r.fn = r.read
	return r
}

func (r *StatsReader) read(fd uintptr) {
	r.ok = readTCPInfo(fd, r.info) == nil
	if r.ok {
		r.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		r.unread = 0
		// Into a field the reader owns: unix.IoctlGetInt's result escapes.
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&r.unread)))
	}
}

// Read is the socket's TCP_INFO now; Valid false when the conn is not over
// TCP or the socket is gone.
func (r *StatsReader) Read() SocketStats {
	if r.rc == nil {
		return SocketStats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	info := r.readLocked()
	if info == nil {
		return SocketStats{}
	}
	defer tcpInfoPool.Put(info)
	return SocketStats{
		Valid: true, SentBytes: info.Bytes_acked, RetransmittedBytes: info.Bytes_retrans, ReceivedBytes: info.Bytes_received,
		RTTMs: float64(info.Rtt) / 1000, MinRTTMs: float64(info.Min_rtt) / 1000, Retransmits: info.Total_retrans,
		// The kernel counts these three in microseconds.
		BusyMs: info.Busy_time / 1000, RwndLimitedMs: info.Rwnd_limited / 1000, SndbufLimitedMs: info.Sndbuf_limited / 1000,
		PeerWindowBytes: info.Snd_wnd, WindowBytes: info.Rcv_wnd,
		DeliveryRateBps: info.Delivery_rate * 8, // bytes/s in TCP_INFO
		AppLimited:      appLimited(info),
		SendBufferBytes: r.sndbuf,
		UnreadBytes:     int(r.unread),
		NotsentBytes:    info.Notsent_bytes,
	}
}

// sinceLastRecv is how long ago the socket last received data
// (tcpi_last_data_recv); 0 when unknown: assume active rather than cut a
// live tunnel.
func (r *StatsReader) sinceLastRecv() time.Duration {
	if r.rc == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	info := r.readLocked()
	if info == nil {
		return 0
	}
	defer tcpInfoPool.Put(info)
	return time.Duration(info.Last_data_recv) * time.Millisecond
}

// readLocked reads the socket into a buffer from tcpInfoPool, which the
// caller puts back, and into r.sndbuf and r.unread; nil when the socket is
// gone. r.mu held.
func (r *StatsReader) readLocked() *unix.TCPInfo {
	info := tcpInfoPool.Get().(*unix.TCPInfo)
	// A kernel older than x/sys's struct writes less of it: what it
	// leaves must not be another socket's.
	*info = unix.TCPInfo{}
	r.info, r.ok = info, false
	err := r.rc.Control(r.fn)
	r.info = nil
	if err != nil || !r.ok {
		tcpInfoPool.Put(info)
		return nil
	}
	return info
}

// readTCPInfo reads fd's TCP_INFO into info, which the caller owns:
// unix.GetsockoptTCPInfo allocates one for every call, and the idle watch
// and the learnt rates read every tunnel's sockets every few seconds.
func readTCPInfo(fd uintptr, info *unix.TCPInfo) error {
	size := uint32(unix.SizeofTCPInfo)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(info)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// appLimited reads tcpi_delivery_rate_app_limited, a bit field x/sys's
// TCPInfo has no field for: struct tcp_info's eighth byte (after state,
// ca_state, retransmits, probes, backoff, options and the window scales),
// bit 0, which Go's layout leaves in the padding before the 4-byte
// aligned Rto. getsockopt wrote the kernel's bytes there.
func appLimited(info *unix.TCPInfo) bool {
	return (*[8]byte)(unsafe.Pointer(info))[7]&1 == 1
}

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
// conns, and returns what moved. It owns a and b from the call on. It is
// Start, waited for.
func Pipe(a, b net.Conn, o Options) Result {
	res := make(chan Result, 1)
	Start(a, b, o, func(r Result) { res <- r })
	return <-res
}

// Start copies a→b and b→a as Pipe does, in two goroutines of its own, and
// returns at once; done gets the Result in the copy that ended last. The
// idle watch is a timer, not a goroutine: a tunnel costs two goroutines.
// A server hands its tunnels off this way so that the handler, whose
// stack grew during the handshake and the dial, can return: the copies
// park on fresh, small stacks.
func Start(a, b net.Conn, o Options, done func(Result)) {
	ab := &direction{src: a, dst: b}
	ba := &direction{src: b, dst: a}
	if o.IdleTimeout > 0 || o.DrainTimeout > 0 {
		ab.since, ab.src = activity(a)
		ba.since, ba.src = activity(b)
	}
	p := &pipeState{a: a, b: b, o: o, ab: ab, ba: ba, done: done, live: []*direction{ab, ba}, limit: o.IdleTimeout, timeoutErr: ErrIdle}
	p.mu.Lock()
	p.watch()
	p.mu.Unlock()
	go p.copy(ba)
	go p.copy(ab)
}

// copy runs d until it ends; the copy that ends last ends the tunnel.
func (p *pipeState) copy(d *direction) {
	proxyCopy(d)
	if p.finished(d) {
		p.done(p.result())
	}
}

// result is the tunnel's end once both copies are done.
func (p *pipeState) result() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.end()
	p.res.AToB, p.res.BToA, p.res.Err = p.ab.n, p.ba.n, p.firstErr
	return p.res
}

// pipeState is what a tunnel's two copies and its idle watch share.
type pipeState struct {
	a, b   net.Conn
	o      Options
	ab, ba *direction
	done   func(Result)

	mu         sync.Mutex
	live       []*direction // the directions still copying
	limit      time.Duration
	timeoutErr error
	timer      *time.Timer // the idle watch; nil when off
	firstErr   error
	read       bool // res.A and res.B were read
	res        Result
}

// finished is d's copy ending: the first error ends the tunnel; a clean
// end (half-close passed on) leaves the other direction to drain under
// the drain timeout when that is the shorter. It says whether d was the
// last direction live.
func (p *pipeState) finished(d *direction) (last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live[0] == d {
		p.live = p.live[1:]
	} else {
		p.live = p.live[:1]
	}
	switch {
	case p.firstErr != nil:
		// Already ending: the rest is the fallout of closing.
	case d.err != nil:
		p.firstErr = d.err
		p.end()
	case len(p.live) == 1 && p.o.DrainTimeout > 0 && (p.o.IdleTimeout == 0 || p.o.DrainTimeout < p.o.IdleTimeout):
		p.limit, p.timeoutErr = p.o.DrainTimeout, ErrDrain
		p.watch()
	}
	return len(p.live) == 0
}

// watch (re)starts the idle watch for the current limit: a check every
// limit/8, within [minCheckEvery, maxCheckEvery]. p.mu held.
func (p *pipeState) watch() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.limit > 0 {
		p.timer = time.AfterFunc(p.checkEvery(), p.check)
	}
}

func (p *pipeState) checkEvery() time.Duration {
	return min(max(p.limit/8, minCheckEvery), maxCheckEvery)
}

// check ends the tunnel once every live direction's source has been
// quiet for the limit, and otherwise looks again a period later.
func (p *pipeState) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstErr != nil || len(p.live) == 0 || p.limit <= 0 {
		return
	}
	quiet := time.Duration(1<<63 - 1)
	for _, d := range p.live {
		quiet = min(quiet, d.since())
	}
	if quiet >= p.limit {
		p.firstErr = p.timeoutErr
		p.end()
		return
	}
	if p.timer != nil {
		p.timer.Reset(p.checkEvery())
	}
}

// end reads both sockets once, before the first close loses them, and
// closes both. p.mu held.
func (p *pipeState) end() {
	if !p.read {
		p.res.A, p.res.ALinks = StatsOf(p.a)
		p.res.B, p.res.BLinks = StatsOf(p.b)
		p.read = true
	}
	closeBoth(p.a, p.b)
}

// proxyCopy is named so goroutine dumps show tunnels plainly.
func proxyCopy(d *direction) {
	n, err := copyBytes(d.dst, d.src)
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

// copyBytes copies src to dst until EOF: between two TCP sockets in the
// kernel, holding a pipe only while bytes move (spliceCopy); otherwise as
// io.Copy does, through the conns' own ReadFrom and WriteTo.
func copyBytes(dst, src net.Conn) (int64, error) {
	dt, dok := dst.(*net.TCPConn)
	st, sok := src.(*net.TCPConn)
	if dok && sok {
		return spliceCopy(dt, st)
	}
	return io.Copy(dst, src)
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
	if r := NewStatsReader(c); r.rc != nil {
		return r.sinceLastRecv, c
	}
	s := &stamped{Conn: c}
	s.last.Store(time.Now().UnixNano())
	return func() time.Duration { return time.Duration(time.Now().UnixNano() - s.last.Load()) }, s
}

// StatsOf reads c's socket, or (nil for one) each of its links': a
// striped stream's own record of them (LinkStats), which outlives their
// sockets, where it keeps one.
func StatsOf(c net.Conn) (SocketStats, []SocketStats) {
	if m, ok := c.(interface{ LinkStats() []SocketStats }); ok {
		return SocketStats{}, m.LinkStats()
	}
	links := LinksUnder(c)
	if len(links) == 1 && links[0] == c {
		return Stats(c), nil
	}
	sts := make([]SocketStats, len(links))
	for i, l := range links {
		sts[i] = Stats(l)
	}
	return SocketStats{}, sts
}

// LinksUnder are the conns c is carried over: the links of a stream cut
// across several (one that offers NetConns, as pkg/stripe's does), else c
// itself. Each link's socket is its own TCP connection, with its own
// window and its own share of the stream's bytes.
func LinksUnder(c net.Conn) []net.Conn {
	if m, ok := c.(interface{ NetConns() []net.Conn }); ok {
		return m.NetConns()
	}
	return []net.Conn{c}
}

// TCPsUnder finds the TCP conn under each of c's links (LinksUnder, then
// TCPUnder); false unless every link has one.
func TCPsUnder(c net.Conn) ([]*net.TCPConn, bool) {
	links := LinksUnder(c)
	tcs := make([]*net.TCPConn, len(links))
	for i, l := range links {
		tc, ok := TCPUnder(l)
		if !ok {
			return nil, false
		}
		tcs[i] = tc
	}
	return tcs, true
}

// TCPUnder finds the TCP conn c is or is layered over (through NetConn,
// as TLS and a relay link's record layer offer it).
func TCPUnder(c net.Conn) (*net.TCPConn, bool) {
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

// Congestion is the congestion control c's socket sends with
// (TCP_CONGESTION), e.g. "cubic" or "bbr"; "" when c is not over TCP or
// the socket is gone.
func Congestion(c net.Conn) string {
	tc, ok := TCPUnder(c)
	if !ok {
		return ""
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return ""
	}
	var cc string
	_ = rc.Control(func(fd uintptr) {
		cc, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return cc
}
