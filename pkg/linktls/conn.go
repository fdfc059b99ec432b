package linktls

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// Conn is a relay link: a TLS 1.3 connection that moves bulk data in
// batches. crypto/tls hands out one record (at most 16 KiB of plaintext) per
// Read and makes one socket write per record, so a tunnel over it costs two
// system calls per 16 KiB where a plain tunnel splices. Conn gathers up to
// batchBytes of plaintext per Read when the records are already here, and
// sends all the records of one Write in one socket write. Fewer, larger
// writes also mean fewer, larger packets through the stack on both ends.
// It is what Client and Server return; the tunnel uses WriteTo and ReadFrom.
//
// While a link ramps up (its first rampBytes, and again after writeIdleRestart
// without a write) Write cuts records to one TCP segment each (rampRecord):
// see rampBytes for why.
type Conn struct {
	*tls.Conn
	raw *rawConn

	// The writer's state: Write is called by one goroutine at a time; mu
	// also orders it against pushTimer's push.
	mu         sync.Mutex
	rampRecord int       // plaintext of a record that fills one segment, at most maxPlaintext
	rampLeft   int       // plaintext still to go in rampRecord-sized records
	lastWrite  time.Time // when the last Write returned

	// Segment alignment while ramping (see writeRamp). mssBytes is the
	// socket's segment size, 0 when records cannot fill one or the conn
	// is not a socket (then each Write's records start a segment).
	// segOffBytes is how far into a segment the stream's next byte falls
	// (wire bytes); it carries over writes only while held: the socket
	// is corked with a partial segment that pushTimer pushes after
	// pushAfter.
	mssBytes    int
	segOffBytes int
	held        bool
	pushTimer   *time.Timer
	pushAfter   time.Duration

	// writing counts Writes in flight, for Close.
	writing atomic.Int32
}

// rampBytes is how much of a link's plaintext goes in records of one
// segment each, from its start and after each idle spell. Why: a relay can
// decrypt, and so forward, a record only once all of it has arrived, and
// while TCP is in slow start each round trip's flight ends with a pause of
// nearly a round trip. A 16 KiB record is 11 segments, more than a first
// flight of 10 (IW10); the small records before the data (a route header's
// answer, an HTTP response's header) each take a segment of the flight too.
// A record cut by the end of a flight waits at the next relay for the next
// flight, a round trip of the segment, and each relay of a chain can lose a
// round trip so in each round: measured in the lab, a 100 KB download through four
// 12.5 ms segments arrived a round trip or two late in most runs, each
// relay holding the data it had for 12 ms, then taking the rest of the
// record from the next flight. Records of one segment end where the
// segments do, so whatever a flight carried goes on at once. By 1 MiB a
// flight is ~0.5 MB and a 16 KiB record's tail is a few per cent of it;
// from then on records are full size, which costs the least CPU per byte.
const rampBytes = 1 << 20

// pushAfter is how long a partial segment at the end of a ramp write
// waits, corked, for the next write to fill it. A relay's writes follow
// the segments arriving from its upstream, which come back to back within
// a flight: one segment's time at the upstream's rate, 0.4 ms at 30
// Mbit/s. Without the wait every upstream segment of 1448 bytes of
// plaintext becomes a full segment and a 44-byte one downstream (a record
// and the 22 bytes that did not fit, with their own record's overhead):
// twice the packets, and a congestion window counts packets, so each
// round of slow start carried half the bytes and a 10 KB answer, 7
// segments from the server, took 14 of an initial window of 10 and a
// round trip more (measured in the lab through one relay). The cost: the
// last segment of a flight leaves up to pushAfter later.
const pushAfter = time.Millisecond

// writeIdleRestart: a link that has not been written for this long ramps
// again, as TCP does after idling longer than its retransmission timeout
// (200 ms at least): an interactive tunnel's next answer starts over from
// the restart window.
const writeIdleRestart = 200 * time.Millisecond

// RecordOverheadBytes is what TLS 1.3 adds to a record's plaintext with an
// AEAD of 16-byte tags (AES-GCM, ChaCha20-Poly1305): a 5-byte header, the
// inner content type, the tag. While a link ramps up each segment carries
// one record, so this much less payload (what planner.Model's
// LinkFramingBytes models).
const RecordOverheadBytes = 5 + 1 + 16

