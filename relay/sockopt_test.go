package relay

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Relay sockets, dialed and accepted, carry TCP_USER_TIMEOUT = the keepalive
// bound, so a connection that is sending into a vanished peer ends within
// it too (keepalive alone covers only idle connections).
func TestRelaySocketsBoundDeadPeers(t *testing.T) {
	s := &Server{cfg: Defaults()}
	s.cfg.RelaySocket.KeepAlive = 2 * time.Second
	if got := s.cfg.RelaySocket.DeadPeerBound(); got != 20*time.Second {
		t.Fatalf("DeadPeerBound %v, want 20s", got)
	}
	ln, err := s.relayListenConfig().Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	dialed, err := s.relayDialer().Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	acc := <-accepted
	defer acc.Close()
	for name, c := range map[string]net.Conn{"dialed": dialed, "accepted": acc} {
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var ms int
		var gerr error
		_ = rc.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		if gerr != nil || ms != 20000 {
			t.Errorf("%s: TCP_USER_TIMEOUT %d ms (%v), want 20000", name, ms, gerr)
		}
	}
}
