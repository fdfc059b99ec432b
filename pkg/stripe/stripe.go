// Package stripe carries one byte stream over several connections (links)
// between two relays, so that a segment is not held to what one TCP
// connection moves per round trip (its receive window or its send buffer,
// or its loss bound under loss-based congestion control).
//
// Each direction cuts the stream into numbered chunks. A writer per link
// takes the next chunk whenever its link accepts more, so a link whose
// send buffer is full takes fewer: the links balance themselves. The
// receiver reads every link and hands the chunks back in order, holding at
// most a bounded window of chunks that came early.
//
// On each link, one frame per chunk: seq (u32, big endian), len (u16),
// len bytes of payload. A frame with len 0 ends the direction (the
// sender's half-close); its seq is one past the last chunk's, so it takes
// effect only once every earlier chunk is delivered.
//
// Ordering cannot deadlock: each link carries increasing seqs (one writer
// takes chunks in order), so the chunk the reader waits for is always at
// the head of some link, and its reader may always hand it over (it lies
// inside the window).
package stripe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

const (
	// MaxLinks is the most links one stream is striped over.
	MaxLinks = 8
	// ChunkBytes is the most payload a frame carries: a frame fills one
	// TLS record (16 KiB) on a TLS link.
	ChunkBytes = 16<<10 - frameHeaderBytes
	// DefaultReorderBytes bounds what a receiver holds, per direction:
	// chunks that came ahead of one still on its way, and chunks in
	// order that its reader has not taken yet.
	DefaultReorderBytes = 8 << 20

	frameHeaderBytes = 4 + 2
)

// ErrBroken: a link ended before the stream did, so bytes may be missing;
// the stream is unusable.
var ErrBroken = errors.New("stripe: a link closed before the stream ended")

// chunk is one frame's buffer: header and payload, from chunkPool.
type chunk struct {
	buf [frameHeaderBytes + ChunkBytes]byte
	n   int // payload bytes
	off int // payload bytes already read (receiver)
}

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

func getChunk() *chunk {
	c := chunkPool.Get().(*chunk)
	c.n, c.off = 0, 0
	return c
}

func (c *chunk) payload() []byte { return c.buf[frameHeaderBytes : frameHeaderBytes+c.n] }

// frame stamps c's header with seq and returns the bytes to write.
func (c *chunk) frame(seq uint32) []byte {
	binary.BigEndian.PutUint32(c.buf[0:4], seq)
	binary.BigEndian.PutUint16(c.buf[4:6], uint16(c.n))
	return c.buf[:frameHeaderBytes+c.n]
}

// Conn is one stream over its links. It is a net.Conn with CloseWrite.
// Write queues its bytes and returns; CloseWrite returns once every queued
// byte is written to a link. Close ends the stream at once. A read
// deadline bounds Read's wait for the next chunk; a write deadline bounds
// Write's wait for room in the queue (not the links' own writes).
type Conn struct {
	links []net.Conn

	// Sending side.
	wmu        sync.Mutex // serializes Write and CloseWrite
	sendq      chan sendItem
	wseq       uint32
	wclosed    bool
	writers    sync.WaitGroup
	closed     chan struct{} // closed once the stream is broken or closed
	brokenOnce sync.Once
	linksOnce  sync.Once
	// closedStats is each link's TCP_INFO as closeLinks closed it (nil
	// before): what the stream's sockets did outlives them (LinkStats).
	statsMu     sync.Mutex
	closedStats []tunnel.SocketStats
	errMu       sync.Mutex
	err         error // the first error that broke the stream

	// Deadlines: readDeadline under mu (a timer wakes Read when it
	// passes); writeExpired is closed when the write deadline passes.
	readDeadline time.Time
	readTimer    *time.Timer
	wdMu         sync.Mutex
	writeExpired chan struct{}
	writeTimer   *time.Timer

	// Receiving side: ring[seq % len(ring)] holds chunk seq while
	// next <= seq < next + len(ring).
	mu       sync.Mutex
	cond     *sync.Cond
	ring     []*chunk
	next     uint32 // seq of the chunk Read returns next
	endSeen  bool
	endSeq   uint32
	linksEOF int // links whose reader ended
	readers  sync.WaitGroup

	// reserved is the Budget share this Conn's chunks are counted
	// against (NewReserved); Close gives it back. nil: none.
	reserved *Reservation
}

