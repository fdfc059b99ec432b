package route

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// A UDP association (Request.UDP) carries datagrams on its link after the
// status, each in one frame (docs/protocol.md, "UDP associations"):
//
//	frame = len:u16  addr  payload      len = bytes of addr and payload
//
// addr is the request's address encoding: toward the last relay the
// datagram's destination (an IP or a domain name), back toward the entry
// its source (always an IP). A frame is bounded by its 16-bit length, so
// no reader allocates more than MaxFrameBytes for one.

// MaxFrameBytes bounds a frame's body, address and payload.
const MaxFrameBytes = 65535

// frameLenBytes is the length prefix.
const frameLenBytes = 2

// Datagram is one UDP datagram on an association's link.
type Datagram struct {
	// Host is a domain name the last relay resolves (toward it only);
	// empty when IP is set.
	Host    string
	IP      netip.Addr
	Port    uint16
	Payload []byte
}

// Addr is the datagram's address as host:port.
func (d *Datagram) Addr() string {
	host := d.Host
	if d.IP.IsValid() {
		host = d.IP.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(d.Port)))
}

// AppendFrame appends d's frame to b. An address the protocol cannot carry
// (port 0, a domain with bytes other than [A-Za-z0-9._-], an IP literal
// as a domain) or a frame over MaxFrameBytes is an error, and b is
// returned unchanged.
func AppendFrame(b []byte, d *Datagram) ([]byte, error) {
	if d.Port == 0 {
		return b, fmt.Errorf("%w: port 0", ErrMalformed)
	}
	start := len(b)
	b = append(b, 0, 0)
	switch {
	case d.IP.Is4():
		ip := d.IP.As4()
		b = append(append(b, atypIPv4), ip[:]...)
	case d.IP.IsValid():
		if d.IP.Zone() != "" {
			return b[:start], fmt.Errorf("%w: zoned address", ErrMalformed)
		}
		ip := d.IP.As16()
		b = append(append(b, atypIPv6), ip[:]...)
	default:
		if err := checkDomain(d.Host); err != nil {
			return b[:start], fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if _, err := netip.ParseAddr(d.Host); err == nil {
			return b[:start], fmt.Errorf("%w: IP literal %q as a domain", ErrMalformed, d.Host)
		}
		b = append(append(b, atypDomain, byte(len(d.Host))), d.Host...)
	}
	b = binary.BigEndian.AppendUint16(b, d.Port)
	n := len(b) - start - frameLenBytes + len(d.Payload)
	if n > MaxFrameBytes {
		return b[:start], fmt.Errorf("%w: frame of %d bytes (max %d)", ErrTooLarge, n, MaxFrameBytes)
	}
	binary.BigEndian.PutUint16(b[start:], uint16(n))
	return append(b, d.Payload...), nil
}

// ReadFrame reads one frame from r into buf (at least MaxFrameBytes long:
// no length field decides an allocation) and parses it. The datagram's
// Payload aliases buf. It reads no byte past the frame. A clean end of
// the stream between frames is io.EOF.
func ReadFrame(r io.Reader, buf []byte) (Datagram, error) {
	var n [frameLenBytes]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return Datagram{}, err
	}
	body := buf[:binary.BigEndian.Uint16(n[:])]
	if _, err := io.ReadFull(r, body); err != nil {
		return Datagram{}, noEOF(err)
	}
	return ParseFrame(body)
}

// ParseFrame parses a frame's body (what follows its length). The
// datagram's Payload aliases body.
func ParseFrame(body []byte) (Datagram, error) {
	var d Datagram
	if len(body) < 1 {
		return d, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	rest := body[1:]
	switch body[0] {
	case atypIPv4:
		if len(rest) < 4 {
			return d, fmt.Errorf("%w: short IPv4 address", ErrMalformed)
		}
		d.IP, rest = netip.AddrFrom4([4]byte(rest[:4])), rest[4:]
	case atypIPv6:
		if len(rest) < 16 {
			return d, fmt.Errorf("%w: short IPv6 address", ErrMalformed)
		}
		d.IP, rest = netip.AddrFrom16([16]byte(rest[:16])), rest[16:]
	case atypDomain:
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return d, fmt.Errorf("%w: short domain", ErrMalformed)
		}
		d.Host, rest = string(rest[1:1+int(rest[0])]), rest[1+int(rest[0]):]
		if err := checkDomain(d.Host); err != nil {
			return Datagram{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if _, err := netip.ParseAddr(d.Host); err == nil {
			return Datagram{}, fmt.Errorf("%w: IP literal %q sent as a domain", ErrMalformed, d.Host)
		}
	default:
		return d, fmt.Errorf("%w: address type %d", ErrMalformed, body[0])
	}
	if len(rest) < 2 {
		return Datagram{}, fmt.Errorf("%w: short port", ErrMalformed)
	}
	if d.Port = binary.BigEndian.Uint16(rest); d.Port == 0 {
		return Datagram{}, fmt.Errorf("%w: port 0", ErrMalformed)
	}
	d.Payload = rest[2:]
	return d, nil
}

// SplitFrame parses the first of the frames in b and returns it and the
// frames after it. The datagram's Payload aliases b.
func SplitFrame(b []byte) (Datagram, []byte, error) {
	if len(b) < frameLenBytes {
		return Datagram{}, nil, fmt.Errorf("%w: short frame length", ErrMalformed)
	}
	n := frameLenBytes + int(binary.BigEndian.Uint16(b))
	if len(b) < n {
		return Datagram{}, nil, fmt.Errorf("%w: frame of %d bytes in %d", ErrMalformed, n, len(b))
	}
	d, err := ParseFrame(b[frameLenBytes:n])
	return d, b[n:], err
}
