package httpconnect

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// proxyOnce accepts one TCP conn, reads the CONNECT request, writes answer.
func proxyOnce(t *testing.T, answer string) (addr string, gotReq chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	gotReq = make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		gotReq <- string(buf[:n])
		// Split the answer over two writes to exercise the peek loop.
		half := len(answer) / 2
		_, _ = c.Write([]byte(answer[:half]))
		time.Sleep(20 * time.Millisecond)
		_, _ = c.Write([]byte(answer[half:]))
		time.Sleep(100 * time.Millisecond)
	}()
	return ln.Addr().String(), gotReq
}

func TestThroughKeepsBytesAfterHeader(t *testing.T) {
	addr, req := proxyOnce(t, "HTTP/1.1 200 Connection established\r\nVia: x\r\n\r\nEARLY")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := (Client{User: "u", Password: "p"}).Through(context.Background(), c, "example.com:443"); err != nil {
		t.Fatal(err)
	}
	r := <-req
	if !strings.HasPrefix(r, "CONNECT example.com:443 HTTP/1.1\r\n") || !strings.Contains(r, "Proxy-Authorization: Basic dTpw\r\n") {
		t.Fatalf("request: %q", r)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "EARLY" {
		t.Fatalf("tunnel bytes after the header: %q %v", got, err)
	}
}

func TestThroughStatusKinds(t *testing.T) {
	for _, tc := range []struct {
		answer string
		kind   chain.Kind
	}{
		{"HTTP/1.1 403 Forbidden\r\n\r\n", chain.KindDenied},
		{"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", chain.KindAuth},
		{"HTTP/1.1 504 Gateway Timeout\r\n\r\n", chain.KindTimeout},
		{"HTTP/1.1 502 Bad Gateway\r\nX-Relaymesh-Error: refused\r\n\r\n", chain.KindRefused},
		{"HTTP/1.1 502 Bad Gateway\r\n\r\n", chain.KindGeneral},
	} {
		addr, _ := proxyOnce(t, tc.answer)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		err = (Client{}).Through(context.Background(), c, "example.com:443")
		c.Close()
		if err == nil || chain.Classify(err) != tc.kind {
			t.Errorf("%q: got %v (kind %v), want kind %v", tc.answer, err, chain.Classify(err), tc.kind)
		}
	}
}

// FuzzThrough feeds arbitrary proxy answers (the bytewise path over net.Pipe).
func FuzzThrough(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 407 x\r\nProxy-Authenticate: Basic\r\n\r\n"))
	f.Add([]byte("garbage\n\n"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		a, b := net.Pipe()
		go func() {
			buf := make([]byte, 512)
			_, _ = b.Read(buf)
			_, _ = b.Write(answer)
			b.Close()
		}()
		_ = a.SetDeadline(time.Now().Add(2 * time.Second))
		err := (Client{}).Through(context.Background(), a, "h:1")
		a.Close()
		if err != nil && errors.Is(err, errHeaderTooLong) && len(answer) < MaxHeaderBytes {
			t.Fatalf("too long at %d bytes", len(answer))
		}
	})
}
