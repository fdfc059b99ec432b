package relay

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// validate checks what can be checked without a socket; Start checks that
// the kernel accepts the congestion control (checkCongestion).
func (sc SocketConfig) validate() error {
	var errs []error
	if sc.SendBufferBytes < 0 || sc.SendBufferBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("send_buffer_bytes: must be 0 (autotuned) to 1 GiB, got %d", sc.SendBufferBytes))
	}
	if sc.RecvBufferBytes < 0 || sc.RecvBufferBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("recv_buffer_bytes: must be 0 (autotuned) to 1 GiB, got %d", sc.RecvBufferBytes))
	}
	// TCP_CA_NAME_MAX is 16 including the terminating NUL.
	if len(sc.Congestion) > 15 || strings.ContainsFunc(sc.Congestion, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) {
		errs = append(errs, fmt.Errorf("congestion: %q is not a congestion control name (e.g. cubic, bbr)", sc.Congestion))
	}
	return errors.Join(errs...)
}

// control applies the buffer sizes and congestion control to a socket
// before connect or listen (net.Dialer.Control, net.ListenConfig.Control).
// Accepted sockets inherit them from the listener, and a receive buffer set
// before the handshake also sets the window scale the peer is offered.
func (sc SocketConfig) control(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = sc.apply(int(fd))
	})
	if err != nil {
		return err
	}
	return serr
}

func (sc SocketConfig) apply(fd int) error {
	if sc.SendBufferBytes > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sc.SendBufferBytes); err != nil {
			return fmt.Errorf("relay_socket.send_buffer_bytes: SO_SNDBUF: %w", err)
		}
	}
	if sc.RecvBufferBytes > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, sc.RecvBufferBytes); err != nil {
			return fmt.Errorf("relay_socket.recv_buffer_bytes: SO_RCVBUF: %w", err)
		}
	}
	// TCP_USER_TIMEOUT bounds how long sent data may stay unacknowledged.
	// Keepalive alone ends a connection only while it is idle: a relay
	// sending into a peer whose host vanished would retransmit for
	// ~15 minutes (tcp_retries2). With both, a vanished peer ends the
	// connection within the keepalive bound whichever way data flows. A
	// slow reader is safe: its zero-window answers count as acknowledgments
	// (Linux >= 5.11).
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(sc.DeadPeerBound().Milliseconds())); err != nil {
		return fmt.Errorf("relay_socket: TCP_USER_TIMEOUT: %w", err)
	}
	if sc.Congestion != "" {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, sc.Congestion); err != nil {
			return fmt.Errorf("relay_socket.congestion: %q: %w (see net.ipv4.tcp_available_congestion_control; e.g. modprobe tcp_%s)",
				sc.Congestion, err, sc.Congestion)
		}
	}
	return nil
}

// keepAliveProbes unanswered keepalive probes end a connection.
const keepAliveProbes = 9

func (sc SocketConfig) keepAliveIdle() time.Duration {
	if sc.KeepAlive <= 0 {
		return DefaultRelayKeepAlive
	}
	return sc.KeepAlive
}

// keepAlive is the keepalive setting for relay-to-relay sockets: probes
// start after KeepAlive idle and repeat every KeepAlive, 9 of them.
func (sc SocketConfig) keepAlive() net.KeepAliveConfig {
	d := sc.keepAliveIdle()
	return net.KeepAliveConfig{Enable: true, Idle: d, Interval: d, Count: keepAliveProbes}
}

// DeadPeerBound is the keepalive bound: a relay-to-relay connection whose
// peer vanished (host down, path cut: no FIN, no RST) ends within it, idle
// or not (TCP_USER_TIMEOUT is set to it too). 10 × keepalive: 150 s by
// default.
func (sc SocketConfig) DeadPeerBound() time.Duration {
	return sc.keepAliveIdle() * (1 + keepAliveProbes)
}

// CongestionSystem is relay_socket.congestion for the system default
// (net.ipv4.tcp_congestion_control), where "" means bbr if the kernel has
// it.
const CongestionSystem = "system"

// preferredCongestion is what relay links send with when the config says
// nothing and the kernel has it: BBR is held to its path's rate by loss
// no more than by its own model, where a loss-based sender (Reno, CUBIC)
// on a long segment falls to the Mathis bound (docs/planning.md). Kernels
// since 4.13 pace BBR themselves, without the fq qdisc.
const preferredCongestion = "bbr"

// resolveCongestion turns relay_socket.congestion into the name set on
// relay sockets ("" for the system default): "" becomes bbr when a test
// socket takes it (the module loaded, and allowed to this process:
// net.ipv4.tcp_allowed_congestion_control), else stays "".
func (sc *SocketConfig) resolveCongestion() {
	switch sc.Congestion {
	case CongestionSystem:
		sc.Congestion = ""
	case "":
		try := SocketConfig{Congestion: preferredCongestion, KeepAlive: sc.KeepAlive}
		if try.checkCongestion() == nil {
			sc.Congestion = preferredCongestion
		}
	}
}

// checkCongestion tries the settings on a throw-away socket so that a
// congestion control the kernel lacks fails at startup, not on each dial.
func (sc SocketConfig) checkCongestion() error {
	if sc.Congestion == "" && sc.SendBufferBytes == 0 && sc.RecvBufferBytes == 0 {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("relay_socket: test socket: %w", err)
	}
	defer unix.Close(fd)
	return sc.apply(fd)
}

// relayDialer is the dialer for relay-to-relay connections: tuned
// sockets, bounded by the dial timeout, and no policy (relayHopDialer adds
// it).
func (s *Server) relayDialer() *net.Dialer {
	return &net.Dialer{
		Timeout:         s.cfg.Limits.DialTimeout,
		KeepAliveConfig: s.cfg.RelaySocket.keepAlive(),
		Control:         s.cfg.RelaySocket.control,
	}
}

// relayHopDialer dials relay hops: a chain's first hop (configured, or
// planned from the registry), the first hop a route header names (a relay
// chosen by whoever holds the fleet secret, not by this relay's operator),
// and warm pool links. The relay policy applies at connect: neither a
// header nor a registry entry may make this relay reach its own loopback
// or an internal host. Relays on private addresses need their range in
// policy.relay_allow.
func (s *Server) relayHopDialer() *net.Dialer {
	d := s.relayDialer()
	d.Control = func(network, address string, rc syscall.RawConn) error {
		if err := s.relayPol.Control(network, address, rc); err != nil {
			return err
		}
		return s.cfg.RelaySocket.control(network, address, rc)
	}
	return d
}

// relayListenConfig is the ListenConfig of the relay listener.
func (s *Server) relayListenConfig() *net.ListenConfig {
	return &net.ListenConfig{
		KeepAliveConfig: s.cfg.RelaySocket.keepAlive(),
		Control:         s.cfg.RelaySocket.control,
	}
}
