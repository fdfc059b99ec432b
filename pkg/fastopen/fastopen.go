// Package fastopen turns on TCP Fast Open (RFC 7413) for relaymesh's admin
// connections on Linux: a client that has connected to a server before
// holds a cookie from it (the kernel keeps it, across processes), and its
// next connection carries its first bytes, the TLS ClientHello, in the SYN.
// The server answers the handshake and the ClientHello together, so a new
// TLS connection costs one round trip before its request instead of two.
//
// A plan over a large fleet asks hundreds of relays across the world in its
// first two rounds, each over a new connection: three round trips to the
// farthest before its probe even starts (TCP, TLS, the request). Fast Open
// makes that two for every relay this host has asked before.
//
// Both ends must agree. The client sets TCP_FASTOPEN_CONNECT (Linux 4.11):
// with a cookie for the server, connect returns at once and the first write
// sends SYN and data together; without one, connect sends a plain SYN that
// asks for a cookie, as any connection. The server sets TCP_FASTOPEN on its
// listener, and its network namespace must allow Fast Open servers:
// net.ipv4.tcp_fastopen with the server's flag, 2, set (3: client and
// server; Linux's default is 1, client only), which ServerEnabled reads. Where anything is
// missing, connections are ordinary TCP: nothing fails.
//
// Only TLS connections should carry data in the SYN: a SYN may be
// duplicated by the network and its data delivered twice, which a
// ClientHello survives (the handshake does not complete twice) and a
// plain HTTP request might not.
package fastopen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// ListenQueue is how many Fast Open connections a listener may have
// pending (the kernel's TCP_FASTOPEN queue length): beyond it new SYNs
// with data fall back to an ordinary handshake.
const ListenQueue = 256

// Listen is a net.ListenConfig.Control that lets a listener accept Fast
// Open connections (TCP_FASTOPEN, ListenQueue).
func Listen(_, _ string, rc syscall.RawConn) error {
	return setInt(rc, unix.TCP_FASTOPEN, ListenQueue, "TCP_FASTOPEN")
}

// Dial is a net.Dialer.Control that makes a connection's first write ride
// in its SYN when the kernel holds a cookie for the server
// (TCP_FASTOPEN_CONNECT). For TLS connections only (see the package
// documentation).
func Dial(_, _ string, rc syscall.RawConn) error {
	return setInt(rc, unix.TCP_FASTOPEN_CONNECT, 1, "TCP_FASTOPEN_CONNECT")
}

// setInt sets the TCP option opt, named name in its error.
func setInt(rc syscall.RawConn, opt, value int, name string) error {
	if err := hostnet.SetInt(rc, unix.IPPROTO_TCP, opt, value); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// SysctlPath is where this network namespace's Fast Open setting is read.
const SysctlPath = "/proc/sys/net/ipv4/tcp_fastopen"

// ServerEnabled says whether this network namespace lets listeners accept
// Fast Open connections (net.ipv4.tcp_fastopen has the server's flag, 2), with the
// setting as read. /proc/sys/net shows the namespace of the thread that
// opens it.
func ServerEnabled() (enabled bool, setting int, err error) {
	b, err := os.ReadFile(SysctlPath)
	if err != nil {
		return false, 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return false, 0, errors.New(SysctlPath + ": not a number: " + strings.TrimSpace(string(b)))
	}
	return v&2 != 0, v, nil
}
