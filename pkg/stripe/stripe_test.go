package stripe

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// linkPairs dials n loopback TCP connections: a[i] and b[i] are link i's
// two ends.
func linkPairs(t *testing.T, n int) (a, b []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		a, b = append(a, c), append(b, s)
	}
	return a, b
}

// slowLink delays each write on a link, so chunks sent on it arrive after
// later chunks sent on the others.
type slowLink struct {
	net.Conn
	delay time.Duration
}

func (l slowLink) Write(p []byte) (int, error) {
	time.Sleep(l.delay)
	return l.Conn.Write(p)
}

func pair(t *testing.T, n, reorderBytes int, wrap func(i int, c net.Conn) net.Conn) (*Conn, *Conn) {
	t.Helper()
	a, b := linkPairs(t, n)
	if wrap != nil {
		for i := range a {
			a[i] = wrap(i, a[i])
		}
	}
	sa, err := New(a, reorderBytes)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := New(b, reorderBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sa.Close(); sb.Close() })
	return sa, sb
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// sendAll writes data in pieces of varied sizes, then half-closes.
func sendAll(w *Conn, data []byte) error {
	for off, step := 0, 1; off < len(data); step = step*7%100003 + 1 {
		end := min(off+step, len(data))
		if _, err := w.Write(data[off:end]); err != nil {
			return err
		}
		off = end
	}
	return w.CloseWrite()
}

func TestStreamInOrderBothWays(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		sa, sb := pair(t, n, 0, nil)
		up, down := randomBytes(t, 3<<20+17), randomBytes(t, 1<<20+5)
		errs := make(chan error, 2)
		go func() { errs <- sendAll(sa, up) }()
		go func() { errs <- sendAll(sb, down) }()
		gotUp, err := io.ReadAll(sb)
		if err != nil {
			t.Fatalf("%d links: read up: %v", n, err)
		}
		gotDown, err := io.ReadAll(sa)
		if err != nil {
			t.Fatalf("%d links: read down: %v", n, err)
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("%d links: send: %v", n, err)
			}
		}
		if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
			t.Fatalf("%d links: stream changed: up %d/%d bytes, down %d/%d", n, len(gotUp), len(up), len(gotDown), len(down))
		}
	}
}

// One half-closed direction leaves the other open, as TCP's half-close does.
func TestHalfCloseLeavesTheOtherWayOpen(t *testing.T) {
	sa, sb := pair(t, 3, 0, nil)
	if err := sa.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(sb); err != nil {
		t.Fatalf("read to the half-close: %v", err)
	}
	if _, err := sa.Write([]byte("x")); err == nil {
		t.Fatal("Write after CloseWrite succeeded")
	}
	msg := randomBytes(t, 200_000)
	go func() { _ = sendAll(sb, msg) }()
	got, err := io.ReadAll(sa)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("after the other way's half-close: %d of %d bytes, %v", len(got), len(msg), err)
	}
}

// A link much slower than the others delivers its chunks late: the stream
// must come out in order through a small reorder window, without stalling
// for good.
func TestReorderThroughASmallWindow(t *testing.T) {
	slow := func(i int, c net.Conn) net.Conn {
		if i == 0 {
			return slowLink{Conn: c, delay: 3 * time.Millisecond}
		}
		return c
	}
	sa, sb := pair(t, 4, 2*ChunkBytes, slow)
	data := randomBytes(t, 2<<20)
	errs := make(chan error, 1)
	go func() { errs <- sendAll(sa, data) }()
	got, err := io.ReadAll(sb)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("stream changed: %d of %d bytes", len(got), len(data))
	}
	if w := len(sb.ring); w != 2*4 {
		t.Fatalf("window %d chunks, want at least two per link (8)", w)
	}
}

