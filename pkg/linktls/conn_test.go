package linktls

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns the two ends of a relay link over loopback TCP. wrap, when
// given, wraps the client's socket, and then the server's.
func pair(t *testing.T, wrap ...func(net.Conn) net.Conn) (client, server *Conn) {
	t.Helper()
	return pairMSS(t, 0, wrap...)
}

// pairMSS is pair with both sockets' MSS clamped to mssBytes (TCP_MAXSEG
// before connecting; 0 leaves loopback's), as a 1500-byte MTU path has.
func pairMSS(t *testing.T, mssBytes int, wrap ...func(net.Conn) net.Conn) (client, server *Conn) {
	t.Helper()
	r1 := mustNew(t, secret, "r1", RoleRelay)
	r2 := mustNew(t, secret, "r2", RoleRelay)
	clamp := func(_, _ string, c syscall.RawConn) error {
		if mssBytes == 0 {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mssBytes)
		}); err != nil {
			return err
		}
		return serr
	}
	ln, err := (&net.ListenConfig{Control: clamp}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *Conn
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- res{nil, err}
			return
		}
		if len(wrap) > 1 {
			c = wrap[1](c)
		}
		s, err := r2.Server(context.Background(), c)
		got <- res{s, err}
	}()
	var raw net.Conn
	if raw, err = (&net.Dialer{Control: clamp}).Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if len(wrap) > 0 {
		raw = wrap[0](raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := r1.Client(ctx, raw, "r2")
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { c.Close(); r.c.Close() })
	return c.(*Conn), r.c
}

// writes is an io.Writer that hands each write on, copied, to a channel.
type writes chan []byte

func (w writes) Write(p []byte) (int, error) {
	w <- bytes.Clone(p)
	return len(p), nil
}

// next waits for the next write.
func (w writes) next(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-w:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no write within 5 s: the batch waited for data that was not coming")
		return nil
	}
}

// Bulk data arrives whole and in order through ReadFrom and WriteTo (the
// tunnel's io.Copy), in both directions at once.
func TestBatchesCarryEveryByte(t *testing.T) {
	c, s := pair(t)
	src := make([]byte, 8<<20+12345)
	if _, err := rand.Read(src); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(src)
	errs := make(chan error, 4)
	send := func(from *Conn) {
		// A reader without WriteTo, as a socket that cannot splice, so
		// io.Copy takes from's ReadFrom.
		_, err := io.Copy(from, struct{ io.Reader }{bytes.NewReader(src)})
		if err == nil {
			err = from.CloseWrite()
		}
		errs <- err
	}
	recv := func(name string, to *Conn) {
		h := sha256.New()
		_, err := io.Copy(h, to)
		if err == nil && !bytes.Equal(h.Sum(nil), want[:]) {
			err = fmt.Errorf("%s: data changed on the way", name)
		}
		errs <- err
	}
	go send(c)
	go send(s)
	go recv("to the server", s)
	go recv("to the client", c)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A Write of several records leaves in one socket write, and records that
// are all here come out of WriteTo in one write.
func TestRecordsMoveInBatches(t *testing.T) {
	var sent *sizes
	c, s := pair(t, func(raw net.Conn) net.Conn { sent = &sizes{Conn: raw}; return sent })
	sent.mu.Lock()
	hs := len(sent.w)
	sent.mu.Unlock()
	msg := make([]byte, batchBytes)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	sent.mu.Lock()
	if got := sent.w[hs:]; len(got) != 1 {
		t.Errorf("4 records went out in %d socket writes %v, want 1", len(got), got)
	}
	sent.mu.Unlock()

	// Wait until all of it is in the server's socket, then read.
	fd := sockFD(t, s.NetConn())
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if n >= len(msg)+4*22 { // each record adds a header and a tag
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d bytes arrived", n)
		}
		time.Sleep(time.Millisecond)
	}
	w := make(writes, 16)
	go func() { _, _ = s.WriteTo(w) }()
	if got := w.next(t); len(got) != len(msg) {
		t.Errorf("first write out of WriteTo is %d bytes, want the whole batch of %d", len(got), len(msg))
	}
}