type sendItem struct {
	c   *chunk
	seq uint32
}

// New stripes one stream over links, which both ends must list in the same
// order. reorderBytes bounds what this end holds out of order (0:
// DefaultReorderBytes). The Conn owns the links from the call on.
func New(links []net.Conn, reorderBytes int) (*Conn, error) {
	return newConn(links, reorderBytes, nil)
}

// NewReserved is New within a Budget: the Conn takes r (which must be
// for len(links) links) and releases it once Close has stopped its
// goroutines. On error r is still the caller's.
func NewReserved(links []net.Conn, r *Reservation) (*Conn, error) {
	if r == nil || r.links != len(links) {
		return nil, fmt.Errorf("stripe: a reservation for another link count than %d", len(links))
	}
	return newConn(links, r.reorderBytes, r)
}

func newConn(links []net.Conn, reorderBytes int, r *Reservation) (*Conn, error) {
	if len(links) < 1 || len(links) > MaxLinks {
		return nil, fmt.Errorf("stripe: %d links (1 to %d)", len(links), MaxLinks)
	}
	s := &Conn{
		links:        links,
		sendq:        make(chan sendItem, len(links)),
		closed:       make(chan struct{}),
		ring:         make([]*chunk, windowChunks(len(links), reorderBytes)),
		writeExpired: make(chan struct{}),
		reserved:     r,
	}
	for _, l := range links {
		if err := boundUnsent(l); err != nil {
			return nil, fmt.Errorf("stripe: link send queue: %w", err)
		}
	}
	s.cond = sync.NewCond(&s.mu)
	for _, l := range links {
		s.writers.Add(1)
		go s.writeLink(l)
		s.readers.Add(1)
		go s.readLink(l)
	}
	return s, nil
}

// Links is how many links the stream runs over.
func (s *Conn) Links() int { return len(s.links) }

// NetConns are the links the stream runs over, in order: what carries it,
// as NetConn is for a conn over one (a relay's hand-off and its learnt
// rates look through it to the sockets).
func (s *Conn) NetConns() []net.Conn { return s.links }

// Write queues p's bytes as chunks; it blocks while every link's writer
// is busy and the queue is full.
func (s *Conn) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wclosed {
		return 0, fmt.Errorf("stripe: write after CloseWrite: %w", net.ErrClosed)
	}
	written := 0
	for written < len(p) {
		c := getChunk()
		n := copy(c.buf[frameHeaderBytes:], p[written:])
		c.n = n
		if err := s.enqueue(c); err != nil { // c is the writers' now
			return written, err
		}
		written += n
	}
	return written, nil
}

// enqueue hands c to the writers under the next seq. s.wmu held.
func (s *Conn) enqueue(c *chunk) error {
	s.wdMu.Lock()
	expired := s.writeExpired
	s.wdMu.Unlock()
	select {
	case <-s.closed: // first: a broken stream takes nothing more
		chunkPool.Put(c)
		return s.brokenErr()
	default:
	}
	select {
	case s.sendq <- sendItem{c: c, seq: s.wseq}:
		s.wseq++
		return nil
	case <-s.closed:
		chunkPool.Put(c)
		return s.brokenErr()
	case <-expired:
		chunkPool.Put(c)
		return os.ErrDeadlineExceeded
	}
}

// CloseWrite ends this direction: the end frame follows the last chunk, and
// the call returns once the writers have written everything to the links.
func (s *Conn) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wclosed {
		return nil
	}
	s.wclosed = true
	err := s.enqueue(getChunk()) // n = 0: the end frame
	close(s.sendq)
	s.writers.Wait()
	if err != nil {
		return err
	}
	select {
	case <-s.closed:
		return s.brokenErr()
	default:
		return nil
	}
}

// writeLink is one link's writer: the next queued chunk, whenever the link
// takes more.
func (s *Conn) writeLink(l net.Conn) {
	defer s.writers.Done()
	for it := range s.sendq {
		_, err := l.Write(it.c.frame(it.seq))
		chunkPool.Put(it.c)
		if err != nil {
			s.fail(fmt.Errorf("stripe: write: %w", err))
			for it := range s.sendq { // let Write and CloseWrite return
				chunkPool.Put(it.c)
			}
			return
		}
	}
}

