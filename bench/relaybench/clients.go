package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// dialSOCKS5 performs a no-auth SOCKS5 CONNECT to target through proxy and
// returns the raw connection.
func dialSOCKS5(proxy string, target *net.TCPAddr) (*net.TCPConn, error) {
	cn, err := net.DialTimeout("tcp", proxy, handshakeLimit)
	if err != nil {
		return nil, err
	}
	c := cn.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(handshakeLimit))
	fail := func(err error) (*net.TCPConn, error) { c.Close(); return nil, err }
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return fail(err)
	}
	var b [262]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return fail(fmt.Errorf("socks5 greeting: %w", err))
	}
	if b[0] != 5 || b[1] != 0 {
		return fail(fmt.Errorf("socks5 greeting reply % x", b[:2]))
	}
	ip4 := target.IP.To4()
	req := append([]byte{5, 1, 0, 1}, ip4...)
	req = binary.BigEndian.AppendUint16(req, uint16(target.Port))
	if _, err := c.Write(req); err != nil {
		return fail(err)
	}
	if _, err := io.ReadFull(c, b[:5]); err != nil {
		return fail(fmt.Errorf("socks5 connect reply: %w", err))
	}
	if b[0] != 5 || b[1] != 0 {
		return fail(fmt.Errorf("socks5 connect refused, REP=%d", b[1]))
	}
	var rest int
	switch b[3] {
	case 1:
		rest = 3 + 2
	case 3:
		rest = int(b[4]) + 2
	case 4:
		rest = 15 + 2
	default:
		return fail(fmt.Errorf("socks5 reply ATYP %d", b[3]))
	}
	if _, err := io.ReadFull(c, b[5:5+rest]); err != nil {
		return fail(fmt.Errorf("socks5 connect reply: %w", err))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// dialHTTPConnect opens a tunnel with HTTP CONNECT, reading the response
// byte by byte so no payload is buffered away from the raw connection.
func dialHTTPConnect(proxy string, target *net.TCPAddr) (*net.TCPConn, error) {
	cn, err := net.DialTimeout("tcp", proxy, handshakeLimit)
	if err != nil {
		return nil, err
	}
	c := cn.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(handshakeLimit))
	fail := func(err error) (*net.TCPConn, error) { c.Close(); return nil, err }
	t := target.String()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", t, t); err != nil {
		return fail(err)
	}
	var resp []byte
	var one [1]byte
	for !bytes.HasSuffix(resp, []byte("\r\n\r\n")) {
		if len(resp) > 16<<10 {
			return fail(errors.New("http connect: response header too long"))
		}
		if _, err := io.ReadFull(c, one[:]); err != nil {
			return fail(fmt.Errorf("http connect response: %w (got %q)", err, resp))
		}
		resp = append(resp, one[0])
	}
	status := strings.SplitN(string(resp), "\r\n", 2)[0]
	f := strings.Fields(status)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || f[1] != "200" {
		return fail(fmt.Errorf("http connect: %q", status))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func dialThrough(front, entry string, target *net.TCPAddr) (*net.TCPConn, error) {
	switch front {
	case "socks5":
		return dialSOCKS5(entry, target)
	case "http":
		return dialHTTPConnect(entry, target)
	default:
		cn, err := net.DialTimeout("tcp", target.String(), handshakeLimit)
		if err != nil {
			return nil, err
		}
		return cn.(*net.TCPConn), nil
	}
}