// A batch ends where the next record has not fully arrived: what is here
// goes on at once, and the rest follows intact when it comes.
func TestBatchDoesNotWaitForTheNextRecord(t *testing.T) {
	var split *splitting
	c, s := pair(t, func(raw net.Conn) net.Conn { split = &splitting{Conn: raw, gap: 300 * time.Millisecond}; return split })
	split.on.Store(true)
	w := make(writes, 16)
	go func() { _, _ = s.WriteTo(w) }()

	// Something small, interactive: it must not wait for more.
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if got := w.next(t); string(got) != "ping" {
		t.Fatalf("got %q, want ping", got)
	}

	// Two records in one socket write that the network cuts in the
	// middle of the second: the first record comes out before the rest
	// arrives.
	msg := make([]byte, 2*maxPlaintext)
	if _, err := rand.Read(msg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() { _, _ = c.Write(msg) }()
	first := w.next(t)
	if took := time.Since(start); took >= split.gap {
		t.Errorf("the first record came out after %v, with the second's rest (the gap is %v)", took, split.gap)
	}
	got := first
	for len(got) < len(msg) {
		got = append(got, w.next(t)...)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("data changed on the way")
	}
}

// splitting cuts each write, once on, in two around its middle, with gap
// between the halves.
type splitting struct {
	net.Conn
	on  atomic.Bool
	gap time.Duration
}

func (s *splitting) Write(p []byte) (int, error) {
	if !s.on.Load() || len(p) < 2*maxPlaintext {
		return s.Conn.Write(p)
	}
	half := len(p) * 3 / 4 // inside the second record
	n, err := s.Conn.Write(p[:half])
	if err != nil {
		return n, err
	}
	time.Sleep(s.gap)
	m, err := s.Conn.Write(p[half:])
	return n + m, err
}

func sockFD(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// recording keeps every byte written on a conn while on.
type recording struct {
	net.Conn
	on    atomic.Bool
	delay atomic.Int64 // ns each write waits first, as a socket whose send buffer is full
	mu    sync.Mutex
	buf   []byte
}

func (r *recording) Write(p []byte) (int, error) {
	time.Sleep(time.Duration(r.delay.Load()))
	if r.on.Load() {
		r.mu.Lock()
		r.buf = append(r.buf, p...)
		r.mu.Unlock()
	}
	return r.Conn.Write(p)
}

// records cuts what r recorded into TLS records and returns their sizes on
// the wire, header included, and empties r.
func (r *recording) records(t *testing.T) []int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	b := r.buf
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("%d bytes left, less than a record header", len(b))
		}
		n := 5 + (int(b[3])<<8 | int(b[4]))
		if len(b) < n {
			t.Fatalf("a record of %d bytes, only %d written", n, len(b))
		}
		out = append(out, n)
		b = b[n:]
	}
	r.buf = r.buf[:0]
	return out
}

