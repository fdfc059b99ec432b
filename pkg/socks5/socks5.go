// Package socks5 holds the SOCKS5 wire protocol (RFC 1928) and username/password
// sub-negotiation (RFC 1929): pure codecs that read from an io.Reader and
// marshal to []byte, plus a client hop (client.go). No sockets are opened and
// nothing is logged here. Every length a parser reads is a single byte, so no
// parser allocates more than 255 bytes for one field.
package socks5

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Version is the SOCKS protocol version byte (RFC 1928 §3).
const Version = 0x05

// Method is an authentication method (RFC 1928 §3).
type Method byte

const (
	MethodNoAuth       Method = 0x00
	MethodUserPass     Method = 0x02 // RFC 1929
	MethodNoAcceptable Method = 0xFF
)

// Command is a request command (RFC 1928 §4).
type Command byte

const (
	CmdConnect      Command = 0x01
	CmdBind         Command = 0x02
	CmdUDPAssociate Command = 0x03
)

// AddrType is the ATYP field (RFC 1928 §5).
type AddrType byte

const (
	AtypIPv4   AddrType = 0x01
	AtypDomain AddrType = 0x03
	AtypIPv6   AddrType = 0x04
)

// Reply is the REP field of a server reply (RFC 1928 §6).
type Reply byte

const (
	ReplySucceeded           Reply = 0x00
	ReplyGeneralFailure      Reply = 0x01
	ReplyNotAllowed          Reply = 0x02
	ReplyNetworkUnreachable  Reply = 0x03
	ReplyHostUnreachable     Reply = 0x04
	ReplyConnectionRefused   Reply = 0x05
	ReplyTTLExpired          Reply = 0x06
	ReplyCommandNotSupported Reply = 0x07
	ReplyAddrNotSupported    Reply = 0x08
)

func (r Reply) String() string {
	switch r {
	case ReplySucceeded:
		return "succeeded"
	case ReplyGeneralFailure:
		return "general SOCKS server failure"
	case ReplyNotAllowed:
		return "connection not allowed by ruleset"
	case ReplyNetworkUnreachable:
		return "network unreachable"
	case ReplyHostUnreachable:
		return "host unreachable"
	case ReplyConnectionRefused:
		return "connection refused"
	case ReplyTTLExpired:
		return "TTL expired"
	case ReplyCommandNotSupported:
		return "command not supported"
	case ReplyAddrNotSupported:
		return "address type not supported"
	default:
		return "unknown reply 0x" + strconv.FormatUint(uint64(r), 16)
	}
}

// userPassVersion is the sub-negotiation version of RFC 1929 §2.
const userPassVersion = 0x01

// Errors a server maps to replies. ErrVersion and ErrNoMethods mean "close
// without a reply"; ErrAddrType and ErrCommand have replies of their own.
var (
	ErrVersion   = errors.New("socks5: wrong protocol version")
	ErrNoMethods = errors.New("socks5: greeting offers no methods")
	ErrAddrType  = errors.New("socks5: unknown address type")
	ErrEmptyHost = errors.New("socks5: empty domain name")
	ErrBadHost   = errors.New("socks5: domain name holds control characters or spaces")
	ErrReserved  = errors.New("socks5: reserved byte is not zero")
)

// Addr is a SOCKS5 address: a domain name or an IP, and a port.
type Addr struct {
	Host string     // domain name; empty when IP is set
	IP   netip.Addr // valid when the address is an IP literal
	Port uint16
}

// String returns host:port (IPv6 bracketed).
func (a Addr) String() string {
	host := a.Host
	if a.IP.IsValid() {
		host = a.IP.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(a.Port)))
}

// ParseAddr turns host:port into an Addr. Literal IPs become IP addresses,
// anything else a domain (at most 255 bytes).
func ParseAddr(hostport string) (Addr, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return Addr{}, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return Addr{}, fmt.Errorf("bad port %q", portStr)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return Addr{IP: ip.WithZone(""), Port: uint16(port)}, nil
	}
	if host == "" {
		return Addr{}, ErrEmptyHost
	}
	if len(host) > 255 {
		return Addr{}, fmt.Errorf("domain name longer than 255 bytes")
	}
	if strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return Addr{}, ErrBadHost
	}
	return Addr{Host: host, Port: uint16(port)}, nil
}

// appendAddr appends ATYP, address and port.
func appendAddr(b []byte, a Addr) []byte {
	switch {
	case a.IP.Is4():
		b = append(b, byte(AtypIPv4))
		ip4 := a.IP.As4()
		b = append(b, ip4[:]...)
	case a.IP.IsValid():
		b = append(b, byte(AtypIPv6))
		ip16 := a.IP.As16()
		b = append(b, ip16[:]...)
	default:
		b = append(b, byte(AtypDomain), byte(len(a.Host)))
		b = append(b, a.Host...)
	}
	return binary.BigEndian.AppendUint16(b, a.Port)
}

