package hostnet

import (
	"net"
	"os"
	"testing"
)

func TestSendWindowOfWmem(t *testing.T) {
	// The world lab's relay at the default 4 MiB kept 4.07 MB in flight.
	if w := SendWindowOfWmem(4 << 20); w < 4_000_000 || w > 4_100_000 {
		t.Fatalf("4 MiB tcp_wmem: send window %d, want ~4.07 MB", w)
	}
	if w := SendWindowOfWmem(0); w != 0 {
		t.Fatalf("unknown tcp_wmem: send window %d, want 0 (unknown)", w)
	}
}

func TestWindowOfRmem(t *testing.T) {
	if w := WindowOfRmem(262144); w < 150_000 || w > 165_000 {
		t.Fatalf("256 KiB tcp_rmem: window %d, want ~158 KB (split.md's direct rate)", w)
	}
}

// The limits are the sysctls as the kernel has them, the window derived
// from tcp_rmem's max; a file that is not there reads as 0.
func TestReadLimits(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/ipv4/tcp_rmem"); err != nil {
		t.Skip("no /proc/sys/net/ipv4/tcp_rmem here")
	}
	l := ReadLimits()
	if l.TCPRmemMaxBytes <= 0 || l.TCPWmemMaxBytes <= 0 || l.WindowBytesApprox != WindowOfRmem(l.TCPRmemMaxBytes) || l.CongestionControl == "" {
		t.Fatalf("limits %+v", l)
	}
	if RecvWindowBytes() != l.WindowBytesApprox || SendWindowBytes() != SendWindowOfWmem(l.TCPWmemMaxBytes) {
		t.Fatalf("windows %d, %d; limits %+v", RecvWindowBytes(), SendWindowBytes(), l)
	}
	if n := ReadSysctlInt("net/ipv4/no_such_sysctl", 0); n != 0 {
		t.Fatalf("a missing sysctl read as %d", n)
	}
	if n := ReadSysctlInt("net/ipv4/tcp_rmem", 3); n != 0 {
		t.Fatalf("tcp_rmem's fourth field read as %d", n)
	}
}

// A connected socket's TCP_INFO has its handshake's RTT.
func TestTCPInfo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := TCPInfo(c.(*net.TCPConn))
	if err != nil || info.Rtt == 0 {
		t.Fatalf("TCP_INFO %+v, %v", info, err)
	}
}