// defaultMSSBytes is the segment size assumed when the socket does not say:
// Ethernet's 1500-byte MTU less IPv4, TCP and the timestamp option.
const defaultMSSBytes = 1448

// rampRecordFor returns the plaintext of a record that fills one segment of
// mssBytes, at most a full record.
func rampRecordFor(mssBytes int) int {
	if mssBytes <= RecordOverheadBytes+256 { // nonsense: do not shred the data
		mssBytes = defaultMSSBytes
	}
	return min(mssBytes-RecordOverheadBytes, maxPlaintext)
}

// batchBytes is the most plaintext gathered into one write: four full
// records, which fills one loopback GSO packet and is the size of a TCP
// socket's default write chunk.
const batchBytes = 64 << 10

// readAheadBytes is the most one socket read takes: a batch of records
// with their headers and tags, and the start of the next.
const readAheadBytes = batchBytes + 4<<10

var readPool = sync.Pool{New: func() any { b := make([]byte, readAheadBytes); return &b }}

var batchPool = sync.Pool{New: func() any { b := make([]byte, batchBytes); return &b }}

// errWouldBlock ends a batch: the next record is not here yet. It is a
// temporary net.Error, which crypto/tls treats as retryable: the record
// layer keeps what it has read and the next Read carries on.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "linktls: no complete record buffered" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// Write sends p's records a batch (batchBytes of plaintext) per socket
// write, records of one segment while the link ramps up (rampBytes).
func (c *Conn) Write(p []byte) (int, error) {
	c.writing.Add(1)
	defer c.writing.Add(-1)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Idle is the time between writes, not a write's own: a write that
	// waits for a slow path's window is not a pause.
	if time.Since(c.lastWrite) >= writeIdleRestart {
		c.rampLeft = rampBytes
	}
	defer func() { c.lastWrite = time.Now() }()
	if c.rampLeft > 0 && c.mssBytes > 0 {
		return c.writeRamp(p)
	}
	if c.held {
		defer c.push() // the ramp ended on the last write
	}
	return c.writeRecords(p)
}