// A link ramping up sends records of one segment each, so that whatever a
// flight of TCP carries can be decrypted, and forwarded, as it arrives;
// after rampBytes it sends full records, and after an idle spell ramps
// again.
func TestRampRecordsFillOneSegment(t *testing.T) {
	var rec *recording
	c, s := pair(t, func(raw net.Conn) net.Conn { rec = &recording{Conn: raw}; return rec })
	go func() { _, _ = io.Copy(io.Discard, s) }()
	if c.rampRecord != defaultMSSBytes-RecordOverheadBytes {
		t.Fatalf("a link whose socket does not say its MSS ramps in records of %d bytes, want %d", c.rampRecord, defaultMSSBytes-RecordOverheadBytes)
	}
	rec.on.Store(true)
	msg := make([]byte, batchBytes)
	write := func() {
		t.Helper()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	allSegments := func(when string) {
		t.Helper()
		got := rec.records(t)
		for i, n := range got {
			if n > defaultMSSBytes || (i < len(got)-1 && n != defaultMSSBytes) {
				t.Fatalf("%s: record %d of %d is %d bytes on the wire, want %d (one segment) but for the last", when, i, len(got), n, defaultMSSBytes)
			}
		}
	}
	write()
	allSegments("a new link")

	// The rest of the ramp, then full records from the first byte after it.
	for sent := batchBytes; sent < rampBytes; sent += batchBytes {
		write()
	}
	rec.records(t)
	fullRecords := func(when string) {
		t.Helper()
		for i, n := range rec.records(t) {
			if n != maxPlaintext+RecordOverheadBytes {
				t.Fatalf("%s, record %d is %d bytes on the wire, want %d", when, i, n, maxPlaintext+RecordOverheadBytes)
			}
		}
	}
	write()
	fullRecords("after the ramp")

	// Writes that each wait longer than writeIdleRestart for the socket
	// (a slow path's window) are busy, not idle: no new ramp.
	rec.delay.Store(int64(writeIdleRestart + 50*time.Millisecond))
	write()
	write()
	rec.delay.Store(0)
	fullRecords("after slow writes")

	// Idle: the next answer ramps again.
	c.lastWrite = c.lastWrite.Add(-writeIdleRestart)
	write()
	allSegments("after an idle spell")
}

// On a socket the ramp's records follow its MSS: loopback's is larger than
// any record, so a loopback link sends full records throughout.
func TestRampRecordFollowsTheSocket(t *testing.T) {
	c, _ := pair(t)
	if c.rampRecord != maxPlaintext {
		t.Fatalf("loopback link ramps in records of %d bytes, want full records (%d)", c.rampRecord, maxPlaintext)
	}
	if got := rampRecordFor(1400); got != 1400-RecordOverheadBytes {
		t.Errorf("rampRecordFor(1400) = %d, want %d", got, 1400-RecordOverheadBytes)
	}
}

// A relay forwards what its upstream delivers, a segment of plaintext at a
// time; a ramp record holds less than that (a segment less the record's
// overhead). Each such write's tail waits, corked, for the next to fill
// its segment: the link sends as many segments as its bytes need, not two
// per upstream segment (a full one and a runt), which halved what each
// round of slow start carried.
func TestRampWritesFillSegments(t *testing.T) {
	// A corked tail goes out on its own after 200 ms (Linux's cork
	// limit), so a host stall between two writes can send one more
	// segment than the writes need: a wrong corking sends too many every
	// time, a stall seldom twice in a row.
	const attempts = 3
	for i := range attempts {
		sent, most := rampWriteSegments(t)
		if sent <= most {
			return
		}
		if i == attempts-1 {
			t.Errorf("%d upstream segments and a tail took %d segments, want at most %d (full segments), in each of %d attempts", rampUpstreamSegments, sent, most, attempts)
		} else {
			t.Logf("attempt %d: %d segments, want at most %d: measuring again (a host stall releases a corked tail)", i+1, sent, most)
		}
	}
}

const rampUpstreamSegments = 40

// rampWriteSegments writes rampUpstreamSegments upstream segments and a
// tail over a fresh link and returns how many segments carried them
// (retransmissions not counted) and the most their bytes need.
func rampWriteSegments(t *testing.T) (sent, most uint32) {
	t.Helper()
	c, s := pairMSS(t, 1460)
	if c.mssBytes == 0 || c.mssBytes > 1460 {
		t.Fatalf("a link over a socket of MSS 1460 aligns to %d-byte segments, want its MSS", c.mssBytes)
	}
	c.pushAfter = time.Hour // deterministic: only the writes push
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(s); got <- b }()
	segsOut := func() uint32 {
		info, err := unix.GetsockoptTCPInfo(sockFD(t, c.NetConn()), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Fatal(err)
		}
		return info.Data_segs_out - info.Total_retrans
	}
	before := segsOut()
	// The upstream's segments carry as much as the link's do (both MSS
	// 1460 here), then the response's short end: it pushes what is held.
	var want []byte
	for range rampUpstreamSegments {
		p := make([]byte, c.mssBytes)
		_, _ = rand.Read(p)
		want = append(want, p...)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	tail := []byte("the end of the response")
	want = append(want, tail...)
	if _, err := c.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("received %d bytes, not the %d written", len(b), len(want))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the link did not deliver the writes: a partial segment was held")
	}
	// Each record adds RecordOverheadBytes: at most two records per
	// upstream segment (one ends where a segment does, the rest starts the
	// next), one for the tail, one for close_notify (19 bytes of it).
	wire := len(want) + (2*rampUpstreamSegments+2)*RecordOverheadBytes
	need := uint32((wire + c.mssBytes - 1) / c.mssBytes)
	return segsOut() - before, need + 1
}

// While aligned, a ramp record never spans a segment's end unless it ends
// at the next one: whatever a flight carries, the next relay can decrypt.
func TestRampRecordsEndWhereSegmentsDo(t *testing.T) {
	var rec *recording
	c, s := pair(t, func(raw net.Conn) net.Conn { rec = &recording{Conn: raw}; return rec })
	go func() { _, _ = io.Copy(io.Discard, s) }()
	c.mssBytes, c.pushAfter = defaultMSSBytes, time.Hour // as a 1500-byte MTU socket
	rec.on.Store(true)
	for i := 0; i < 200; i++ {
		// Upstream reads of a segment or more, of varying sizes (a
		// shorter one, an answer, goes out at once: a segment of its own).
		if _, err := c.Write(make([]byte, defaultMSSBytes+i*37%2000)); err != nil {
			t.Fatal(err)
		}
	}
	off := 0
	for i, n := range rec.records(t) {
		start, end := off, off+n
		off = end
		if end%defaultMSSBytes != 0 && start/defaultMSSBytes != (end-1)/defaultMSSBytes {
			t.Fatalf("record %d spans bytes %d-%d of the stream, across the segment end at %d", i, start, end, (start/defaultMSSBytes+1)*defaultMSSBytes)
		}
	}
}

// Closing is how a tunnel ends a write stuck on a peer that stopped
// reading: Close must not wait for that write.
func TestCloseEndsAStuckWrite(t *testing.T) {
	c, _ := pairMSS(t, 1460) // the server end never reads
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 64<<20)) // far more than both ends' buffers
		wrote <- err
	}()
	time.Sleep(200 * time.Millisecond) // the write is blocked by now
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a write that only Close can end")
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Error("the stuck write returned no error after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck write did not end after Close")
	}
}