// readLink is one link's reader: frames in, handed to the reorder window.
func (s *Conn) readLink(l net.Conn) {
	defer s.readers.Done()
	var hdr [frameHeaderBytes]byte
	for {
		if _, err := io.ReadFull(l, hdr[:]); err != nil {
			s.linkEnded(err)
			return
		}
		seq := binary.BigEndian.Uint32(hdr[0:4])
		c := getChunk()
		c.n = int(binary.BigEndian.Uint16(hdr[4:6]))
		if c.n > ChunkBytes {
			chunkPool.Put(c)
			s.fail(fmt.Errorf("stripe: frame of %d bytes (max %d)", c.n, ChunkBytes))
			return
		}
		if _, err := io.ReadFull(l, c.payload()); err != nil {
			chunkPool.Put(c)
			s.linkEnded(noEOF(err)) // inside a frame: cut
			return
		}
		if !s.deliver(seq, c) {
			s.closeLinks()
			return
		}
	}
}

// deliver puts chunk seq in the window, waiting while it lies beyond it. An
// empty chunk is the end frame. false: the stream is broken or closed.
func (s *Conn) deliver(seq uint32, c *chunk) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq-s.next >= uint32(len(s.ring)) && s.brokenLocked() == nil {
		if seq-s.next >= 1<<31 { // behind next: already delivered
			chunkPool.Put(c)
			s.breakLocked(fmt.Errorf("stripe: chunk %d sent twice", seq))
			return false
		}
		s.cond.Wait()
	}
	if s.brokenLocked() != nil {
		chunkPool.Put(c)
		return false
	}
	if c.n == 0 {
		chunkPool.Put(c)
		if s.endSeen {
			s.breakLocked(errors.New("stripe: two end frames"))
			return false
		}
		s.endSeen, s.endSeq = true, seq
		s.cond.Broadcast()
		return true
	}
	slot := &s.ring[seq%uint32(len(s.ring))]
	if *slot != nil || s.endSeen && seq-s.next >= s.endSeq-s.next {
		chunkPool.Put(c)
		s.breakLocked(fmt.Errorf("stripe: chunk %d out of place", seq))
		return false
	}
	*slot = c
	if seq == s.next {
		s.cond.Broadcast()
	}
	return true
}

// Read returns the stream's bytes in order; io.EOF after the end frame and
// every chunk before it.
func (s *Conn) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		slot := &s.ring[s.next%uint32(len(s.ring))]
		if c := *slot; c != nil {
			n := copy(p, c.payload()[c.off:])
			c.off += n
			if c.off == c.n {
				*slot = nil
				s.next++
				chunkPool.Put(c)
				s.cond.Broadcast() // a reader may wait for room
			}
			return n, nil
		}
		if s.endSeen && s.next == s.endSeq {
			return 0, io.EOF
		}
		if err := s.brokenLocked(); err != nil {
			return 0, err
		}
		if s.linksEOF == len(s.links) {
			return 0, ErrBroken
		}
		if !s.readDeadline.IsZero() && !time.Now().Before(s.readDeadline) {
			return 0, os.ErrDeadlineExceeded
		}
		s.cond.Wait()
	}
}

