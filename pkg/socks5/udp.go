package socks5

import (
	"bytes"
	"errors"
	"io"
)

// A UDP ASSOCIATE client wraps each datagram in a header (RFC 1928 §7):
//
//	RSV:2  FRAG:1  ATYP:1  DST.ADDR  DST.PORT:2  DATA
//
// Replies come back to it with the same header naming their source.

// UDPHeaderMax is the longest UDP request header: RSV, FRAG, and a
// domain address of 255 bytes.
const UDPHeaderMax = 3 + 1 + 1 + 255 + 2

// ErrFragment is a datagram with FRAG ≠ 0. Fragmentation is optional (RFC
// 1928 §7: "an implementation that does not support fragmentation MUST
// drop any datagram whose FRAG field is other than X'00'"), and no client
// we know of sends fragments: they are dropped.
var ErrFragment = errors.New("socks5: fragmented UDP datagram (FRAG ≠ 0)")

// ParseUDPDatagram splits a client's datagram into its destination and its
// data, which aliases b. RSV is not checked: the RFC gives it no meaning,
// and a client that sets it still means its datagram.
func ParseUDPDatagram(b []byte) (Addr, []byte, error) {
	if len(b) < 4 {
		return Addr{}, nil, io.ErrUnexpectedEOF
	}
	if b[2] != 0 {
		return Addr{}, nil, ErrFragment
	}
	r := bytes.NewReader(b[3:])
	a, err := readAddr(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Addr{}, nil, err
	}
	return a, b[len(b)-r.Len():], nil
}

// AppendUDPHeader appends the header of a datagram from (or to) a: RSV,
// FRAG 0, the address. The caller appends the data.
func AppendUDPHeader(b []byte, a Addr) []byte {
	return appendAddr(append(b, 0, 0, 0), a)
}