// writeRecords writes p in records of recordBytes, a batch per socket
// write.
func (c *Conn) writeRecords(p []byte) (int, error) {
	if len(p) <= c.recordBytes() {
		n, err := c.Conn.Write(p) // one record: one write anyway
		c.sent(n)
		return n, err
	}
	n := 0
	for n < len(p) {
		c.raw.cork()
		end := min(len(p), n+batchBytes)
		var err error
		for n < end && err == nil {
			chunk := end // full records: crypto/tls cuts the batch itself
			if c.rampLeft > 0 {
				chunk = min(end, n+c.recordBytes())
			}
			var m int
			m, err = c.Conn.Write(p[n:chunk])
			n += m
			c.sent(m)
		}
		if ferr := c.raw.flush(); err == nil {
			err = ferr
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeRamp writes p while the link ramps up on a socket: in records that
// end where the socket's segments do, so that every segment goes out full
// and carries whole records (rampBytes says why whole). A write of at
// least a segment's plaintext (bulk, as a relay forwards it) leaves its
// last, partial segment corked in the kernel for the next write to fill,
// pushed after pushAfter without one; a smaller write (an answer, a
// request, the end of a response) goes out at once, with whatever was
// held.
func (c *Conn) writeRamp(p []byte) (int, error) {
	if !c.held {
		c.segOffBytes = 0 // the last write's tail went out: a fresh segment
	}
	bulk := len(p) >= c.mssBytes-RecordOverheadBytes
	if bulk && !c.held {
		if err := c.raw.holdPartial(true); err != nil {
			return 0, err
		}
		c.held = true
	}
	n := 0
	for n < len(p) && c.rampLeft > 0 {
		c.raw.cork()
		end := min(len(p), n+batchBytes)
		var err error
		for n < end && c.rampLeft > 0 && err == nil {
			size := min(end-n, c.alignedRecord(), c.rampLeft)
			var m int
			m, err = c.Conn.Write(p[n : n+size])
			n += m
			c.sent(m)
			if m > 0 {
				c.segOffBytes = (c.segOffBytes + m + RecordOverheadBytes) % c.mssBytes
			}
		}
		if ferr := c.raw.flush(); err == nil {
			err = ferr
		}
		if err != nil {
			return n, err
		}
	}
	if n < len(p) { // the ramp ended within p: full records for the rest
		c.push()
		m, err := c.writeRecords(p[n:])
		return n + m, err
	}
	switch {
	case !c.held:
	case !bulk || c.segOffBytes == 0:
		c.push()
	default:
		if c.pushTimer == nil {
			c.pushTimer = time.AfterFunc(c.pushAfter, c.pushHeld)
		} else {
			c.pushTimer.Reset(c.pushAfter)
		}
	}
	return n, nil
}

// alignedRecord is the plaintext of the next ramp record: one that ends
// at the end of the current segment, or, where too little of it is left
// for a record's overhead, at the end of the next.
func (c *Conn) alignedRecord() int {
	room := c.mssBytes - c.segOffBytes
	if room <= RecordOverheadBytes {
		room += c.mssBytes
	}
	return room - RecordOverheadBytes
}

// push sends the partial segment the socket holds, if any. c.mu held.
func (c *Conn) push() {
	if !c.held {
		return
	}
	c.held = false
	c.segOffBytes = 0
	if c.pushTimer != nil {
		c.pushTimer.Stop()
	}
	_ = c.raw.holdPartial(false) // an error here is the socket's: the next write reports it
}

// pushHeld is pushTimer's: no write came to fill the partial segment. A
// timer that fires after Close finds the socket closed (the kernel sent
// what it held before the FIN).
func (c *Conn) pushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.push()
}

// CloseWrite sends close_notify and pushes it out at once.
func (c *Conn) CloseWrite() error {
	err := c.Conn.CloseWrite()
	c.mu.Lock()
	c.push()
	c.mu.Unlock()
	return err
}

// Close closes the link. With a Write in flight it closes the socket
// without a close_notify, as crypto/tls does for its own writes: closing
// is how a tunnel ends a write stuck on a peer that stopped reading, and
// Write's batches go to the socket outside crypto/tls's Write (rawConn's
// flush), where the alert would wait for the stuck write's socket lock
// until crypto/tls's 5 s deadline for it. Close takes no lock.
func (c *Conn) Close() error {
	if c.writing.Load() > 0 {
		return c.raw.Conn.Close()
	}
	return c.Conn.Close()
}

// sent counts n bytes of plaintext written against the ramp.
func (c *Conn) sent(n int) {
	if c.rampLeft > 0 {
		c.rampLeft = max(c.rampLeft-n, 0)
	}
}

// recordBytes is the plaintext of the next record Write makes.
func (c *Conn) recordBytes() int {
	if c.rampLeft > 0 {
		return min(c.rampRecord, c.rampLeft) // the ramp ends on a record's end
	}
	return maxPlaintext
}

// maxPlaintext is TLS's largest record payload.
const maxPlaintext = 16 << 10

// WriteTo copies the link's plaintext to w until EOF, each write a batch of
// the records that had arrived (io.Copy uses it).
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	return copyBatches(w, c.readBatch)
}

// ReadFrom copies r to the link until EOF, a batch per read (io.Copy uses
// it, also through *net.TCPConn's WriteTo when it cannot splice).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	return copyBatches(c, r.Read)
}

// readBatch reads one record, waiting for it, then adds the records
// already read off the socket without waiting for the network.
func (c *Conn) readBatch(buf []byte) (int, error) {
	n, err := c.Conn.Read(buf)
	if err != nil {
		return n, err
	}
	c.raw.nonblock.Store(true)
	defer c.raw.nonblock.Store(false)
	for n < len(buf) {
		m, err := c.Conn.Read(buf[n:])
		n += m
		if err != nil {
			if errors.Is(err, errWouldBlock) {
				err = nil
			}
			return n, err
		}
	}
	return n, nil
}

