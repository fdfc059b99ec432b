package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"time"
)

// Wire protocol of the in-process server: 10-byte header 'R', mode, size
// (uint64 big endian). Mode 'D'/'d': the server sends size bytes, then waits
// for the client to close. Mode 'U'/'u': the server reads size bytes and
// answers one byte ('K', or 'X' on a pattern mismatch). Lower case: verify.
// No half-close is needed in either direction.
type server struct {
	ln      *net.TCPListener
	pattern []byte
	timeout time.Duration
}

func newServer(timeout time.Duration) (*server, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	pat := make([]byte, patternBytes)
	rand.New(rand.NewSource(2)).Read(pat)
	s := &server{ln: ln, pattern: pat, timeout: timeout}
	go s.serve()
	return s, nil
}

func (s *server) addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

func (s *server) serve() {
	for {
		c, err := s.ln.AcceptTCP()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

func (s *server) handle(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.timeout))
	var h [10]byte
	if _, err := io.ReadFull(c, h[:]); err != nil || h[0] != 'R' {
		return
	}
	sizeBytes := int64(binary.BigEndian.Uint64(h[2:]))
	switch h[1] {
	case 'D', 'd':
		if err := writePattern(c, s.pattern, sizeBytes); err != nil {
			return
		}
		io.Copy(io.Discard, c) // until the client closes
	case 'U', 'u':
		ok, err := readPattern(c, s.pattern, sizeBytes, h[1] == 'u')
		if err != nil {
			return
		}
		ack := []byte{'K'}
		if !ok {
			ack[0] = 'X'
		}
		c.Write(ack)
		io.Copy(io.Discard, c)
	}
}

func writePattern(w io.Writer, pat []byte, sizeBytes int64) error {
	for off := int64(0); off < sizeBytes; {
		p := pat[off%int64(len(pat)):]
		if rem := sizeBytes - off; int64(len(p)) > rem {
			p = p[:rem]
		}
		n, err := w.Write(p)
		off += int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// readPattern reads exactly sizeBytes; with verify it compares against the
// cyclic pattern and reports whether all bytes matched.
func readPattern(r io.Reader, pat []byte, sizeBytes int64, verify bool) (bool, error) {
	buf := make([]byte, ioBufBytes)
	ok := true
	for off := int64(0); off < sizeBytes; {
		want := buf
		if rem := sizeBytes - off; int64(len(want)) > rem {
			want = want[:rem]
		}
		n, err := r.Read(want)
		if verify && ok && n > 0 {
			ok = matchesPattern(pat, off, want[:n])
		}
		off += int64(n)
		if err != nil {
			if off >= sizeBytes {
				break
			}
			return false, fmt.Errorf("after %d of %d bytes: %w", off, sizeBytes, err)
		}
	}
	return ok, nil
}

func matchesPattern(pat []byte, off int64, data []byte) bool {
	for len(data) > 0 {
		p := pat[off%int64(len(pat)):]
		n := min(len(p), len(data))
		if !bytes.Equal(p[:n], data[:n]) {
			return false
		}
		data, off = data[n:], off+int64(n)
	}
	return true
}

// transfer moves sizeBytes over conn in the given direction and returns the
// wall time from the request header to the last byte (download) or the
// server's acknowledgement (upload).
func transfer(c *net.TCPConn, pat []byte, dir string, sizeBytes int64, verify bool, timeout time.Duration) (time.Duration, error) {
	c.SetDeadline(time.Now().Add(timeout))
	mode := byte('D')
	if dir == "upload" {
		mode = 'U'
	}
	if verify {
		mode += 'a' - 'A'
	}
	h := make([]byte, 10)
	h[0], h[1] = 'R', mode
	binary.BigEndian.PutUint64(h[2:], uint64(sizeBytes))
	t0 := time.Now()
	if _, err := c.Write(h); err != nil {
		return 0, err
	}
	if dir == "download" {
		ok, err := readPattern(c, pat, sizeBytes, verify)
		el := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("download: %w", err)
		}
		if !ok {
			return 0, errors.New("download: payload corrupted")
		}
		return el, nil
	}
	if err := writePattern(c, pat, sizeBytes); err != nil {
		return 0, fmt.Errorf("upload: %w", err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return 0, fmt.Errorf("upload: waiting for the sink's acknowledgement: %w", err)
	}
	el := time.Since(t0)
	if ack[0] != 'K' {
		return 0, errors.New("upload: payload corrupted")
	}
	return el, nil
}
