package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// spliceCopy moves src's bytes to dst in the kernel with splice(2), as
// io.Copy between two *net.TCPConn does, but holds a pipe only while bytes
// move. io.Copy takes a pipe (two descriptors) for the whole copy, so an
// idle tunnel holds two of them besides its sockets, six descriptors in
// all; here it waits for data with no pipe, takes one from a shared pool
// when its socket is readable, and gives it back once the pipe is drained
// into dst and src has nothing more. An idle tunnel then costs its two
// sockets. When no pipe can be had (the process is out of descriptors),
// the rest of the copy goes through user space, so no byte waits on one.
//
// It returns what io.Copy would: the bytes written, and nil at src's EOF.
func spliceCopy(dst, src *net.TCPConn) (int64, error) {
	srcRC, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	dstRC, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var written int64
	sp := newSplicer()
	defer sp.release()
	for {
		n, err := sp.fill(srcRC)
		switch {
		case errors.Is(err, errNoPipe):
			m, err := io.Copy(writerOnly{dst}, readerOnly{src})
			return written + m, err
		case err != nil:
			return written, err
		case n == 0:
			return written, nil // EOF
		}
		m, err := sp.drain(dstRC)
		written += int64(m)
		if err != nil {
			return written, err
		}
	}
}

// maxSpliceBytes is what one splice(2) asks to move, and the pipe's
// size: as Go's own splice (1 MiB, the default pipe-max-size).
const maxSpliceBytes = 1 << 20

// errNoPipe: no pipe could be made (no descriptor left).
var errNoPipe = errors.New("no pipe for splice")

// pipe is a kernel pipe that carries one burst from a socket to another;
// inPipe is what it holds.
type pipe struct {
	r, w   int
	inPipe int
}

// splicer is one direction's hold on a pipe (p is nil while it waits for
// data) and the state its socket callbacks share. The callbacks are
// method values made once per copy (spliceIn, spliceOut), not closures
// made per burst: an idle relay with thousands of tunnels wakes each for
// every few bytes, and each closure was an allocation.
type splicer struct {
	p *pipe
	// What the last callback did: bytes moved and the error of its
	// splice(2).
	n    int
	serr error
	in   func(fd uintptr) bool // s.spliceIn
	out  func(fd uintptr) bool // s.spliceOut
}

func newSplicer() *splicer {
	s := &splicer{}
	s.in, s.out = s.spliceIn, s.spliceOut
	return s
}

// fill waits for src to be readable, then takes a pipe from the pool
// (unless it holds one) and moves what src has into it. It gives the pipe
// back while it waits. It returns the bytes moved: 0 at EOF.
func (s *splicer) fill(src interface {
	Read(func(fd uintptr) bool) error
}) (int, error) {
	s.n, s.serr = 0, nil
	err := src.Read(s.in)
	switch {
	case err != nil:
		return 0, err
	case errors.Is(s.serr, errNoPipe):
		return 0, s.serr
	case s.serr != nil:
		return 0, os.NewSyscallError("splice", s.serr)
	}
	s.p.inPipe = s.n
	return s.n, nil
}

// spliceIn is fill's callback on the source socket: false to wait for it
// to be readable.
func (s *splicer) spliceIn(fd uintptr) bool {
	if s.p == nil {
		if s.p, s.serr = pipes.get(); s.serr != nil {
			return true
		}
	}
	for {
		moved, err := unix.Splice(int(fd), nil, s.p.w, nil, maxSpliceBytes, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		s.n, s.serr = int(moved), err
		if err != unix.EINTR {
			break
		}
	}
	if s.serr == unix.EAGAIN {
		// Nothing to read: wait without a pipe. It is empty (drain
		// emptied it), so it goes back as good as new.
		s.release()
		return false
	}
	return true
}

// release gives the pipe back to the pool, if it holds one.
func (s *splicer) release() {
	pipes.put(s.p)
	s.p = nil
}

// drain moves all the pipe holds to dst, waiting while dst's send buffer
// is full.
func (s *splicer) drain(dst interface {
	Write(func(fd uintptr) bool) error
}) (int, error) {
	s.n, s.serr = 0, nil
	err := dst.Write(s.out)
	if err == nil && s.serr != nil {
		err = os.NewSyscallError("splice", s.serr)
	}
	return s.n, err
}

// spliceOut is drain's callback on the destination socket: false to wait
// for room in its send buffer.
func (s *splicer) spliceOut(fd uintptr) bool {
	p := s.p
	for p.inPipe > 0 {
		n, err := unix.Splice(p.r, nil, int(fd), nil, p.inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			s.serr = err
			return true
		}
		p.inPipe -= int(n)
		s.n += int(n)
	}
	return true
}

// maxIdlePipes bounds the pipes the pool keeps between bursts (two
// descriptors each): enough for the tunnels moving bytes at one time on a
// few cores; a burst beyond it makes and closes its own.
const maxIdlePipes = 64

// pipePool keeps empty pipes for the next burst.
type pipePool struct {
	mu   sync.Mutex
	idle []*pipe
}

var pipes pipePool

// pipe2 makes a pipe (a variable so a test can make it fail).
var pipe2 = unix.Pipe2

// get returns an empty pipe, from the pool or new; errNoPipe (wrapping
// the cause) when none can be made.
func (pp *pipePool) get() (*pipe, error) {
	pp.mu.Lock()
	if n := len(pp.idle); n > 0 {
		p := pp.idle[n-1]
		pp.idle = pp.idle[:n-1]
		pp.mu.Unlock()
		return p, nil
	}
	pp.mu.Unlock()
	var fds [2]int
	if err := pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, errors.Join(errNoPipe, err)
	}
	// A larger pipe moves more per splice; refused (pipe-max-size, or the
	// user's pipe budget spent), the default size still works.
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSpliceBytes)
	return &pipe{r: fds[0], w: fds[1]}, nil
}

// put returns p to the pool, or closes it: when the pool is full, or when
// p still holds bytes (a copy that failed mid-burst), which must not reach
// another tunnel. A nil p is a no-op.
func (pp *pipePool) put(p *pipe) {
	if p == nil {
		return
	}
	if p.inPipe == 0 {
		pp.mu.Lock()
		if len(pp.idle) < maxIdlePipes {
			pp.idle = append(pp.idle, p)
			pp.mu.Unlock()
			return
		}
		pp.mu.Unlock()
	}
	unix.Close(p.r)
	unix.Close(p.w)
}

// drop closes the pool's idle pipes.
func (pp *pipePool) drop() {
	pp.mu.Lock()
	idle := pp.idle
	pp.idle = nil
	pp.mu.Unlock()
	for _, p := range idle {
		unix.Close(p.r)
		unix.Close(p.w)
	}
}

// readerOnly and writerOnly hide a TCPConn's ReadFrom and WriteTo, so
// io.Copy goes through a user-space buffer instead of splicing (the
// fallback when no pipe can be made).
type (
	readerOnly struct{ io.Reader }
	writerOnly struct{ io.Writer }
)
