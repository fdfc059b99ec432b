// Command copyrelay is the benchmark floor: a minimal SOCKS5 CONNECT server
// (no auth, no error handling beyond dropping the connection) that, after the
// handshake, runs two io.Copy calls between the raw *net.TCPConn pair so the
// kernel splices. With -next it dials an upstream SOCKS5 proxy and forwards
// the same CONNECT request there (hop-by-hop chaining).
package main

import (
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"strconv"
)

var next = flag.String("next", "", "upstream SOCKS5 proxy host:port (empty: dial the target)")

func main() {
	listen := flag.String("listen", "127.0.0.1:1080", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c.(*net.TCPConn))
	}
}

func serve(c *net.TCPConn) {
	defer c.Close()
	b := make([]byte, 262) // greeting, then request: 4 + 1 + 255 + 2
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 5 {
		return
	}
	if _, err := io.ReadFull(c, b[:b[1]]); err != nil {
		return
	}
	c.Write([]byte{5, 0}) // no authentication
	req, err := readMsg(c, b)
	if err != nil || req[1] != 1 { // CONNECT only
		return
	}
	var up net.Conn
	if *next == "" {
		host := string(req[5 : len(req)-2]) // ATYP 3: domain name
		if req[3] != 3 {
			host = net.IP(req[4 : len(req)-2]).String()
		}
		port := int(req[len(req)-2])<<8 | int(req[len(req)-1])
		up, err = net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	} else if up, err = net.Dial("tcp", *next); err == nil {
		up.Write([]byte{5, 1, 0}) // minimal client: no auth, same CONNECT
		rb := make([]byte, 262)
		if _, err = io.ReadFull(up, rb[:2]); err == nil && rb[1] == 0 {
			up.Write(req)
			if rb, err = readMsg(up, rb); err == nil && rb[1] != 0 {
				err = errors.New("upstream refused")
			}
		} else if err == nil {
			err = errors.New("upstream wants auth")
		}
	}
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		if up != nil {
			up.Close()
		}
		return
	}
	u := up.(*net.TCPConn)
	defer u.Close()
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	done := make(chan struct{})
	go func() { io.Copy(u, c); u.CloseWrite(); close(done) }() // splice
	io.Copy(c, u)
	c.CloseWrite()
	<-done
}

// readMsg reads a SOCKS5 request or reply (VER CMD/REP RSV ATYP ADDR PORT)
// into b and returns the filled prefix.
func readMsg(r io.Reader, b []byte) ([]byte, error) {
	if _, err := io.ReadFull(r, b[:5]); err != nil {
		return nil, err
	}
	n := map[byte]int{1: 4 - 1, 3: int(b[4]), 4: 16 - 1}[b[3]] + 2
	if n == 2 && b[3] != 3 {
		return nil, errors.New("bad address type")
	}
	_, err := io.ReadFull(r, b[5:5+n])
	return b[:5+n], err
}
