// Package httpconnect is the client side of an HTTP CONNECT tunnel (RFC 9110
// §9.3.6): a chain hop through any HTTP proxy (squid, another relayd, ...).
package httpconnect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/chain"
)

// MaxHeaderBytes bounds the proxy's response header; a longer one is an error.
const MaxHeaderBytes = 16 << 10

// ErrorHeader carries a chain.Kind label from one relayd to the previous one,
// so a failure keeps its precise kind across HTTP hops.
const ErrorHeader = "X-Relaymesh-Error"

// Client sends CONNECT over an existing conn.
type Client struct {
	User     string // empty: no Proxy-Authorization
	Password string
}

// Through implements chain.HopDialer. The response header is read without
// consuming any tunnel byte that follows it (MSG_PEEK on sockets, one byte at a
// time otherwise), so the conn stays the raw tunnel and a *net.TCPConn.
func (c Client) Through(ctx context.Context, conn net.Conn, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("http connect: target %q: %w", addr, err)
	}
	// The target goes into the request line and Host header verbatim.
	if strings.ContainsFunc(addr, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("http connect: target %q holds control characters or spaces", addr)
	}
	var req strings.Builder
	fmt.Fprintf(&req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n", addr, addr)
	if c.User != "" || c.Password != "" {
		cred := base64.StdEncoding.EncodeToString([]byte(c.User + ":" + c.Password))
		fmt.Fprintf(&req, "Proxy-Authorization: Basic %s\r\n", cred)
	}
	req.WriteString("\r\n")
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return fmt.Errorf("http connect: send request: %w", err)
	}
	hdr, err := readHeader(conn)
	if err != nil {
		return fmt.Errorf("http connect: read response: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(hdr)), nil)
	if err != nil {
		return fmt.Errorf("http connect: parse response: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	msg := "http connect: proxy answered " + resp.Status
	if resp.StatusCode == http.StatusProxyAuthRequired {
		return &chain.HopAuthError{Msg: msg}
	}
	return &chain.RemoteError{Kind: kindOfResponse(resp), Msg: msg}
}

func kindOfResponse(resp *http.Response) chain.Kind {
	if k, ok := chain.ParseKindLabel(resp.Header.Get(ErrorHeader)); ok {
		return k
	}
	switch resp.StatusCode {
	case http.StatusForbidden:
		return chain.KindDenied
	case http.StatusGatewayTimeout:
		return chain.KindTimeout
	default:
		return chain.KindGeneral
	}
}

var errHeaderTooLong = errors.New("response header longer than 16 KiB")

// readHeader returns the bytes of an HTTP header up to and including the blank
// line, consuming nothing after it.
func readHeader(conn net.Conn) ([]byte, error) {
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return readHeaderPeek(conn, rc)
		}
	}
	return readHeaderBytewise(conn)
}

func readHeaderBytewise(conn net.Conn) ([]byte, error) {
	var hdr []byte
	var b [1]byte
	for len(hdr) < MaxHeaderBytes {
		if _, err := conn.Read(b[:]); err != nil {
			return nil, err
		}
		hdr = append(hdr, b[0])
		if bytes.HasSuffix(hdr, []byte("\r\n\r\n")) || bytes.HasSuffix(hdr, []byte("\n\n")) {
			return hdr, nil
		}
	}
	return nil, errHeaderTooLong
}

// readHeaderPeek peeks at the socket until the header end is in view, then
// reads exactly the header. Deadlines on conn apply (rc.Read waits through the
// runtime poller).
func readHeaderPeek(conn net.Conn, rc syscall.RawConn) ([]byte, error) {
	buf := make([]byte, MaxHeaderBytes)
	seen := 0
	for {
		n, err := peekMore(rc, buf, seen)
		if err != nil {
			return nil, err
		}
		if end := headerEnd(buf[:n]); end > 0 {
			out := make([]byte, end)
			if _, err := io.ReadFull(conn, out); err != nil {
				return nil, err
			}
			return out, nil
		}
		if n == len(buf) {
			return nil, errHeaderTooLong
		}
		seen = n
	}
}

// peekMore blocks until the socket holds more than have bytes (or EOF) and
// returns how many it holds, without consuming them. The runtime poller is
// edge-triggered, so returning false for "same bytes as before" parks us
// until new data arrives instead of spinning.
func peekMore(rc syscall.RawConn, buf []byte, have int) (int, error) {
	var n int
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if rerr == unix.EAGAIN || rerr == unix.EINTR {
			return false
		}
		return rerr != nil || n == 0 || n > have
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, fmt.Errorf("proxy closed the connection: %w", io.ErrUnexpectedEOF)
	}
	return n, nil
}

func headerEnd(b []byte) int {
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return i + 4
	}
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
		return i + 2
	}
	return -1
}