// linkEnded is a link's reader stopping on err. A clean close between
// frames (io.EOF) loses nothing: the peer closes its links once its side is
// done, and the end frame may still be on its way on another link, so only
// all links closed before the end is a loss (Read). Any other error may
// have cut a frame: the stream is broken.
func (s *Conn) linkEnded(err error) {
	s.mu.Lock()
	s.linksEOF++
	// Once every chunk up to the end is delivered, nothing is owed.
	owed := !(s.endSeen && s.next == s.endSeq)
	broke := !errors.Is(err, io.EOF) && owed && s.brokenLocked() == nil
	if broke {
		s.breakLocked(fmt.Errorf("%w: %v", ErrBroken, err))
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if broke {
		s.closeLinks()
	}
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fail breaks the stream with err (the first one counts) and closes the
// links, which ends every reader and writer.
func (s *Conn) fail(err error) {
	s.mu.Lock()
	s.breakLocked(err)
	s.mu.Unlock()
	s.closeLinks()
}

// breakLocked records err (the first one counts), marks the stream
// broken and wakes whoever waits. s.mu held; the caller closes the links
// (closeLinks) once it has let go of it.
func (s *Conn) breakLocked(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.brokenOnce.Do(func() { close(s.closed) })
	s.cond.Broadcast()
}

// closeLinks closes the links once, without s.mu: closing a TLS link
// may wait for its peer, and nobody else should wait for that.
func (s *Conn) closeLinks() {
	s.linksOnce.Do(func() {
		s.statsMu.Lock()
		s.closedStats = s.readLinks()
		s.statsMu.Unlock()
		for _, l := range s.links {
			l.Close()
		}
	})
}

// LinkStats is each link's TCP_INFO in link order: read now, or as the
// links were closed once they are. A stream that broke (a link ended
// first) closes its links before its tunnel ends, and a reading of a
// closed socket is none: the tunnel's record and the loss its relay
// learns would lose every link's.
func (s *Conn) LinkStats() []tunnel.SocketStats {
	// Under statsMu, so that closeLinks cannot close the links between
	// this finding no record and reading them.
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.closedStats != nil {
		return slices.Clone(s.closedStats)
	}
	return s.readLinks()
}

// readLinks reads each link's TCP_INFO, in link order.
func (s *Conn) readLinks() []tunnel.SocketStats {
	sts := make([]tunnel.SocketStats, len(s.links))
	for i, l := range s.links {
		sts[i] = tunnel.Stats(l)
	}
	return sts
}

func (s *Conn) brokenErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		return net.ErrClosed
	}
	return s.err
}

// brokenLocked is the stream's error once it is broken or closed. s.mu held.
func (s *Conn) brokenLocked() error {
	select {
	case <-s.closed:
		return s.brokenErr()
	default:
		return nil
	}
}

// Close ends the stream in both directions at once and waits for its
// goroutines. Bytes queued and not yet written are lost: CloseWrite first
// to send them.
func (s *Conn) Close() error {
	s.errMu.Lock()
	if s.err == nil {
		s.err = net.ErrClosed
	}
	s.errMu.Unlock()
	s.mu.Lock()
	s.breakLocked(net.ErrClosed)
	if s.readTimer != nil {
		s.readTimer.Stop()
	}
	s.mu.Unlock()
	s.closeLinks()
	s.readers.Wait()
	s.wmu.Lock()
	if !s.wclosed {
		s.wclosed = true
		close(s.sendq)
	}
	s.wmu.Unlock()
	s.writers.Wait()
	s.wdMu.Lock()
	if s.writeTimer != nil {
		s.writeTimer.Stop()
	}
	s.wdMu.Unlock()
	// Every reader and writer has stopped: what the window still holds
	// goes back to the pool, and only then the budget's share, so that a
	// new Conn on it never overlaps this one's chunks.
	s.mu.Lock()
	for i, c := range s.ring {
		if c != nil {
			chunkPool.Put(c)
			s.ring[i] = nil
		}
	}
	s.mu.Unlock()
	s.reserved.Release()
	return nil
}

func (s *Conn) LocalAddr() net.Addr  { return s.links[0].LocalAddr() }
func (s *Conn) RemoteAddr() net.Addr { return s.links[0].RemoteAddr() }

// SetDeadline sets both deadlines.
func (s *Conn) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read's wait for data (the zero time: none).
func (s *Conn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readDeadline = t
	if s.readTimer != nil {
		s.readTimer.Stop()
		s.readTimer = nil
	}
	if !t.IsZero() {
		s.readTimer = time.AfterFunc(time.Until(t), func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
	}
	return nil
}

// SetWriteDeadline bounds Write's wait for room in the queue (the zero
// time: none).
func (s *Conn) SetWriteDeadline(t time.Time) error {
	s.wdMu.Lock()
	defer s.wdMu.Unlock()
	if s.writeTimer != nil {
		s.writeTimer.Stop()
		s.writeTimer = nil
	}
	expired := make(chan struct{})
	s.writeExpired = expired
	switch {
	case t.IsZero():
	case !time.Now().Before(t):
		close(expired)
	default:
		s.writeTimer = time.AfterFunc(time.Until(t), func() { close(expired) })
	}
	return nil
}
