package main

import (
	"context"
	"net"
	"time"

	"github.com/relaymesh/relaymesh/pkg/httpconnect"
	"github.com/relaymesh/relaymesh/pkg/socks5"
)

// dialThrough opens a tunnel to target through the proxy entry speaks
// front ("socks5", "http"; anything else: target directly), with the
// project's own hop clients, which leave the connection the raw tunnel (a
// *net.TCPConn, so splice and TCP_INFO work on it) with no byte buffered
// away. Every kind of relay in a comparison is reached with the same
// client, so the clients cost the same in every row.
func dialThrough(front, entry string, target *net.TCPAddr) (*net.TCPConn, error) {
	var hop interface { // chain.HopDialer
		Through(ctx context.Context, conn net.Conn, addr string) error
	}
	switch front {
	case "socks5":
		hop = socks5.Client{}
	case "http":
		hop = httpconnect.Client{}
	default:
		cn, err := net.DialTimeout("tcp", target.String(), handshakeLimit)
		if err != nil {
			return nil, err
		}
		return cn.(*net.TCPConn), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), handshakeLimit)
	defer cancel()
	cn, err := (&net.Dialer{}).DialContext(ctx, "tcp", entry)
	if err != nil {
		return nil, err
	}
	// The hop clients leave deadlines to their caller, as the chain does.
	cn.SetDeadline(time.Now().Add(handshakeLimit))
	if err := hop.Through(ctx, cn, target.String()); err != nil {
		cn.Close()
		return nil, err
	}
	cn.SetDeadline(time.Time{})
	return cn.(*net.TCPConn), nil
}