// writeFrame writes one raw frame on c.
func writeFrame(t *testing.T, c net.Conn, seq uint32, payload string) {
	t.Helper()
	b := make([]byte, frameHeaderBytes+len(payload))
	binary.BigEndian.PutUint32(b[0:4], seq)
	binary.BigEndian.PutUint16(b[4:6], uint16(len(payload)))
	copy(b[frameHeaderBytes:], payload)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readAllWithin is io.ReadAll, failing the test after 5 s.
func readAllWithin(t *testing.T, r io.Reader) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() { b, err := io.ReadAll(r); done <- result{b, err} }()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("Read still waiting after 5 s")
		return nil, nil
	}
}

// The peer closes its links once its side is done, and a link's close can
// come before the end frame another link still carries: nothing is lost.
func TestLinksClosedBeforeTheEndFrameArrives(t *testing.T) {
	a, b := linkPairs(t, 3)
	sb, err := New(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	writeFrame(t, a[1], 0, "ab")
	a[1].Close()
	writeFrame(t, a[0], 1, "cd")
	a[0].Close()
	time.Sleep(50 * time.Millisecond) // both closes read before the end
	writeFrame(t, a[2], 2, "")
	a[2].Close()
	got, err := readAllWithin(t, sb)
	if err != nil || string(got) != "abcd" {
		t.Fatalf("read %q, %v; want \"abcd\" and a clean end", got, err)
	}
}

// Every link closed and no end frame: bytes may be missing, and Read must
// say so, never return a clean EOF.
func TestAllLinksClosedBeforeTheEndIsAnError(t *testing.T) {
	a, b := linkPairs(t, 3)
	sb, err := New(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	writeFrame(t, a[0], 0, "abc")
	for _, c := range a {
		c.Close()
	}
	got, err := readAllWithin(t, sb)
	if !errors.Is(err, ErrBroken) {
		t.Fatalf("Read ended with %v after %q, want ErrBroken", err, got)
	}
}

// A link cut inside a frame breaks the stream at once, though the other
// links are still open.
func TestLinkCutInsideAFrameIsAnError(t *testing.T) {
	a, b := linkPairs(t, 2)
	defer a[1].Close()
	sb, err := New(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var hdr [frameHeaderBytes]byte
	binary.BigEndian.PutUint16(hdr[4:6], 10)
	if _, err := a[0].Write(append(hdr[:], "abc"...)); err != nil {
		t.Fatal(err)
	}
	a[0].Close()
	if _, err := readAllWithin(t, sb); !errors.Is(err, ErrBroken) {
		t.Fatalf("Read ended with %v, want ErrBroken", err)
	}
}

func TestMalformedFramesBreakTheStream(t *testing.T) {
	cases := []struct {
		name   string
		frames [][2]uint32 // seq, len
	}{
		{"frame too long", [][2]uint32{{0, ChunkBytes + 1}}},
		{"chunk twice", [][2]uint32{{0, 1}, {0, 1}}},
		{"chunk twice, then the end", [][2]uint32{{0, 1}, {0, 1}, {1, 0}}},
		// Ends not yet reached (chunks 0 and 1 missing), so the stream
		// has not ended when the second frame arrives.
		{"two end frames", [][2]uint32{{2, 0}, {3, 0}}},
		{"chunk after the end", [][2]uint32{{2, 0}, {3, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := linkPairs(t, 1)
			sb, err := New(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			defer a[0].Close()
			go func() {
				for _, f := range tc.frames {
					hdr := make([]byte, frameHeaderBytes+min(int(f[1]), ChunkBytes+1))
					binary.BigEndian.PutUint32(hdr[0:4], f[0])
					binary.BigEndian.PutUint16(hdr[4:6], uint16(f[1]))
					if _, err := a[0].Write(hdr); err != nil {
						return
					}
				}
			}()
			done := make(chan error, 1)
			go func() { _, err := io.ReadAll(sb); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the stream ended cleanly")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read still waiting 5 s after a malformed frame")
			}
		})
	}
}

// Close ends a Read waiting for data and a Write waiting for the writers.
func TestCloseUnblocks(t *testing.T) {
	a, b := linkPairs(t, 2)
	sa, err := New(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // nobody reads b: the writers block once the buffers are full
		defer wg.Done()
		buf := make([]byte, 1<<20)
		for {
			if _, err := sa.Write(buf); err != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = sa.Read(make([]byte, 10))
	}()
	time.Sleep(100 * time.Millisecond)
	sa.Close()
	wg.Wait()
	for _, c := range b {
		c.Close()
	}
}

func TestLinkCountBounds(t *testing.T) {
	if _, err := New(nil, 0); err == nil {
		t.Fatal("no links accepted")
	}
	if _, err := New(make([]net.Conn, MaxLinks+1), 0); err == nil {
		t.Fatal("too many links accepted")
	}
}

// A read deadline ends a Read waiting for data, a write deadline a Write
// waiting for room; the zero time lifts them.
func TestDeadlines(t *testing.T) {
	sa, sb := pair(t, 2, 0, nil)
	if err := sa.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v", err)
	}
	_ = sa.SetReadDeadline(time.Time{})
	go func() { _, _ = sb.Write([]byte("x")) }()
	if _, err := sa.Read(make([]byte, 1)); err != nil {
		t.Fatalf("Read with the deadline lifted: %v", err)
	}
	// Nobody reads sb: the links' buffers, then the queue, fill.
	if err := sa.SetWriteDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for start := time.Now(); ; {
		_, err := sa.Write(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil || time.Since(start) > 10*time.Second {
			t.Fatalf("Write: %v after %s, want the deadline", err, time.Since(start))
		}
	}
}

// Seqs wrap around 2³²: chunks on both sides of the wrap come out in order.
func TestSeqWraps(t *testing.T) {
	sa, sb := pair(t, 3, 1, nil) // the smallest window: 2 a link, rounded up
	const start = 1<<32 - 7
	sa.wmu.Lock()
	sa.wseq = start
	sa.wmu.Unlock()
	sb.mu.Lock()
	sb.next = start
	sb.mu.Unlock()
	data := randomBytes(t, 40*ChunkBytes+3)
	errs := make(chan error, 1)
	go func() { errs <- sendAll(sa, data) }()
	got, err := readAllWithin(t, sb)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("across the wrap: %d of %d bytes, %v", len(got), len(data), err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if w := len(sb.ring); w&(w-1) != 0 {
		t.Fatalf("window of %d chunks: not a power of two", w)
	}
}

// A stream that broke has closed its links, and a closed socket reads as
// nothing: LinkStats still gives what each link did, as it was closed.
func TestLinkStatsOutliveABrokenStream(t *testing.T) {
	sa, sb := pair(t, 2, 0, nil)
	if _, err := sa.Write(randomBytes(t, 8*ChunkBytes)); err != nil {
		t.Fatal(err)
	}
	// The links surely sent what the peer read: 4 chunks. (A Write
	// returns once its chunks are queued to the links' writers, which
	// the close below may stop before they sent the rest.)
	if _, err := io.ReadFull(sb, make([]byte, 4*ChunkBytes)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ChunkBytes)
	sb.Close() // with bytes unread: its links reset, and sa's next writes fail
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := sa.Write(buf); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes into a stream whose peer closed still succeed after 5 s")
		}
	}
	sa.linksOnce.Do(func() {}) // returns once closeLinks has run
	if _, err := sa.links[0].Write([]byte{0}); err == nil {
		t.Fatal("a broken stream's link still takes writes: want it closed")
	}
	sts := sa.LinkStats()
	var sent uint64
	for i, st := range sts {
		if !st.Valid {
			t.Fatalf("link %d of a broken stream: no reading, want the one taken as it closed", i)
		}
		sent += st.SentBytes
	}
	if len(sts) != 2 || sent < 4*ChunkBytes {
		t.Errorf("%d links sent %d bytes together: want 2 links, at least %d", len(sts), sent, 4*ChunkBytes)
	}
}
