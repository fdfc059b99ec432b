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
