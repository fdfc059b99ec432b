package hostnet

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPInfo is the kernel's TCP_INFO of c's socket (a *net.TCPConn, say),
// read once. pkg/tunnel reads its own, without allocating, on every
// tunnel's hot path.
func TCPInfo(c syscall.Conn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, err
	}
	return info, ierr
}

// SetInt sets the integer socket option (level, opt) of rc's socket to
// value: rc as a net.Dialer's or net.ListenConfig's Control is given it,
// or as SetIntOn reads it.
func SetInt(rc syscall.RawConn, level, opt, value int) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, opt, value)
	}); err != nil {
		return err
	}
	return serr
}

// SetIntOn is SetInt on c's socket (a *net.TCPConn or *net.UDPConn).
func SetIntOn(c syscall.Conn, level, opt, value int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return SetInt(rc, level, opt, value)
}