// copyBatches copies from read to w through a pooled batch buffer until
// read returns io.EOF (a clean end: nil) or another error.
func copyBatches(w io.Writer, read func([]byte) (int, error)) (int64, error) {
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	buf := *bp
	var total int64
	for {
		n, err := read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		switch {
		case err == io.EOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
}

// NetConn is the connection under the record layer's buffering (the pool
// peeks at its socket).
func (c *Conn) NetConn() net.Conn { return c.raw.Conn }

// rawConn sits between crypto/tls and the socket. It writes the handshake
// in small pieces (smallHandshake), ends a batch of reads where the socket
// would have to be read, and holds the records of one Write while corked.
type rawConn struct {
	net.Conn
	handshaken atomic.Bool
	// nonblock makes Read return errWouldBlock instead of reading the
	// socket: set only by Conn.WriteTo, the link's one reader, around its
	// batch reads.
	nonblock atomic.Bool
	rc       syscall.RawConn // the socket's, for fill; nil when Conn is not a socket
	rbuf     *[]byte         // read ahead, from readPool: unread bytes are rbuf[roff:rend]
	roff     int
	rend     int

	wmu    sync.Mutex // orders socket writes and guards the fields below
	corked bool
	wbuf   *[]byte // from wbufPool while corked
}

// wbufPool holds cork buffers: a batch's records with their headers and
// tags.
var wbufPool = sync.Pool{New: func() any { b := make([]byte, 0, batchBytes+1024); return &b }}

func (c *rawConn) Read(p []byte) (int, error) {
	if c.roff == c.rend {
		if c.nonblock.Load() {
			return 0, errWouldBlock
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.rbuf)[c.roff:c.rend])
	c.roff += n
	if c.roff == c.rend {
		readPool.Put(c.rbuf)
		c.rbuf = nil
	}
	return n, nil
}

// fill reads what the socket holds, up to readAheadBytes, into a pooled
// buffer taken only once there is data: a link waiting for data (an idle
// tunnel, a pooled conn) holds no buffer.
func (c *rawConn) fill() error {
	rc := c.rc
	if rc == nil { // not a socket (tests): read ahead all the same
		b := readPool.Get().(*[]byte)
		n, err := c.Conn.Read(*b)
		if n == 0 {
			readPool.Put(b)
			return err
		}
		c.rbuf, c.roff, c.rend = b, 0, n
		return nil
	}
	var n int
	var rerr error
	var b *[]byte
	err := rc.Read(func(fd uintptr) bool {
		b = readPool.Get().(*[]byte)
		for {
			n, rerr = unix.Read(int(fd), *b)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			readPool.Put(b)
			b = nil
			return false // wait for data
		}
		return true
	})
	switch {
	case err == nil && rerr != nil:
		err = os.NewSyscallError("read", rerr)
	case err == nil && n == 0:
		readPool.Put(b)
		return io.EOF
	}
	if err != nil {
		if b != nil {
			readPool.Put(b)
		}
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	c.rbuf, c.roff, c.rend = b, 0, n
	return nil
}

func (c *rawConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch {
	case c.corked:
		*c.wbuf = append(*c.wbuf, p...)
		return len(p), nil
	case !c.handshaken.Load():
		return smallHandshake(c.Conn, p)
	}
	return c.Conn.Write(p)
}

// cork holds writes until flush.
func (c *rawConn) cork() {
	c.wmu.Lock()
	c.corked = true
	c.wbuf = wbufPool.Get().(*[]byte)
	c.wmu.Unlock()
}

// holdPartial sets TCP_CORK on the socket: while on, the kernel sends
// only full segments and keeps a partial one until it is off (at most 200
// ms). A conn that is not a socket has nothing to set.
func (c *rawConn) holdPartial(on bool) error {
	if c.rc == nil {
		return nil
	}
	v := 0
	if on {
		v = 1
	}
	return hostnet.SetInt(c.rc, unix.IPPROTO_TCP, unix.TCP_CORK, v)
}

// flush writes what cork held, in one write, and uncorks.
func (c *rawConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.corked = false
	b := c.wbuf
	c.wbuf = nil
	var err error
	if len(*b) > 0 {
		_, err = c.Conn.Write(*b)
	}
	*b = (*b)[:0]
	wbufPool.Put(b)
	return err
}
