package relay

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// An open tunnel, through either front end, is two copies on goroutines
// of their own: the handler that did the handshake and the dial has
// returned, so its stack is not held for the tunnel's life. The tunnel
// still carries bytes both ways, and Shutdown waits for it, counting it
// active until it ends.
func TestTunnelOutlivesItsHandler(t *testing.T) {
	echo := echoServer(t)
	cfg := Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Policy.AllowPrivate = true
	s := startServer(t, cfg)

	d, err := proxy.SOCKS5("tcp", s.SOCKSAddr(), nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	viaSOCKS, err := d.Dial("tcp", echo)
	if err != nil {
		t.Fatal(err)
	}
	defer viaSOCKS.Close()
	viaHTTP := connectOverHTTP(t, s.HTTPAddr(), echo)
	defer viaHTTP.Close()
	for name, c := range map[string]net.Conn{"socks5": viaSOCKS, "http": viaHTTP} {
		roundTrip(t, name, c)
	}

	// The handlers return right after starting the tunnel; give them a
	// moment, then look at every goroutine's stack.
	var held []string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		held = handlersHeld()
		if len(held) == 0 {
			break
		}
	}
	if len(held) > 0 {
		t.Fatalf("with two tunnels open, their handlers are still running:\n%s", strings.Join(held, "\n\n"))
	}
	if n := s.active(); n != 2 {
		t.Errorf("active conns with two tunnels open: %d, want 2", n)
	}
	for name, c := range map[string]net.Conn{"socks5": viaSOCKS, "http": viaHTTP} {
		roundTrip(t, name+" after its handler returned", c)
	}

	// Shutdown waits for the tunnels within its grace, then closes them;
	// the clients see their tunnels end.
	done := make(chan struct{})
	go func() { s.Shutdown(200 * time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return with two handed-off tunnels open")
	}
	for name, c := range map[string]net.Conn{"socks5": viaSOCKS, "http": viaHTTP} {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("%s: the tunnel still carries bytes after Shutdown", name)
		}
	}
	if n := s.active(); n != 0 {
		t.Errorf("active conns after Shutdown: %d, want 0", n)
	}
}

// handlersHeld is the stacks of goroutines inside a front end's handler.
func handlersHeld() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var held []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Server).serveSOCKS") || strings.Contains(g, "(*httpFrontend).ServeHTTP") {
			held = append(held, g)
		}
	}
	return held
}

func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func connectOverHTTP(t *testing.T, proxyAddr, dst string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "CONNECT "+dst+" HTTP/1.1\r\nHost: "+dst+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
		t.Fatalf("CONNECT %s: %s, %d bytes read ahead", dst, resp.Status, br.Buffered())
	}
	return c
}

func roundTrip(t *testing.T, name string, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("%s: write: %v", name, err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("%s: echo: %q, %v", name, got, err)
	}
}