// readAddr reads ATYP, address and port.
func readAddr(r io.Reader) (Addr, error) {
	var atyp [1]byte
	if _, err := io.ReadFull(r, atyp[:]); err != nil {
		return Addr{}, err
	}
	var a Addr
	switch AddrType(atyp[0]) {
	case AtypIPv4:
		var ip [4]byte
		if _, err := io.ReadFull(r, ip[:]); err != nil {
			return Addr{}, err
		}
		a.IP = netip.AddrFrom4(ip)
	case AtypIPv6:
		var ip [16]byte
		if _, err := io.ReadFull(r, ip[:]); err != nil {
			return Addr{}, err
		}
		a.IP = netip.AddrFrom16(ip)
	case AtypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return Addr{}, err
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return Addr{}, err
		}
		if len(name) == 0 {
			return Addr{}, ErrEmptyHost
		}
		// No name has these; passed on, CR/LF would inject headers into
		// an HTTP next hop's CONNECT request.
		if bytes.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return Addr{}, ErrBadHost
		}
		a.Host = string(name)
	default:
		return Addr{}, ErrAddrType
	}
	var port [2]byte
	if _, err := io.ReadFull(r, port[:]); err != nil {
		return Addr{}, err
	}
	a.Port = binary.BigEndian.Uint16(port[:])
	return a, nil
}

// ReadGreeting reads the client's version/methods message (RFC 1928 §3).
func ReadGreeting(r io.Reader) ([]Method, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if hdr[0] != Version {
		return nil, ErrVersion
	}
	if hdr[1] == 0 {
		return nil, ErrNoMethods
	}
	raw := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, err
	}
	methods := make([]Method, len(raw))
	for i, m := range raw {
		methods[i] = Method(m)
	}
	return methods, nil
}

// MarshalGreeting is the client's version/methods message.
func MarshalGreeting(methods ...Method) []byte {
	b := []byte{Version, byte(len(methods))}
	for _, m := range methods {
		b = append(b, byte(m))
	}
	return b
}

// MarshalMethodChoice is the server's answer to a greeting.
func MarshalMethodChoice(m Method) []byte { return []byte{Version, byte(m)} }

// ReadMethodChoice reads the server's answer to a greeting (client side).
func ReadMethodChoice(r io.Reader) (Method, error) {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	if b[0] != Version {
		return 0, ErrVersion
	}
	return Method(b[1]), nil
}

// ReadUserPass reads an RFC 1929 username/password request.
func ReadUserPass(r io.Reader) (user, password string, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", "", err
	}
	if hdr[0] != userPassVersion {
		return "", "", fmt.Errorf("socks5: auth sub-negotiation version %d, want 1", hdr[0])
	}
	u := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, u); err != nil {
		return "", "", err
	}
	var plen [1]byte
	if _, err := io.ReadFull(r, plen[:]); err != nil {
		return "", "", err
	}
	p := make([]byte, plen[0])
	if _, err := io.ReadFull(r, p); err != nil {
		return "", "", err
	}
	return string(u), string(p), nil
}

// MarshalUserPass is the client's RFC 1929 request. Fields longer than 255
// bytes are an error, not truncated.
func MarshalUserPass(user, password string) ([]byte, error) {
	if len(user) > 255 || len(password) > 255 {
		return nil, errors.New("socks5: username and password are limited to 255 bytes each")
	}
	b := []byte{userPassVersion, byte(len(user))}
	b = append(b, user...)
	b = append(b, byte(len(password)))
	return append(b, password...), nil
}

// MarshalAuthStatus is the server's RFC 1929 answer; ok=false means failure.
func MarshalAuthStatus(ok bool) []byte {
	if ok {
		return []byte{userPassVersion, 0x00}
	}
	return []byte{userPassVersion, 0x01}
}

// ReadAuthStatus reads the server's RFC 1929 answer (client side).
func ReadAuthStatus(r io.Reader) (bool, error) {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return false, err
	}
	// Some servers echo version 0x05 here; accept both, judge by status.
	if b[0] != userPassVersion && b[0] != Version {
		return false, fmt.Errorf("socks5: auth status version %d", b[0])
	}
	return b[1] == 0x00, nil
}

// Request is a client request (RFC 1928 §4).
type Request struct {
	Cmd  Command
	Addr Addr
}

// ReadRequest reads a client request. On ErrAddrType the server should reply
// ReplyAddrNotSupported; the command is returned as read so the server can
// answer ReplyCommandNotSupported for BIND / UDP ASSOCIATE itself.
func ReadRequest(r io.Reader) (Request, error) {
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Request{}, err
	}
	if hdr[0] != Version {
		return Request{}, ErrVersion
	}
	req := Request{Cmd: Command(hdr[1])}
	if hdr[2] != 0 {
		return req, ErrReserved
	}
	a, err := readAddr(r)
	if err != nil {
		return req, err
	}
	req.Addr = a
	return req, nil
}

// MarshalRequest is the client's request.
func MarshalRequest(cmd Command, a Addr) []byte {
	return appendAddr([]byte{Version, byte(cmd), 0x00}, a)
}

// MarshalReply is the server's reply. bound may be the zero Addr, which is
// sent as 0.0.0.0:0.
func MarshalReply(rep Reply, bound Addr) []byte {
	if !bound.IP.IsValid() && bound.Host == "" {
		bound.IP = netip.IPv4Unspecified()
	}
	return appendAddr([]byte{Version, byte(rep), 0x00}, bound)
}

// ReadReply reads a server reply (client side). It never trusts the server: a
// wrong version or an unknown address type is an error, not a panic.
func ReadReply(r io.Reader) (Reply, Addr, error) {
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, Addr{}, err
	}
	if hdr[0] != Version {
		return 0, Addr{}, ErrVersion
	}
	rep := Reply(hdr[1])
	a, err := readAddr(r)
	if err == ErrEmptyHost {
		err = nil // an empty bound name is odd but harmless for a client
	}
	return rep, a, err
}
