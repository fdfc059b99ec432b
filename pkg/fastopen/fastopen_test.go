package fastopen

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// withFD runs f on c's socket, inside RawConn.Control (where the
// descriptor stays valid), and returns f's error.
func withFD(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// sockoptInt reads an integer TCP option of c (a *net.TCPConn or
// *net.TCPListener).
func sockoptInt(t *testing.T, c syscall.Conn, opt int) int {
	t.Helper()
	var v int
	if err := withFD(c, func(fd int) (err error) {
		v, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, opt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestListenAndDialSetTheirOptions(t *testing.T) {
	lc := net.ListenConfig{Control: Listen}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := sockoptInt(t, ln.(*net.TCPListener), unix.TCP_FASTOPEN); got != ListenQueue {
		t.Errorf("listener's TCP_FASTOPEN %d, want %d", got, ListenQueue)
	}
	d := net.Dialer{Control: Dial}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := sockoptInt(t, c.(*net.TCPConn), unix.TCP_FASTOPEN_CONNECT); got != 1 {
		t.Errorf("connection's TCP_FASTOPEN_CONNECT %d, want 1", got)
	}
}

// tcpiOptSynData is TCP_INFO's tcpi_options flag for a SYN whose data the
// peer acknowledged (linux/tcp.h TCPI_OPT_SYN_DATA).
const tcpiOptSynData = 32

// In a network namespace whose net.ipv4.tcp_fastopen lets servers accept
// Fast Open (3), a TLS client's second connection to a server carries its
// ClientHello in the SYN and the server takes it; with the Linux default
// (1, clients only), it does not, and the connection works as ever. Real
// kernel TCP over the namespace's loopback.
func TestSecondTLSConnectionSendsItsClientHelloInTheSYN(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Need(t, "needs root: a network namespace of its own (its net.ipv4.tcp_fastopen); run it as root (sudo make test)")
	}
	cert := selfSigned(t)
	for _, c := range []struct {
		sysctl  string
		synData bool
		enabled bool
	}{{"3", true, true}, {"1", false, false}} {
		ns := fmt.Sprintf("fo%d-%s", os.Getpid(), c.sysctl)
		_ = wanemu.DelNetns(ns)
		if err := wanemu.AddNetns(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = wanemu.DelNetns(ns) })
		if err := wanemu.SetSysctl(ns, "net.ipv4.tcp_fastopen", c.sysctl); err != nil {
			t.Fatal(err)
		}
		var synData []bool
		err := wanemu.InNetns(ns, func() error {
			if enabled, _, err := ServerEnabled(); err != nil || enabled != c.enabled {
				return fmt.Errorf("ServerEnabled %v (%v), want %v", enabled, err, c.enabled)
			}
			lc := net.ListenConfig{Control: Listen}
			raw, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			ln := tls.NewListener(raw, &tls.Config{Certificates: []tls.Certificate{cert}})
			defer ln.Close()
			go func() {
				for {
					s, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { defer s.Close(); io.Copy(s, s) }()
				}
			}()
			d := net.Dialer{Control: Dial, Timeout: 5 * time.Second}
			for range 2 {
				conn, err := d.Dial("tcp", raw.Addr().String())
				if err != nil {
					return err
				}
				tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
				if _, err := tc.Write([]byte("x")); err != nil {
					return err
				}
				if _, err := io.ReadFull(tc, make([]byte, 1)); err != nil {
					return err
				}
				if err := withFD(conn.(*net.TCPConn), func(fd int) error {
					info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
					if err == nil {
						synData = append(synData, info.Options&tcpiOptSynData != 0)
					}
					return err
				}); err != nil {
					return err
				}
				tc.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("tcp_fastopen=%s: %v", c.sysctl, err)
		}
		if synData[0] || synData[1] != c.synData {
			t.Errorf("tcp_fastopen=%s: data in the SYN acknowledged on the first and second connection: %v, want [false %v]", c.sysctl, synData, c.synData)
		}
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
