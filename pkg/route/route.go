// Package route is relaymesh's inter-relay protocol (docs/protocol.md): the
// entry relay sends one request header carrying the remaining hops and the
// final destination, authenticated with the fleet secret; each relay pops
// itself and forwards it; the status travels back in one response.
//
// This file and replay.go are the pure codec: io.Reader / []byte in, values
// out, no sockets, no logging. client.go is the chain.HopDialer built on it.
package route

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/stripe"
)

// Wire constants. Every length on the wire is a single byte, so no length
// field can ask for more than 255 bytes; MaxHops bounds the list.
const (
	Version = 1
	// VersionNamed is a request whose hops each carry the name of the
	// relay expected there (Request.Names): the relay that dials a hop
	// checks the certificate names it before it sends anything.
	VersionNamed = 2
	// VersionStriped is a request some of whose segments run over
	// several links (pkg/stripe): a flags byte (bit 0: names follow the
	// hops, as in VersionNamed) and the links of the segment into the
	// receiver follow the hop count, and each hop carries the links of
	// the segment into it. Only sent when a segment is striped, so a
	// relay from before it never sees one unasked. A join is always
	// VersionStriped.
	VersionStriped = 3
	// MaxStripes is the most links a segment runs over.
	MaxStripes = stripe.MaxLinks
	MaxHops    = 8
	// MaxNameBytes bounds a relay name (the rule is pkg/linktls's).
	MaxNameBytes = linktls.MaxNameBytes
	MaxHostBytes = 255
	MaxReason    = 255
	NonceBytes   = 16
	MACBytes     = sha256.Size
	// MaxHeaderBytes bounds a request header: 31 fixed bytes, up to 9
	// addresses of at most 259 bytes, 8 names of at most 64, 10 bytes of
	// stripes, the MAC.
	// Marshal never exceeds it.
	MaxHeaderBytes = 4096
)

var magic = [4]byte{'R', 'M', 'S', 'H'}

// Message types, part of what the MAC covers so a response can never be
// taken for a request or the other way round, nor a UDP association's
// request for a tunnel's.
const (
	typeRequest  = 0x01
	typeResponse = 0x02
	// typeAssociate is a request that opens a UDP association
	// (datagram.go): hops as a request's, no final destination (each
	// datagram names its own). A relay from before it closes the link
	// without a status, as on any header it cannot parse.
	typeAssociate = 0x03
	// typeJoin adds a link to a striped segment (Join).
	typeJoin = 0x04
)

// Address types, the same numbers as SOCKS5 (RFC 1928) for familiarity.
const (
	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// requestPrefix is magic, version, type, timestamp (8), nonce, hop count.
const requestPrefix = 4 + 1 + 1 + 8 + NonceBytes + 1

// responsePrefix is magic, version, type, status, hop, reason length.
const responsePrefix = 4 + 1 + 1 + 1 + 1 + 1

var (
	// ErrMalformed: the bytes are not a well-formed header.
	ErrMalformed = errors.New("route: malformed header")
	// ErrAuth: the MAC does not match (wrong fleet secret or tampering).
	ErrAuth = errors.New("route: bad MAC (wrong fleet secret or tampered header)")
	// ErrTooLarge: a value exceeds a protocol maximum.
	ErrTooLarge = errors.New("route: value exceeds protocol maximum")
	// ErrNoKey: neither a fleet secret nor a TLS link to key the MAC with.
	ErrNoKey = errors.New("route: no key: a fleet secret, or a TLS link to key headers with")
)

// LinkKey is the MAC key of the headers on a link: the fleet secret when
// the fleet has one, else the link's channel binding (bind, 32 bytes only
// the link's two ends can compute: pkg/linktls), which is how a fleet of
// per-relay identities keys them. nil (ErrNoKey) without either.
func LinkKey(secret, bind []byte) []byte {
	if len(secret) > 0 {
		return secret
	}
	return bind
}

// Request is the header the entry relay sends. Hops are the relays after the
// receiver, in order; Dst is what the last relay connects to.
type Request struct {
	Hops []string // host:port of each remaining relay's relay listener
	// Names, when not nil, holds the name of the relay expected at each
	// of Hops (VersionNamed); nil sends a Version header.
	Names []string
	Dst   string // host:port, host a domain, IPv4 or IPv6 literal; "" with UDP
	// UDP makes the header open a UDP association instead of a tunnel:
	// the last relay carries the datagrams framed on the link
	// (datagram.go) to and from the destinations each names. Dst is
	// then empty.
	UDP bool
	// InStripes is how many links the segment into the receiver runs
	// over (0 or 1: the one the header came on). The receiver waits for
	// a Join on each of the others before it answers, then reads the
	// stream off all of them (pkg/stripe).
	InStripes int
	// Stripes, when not nil, holds for each of Hops the links the relay
	// before it opens to it (0 or 1: one).
	Stripes []int
	Time    time.Time
	Nonce   [NonceBytes]byte
	// Bind is the channel binding of the link the header travels on (the
	// TLS exporter, pkg/linktls), nil on plain links. It is not sent: the
	// MAC covers it, so the header verifies only on that very link and a
	// copy is worth nothing on another connection or another relay.
	Bind []byte
}

// NewRequest stamps a request with now and a fresh random nonce.
func NewRequest(hops []string, dst string, now time.Time) (*Request, error) {
	r := &Request{Hops: hops, Dst: dst, Time: now}
	if _, err := rand.Read(r.Nonce[:]); err != nil {
		return nil, fmt.Errorf("route: nonce: %w", err)
	}
	return r, nil
}

// Marshal encodes the request and appends its MAC under key (LinkKey).
func (r *Request) Marshal(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	if len(r.Hops) > MaxHops {
		return nil, fmt.Errorf("%w: %d hops (max %d)", ErrTooLarge, len(r.Hops), MaxHops)
	}
	version := byte(Version)
	if r.Names != nil {
		if len(r.Names) != len(r.Hops) {
			return nil, fmt.Errorf("route: %d names for %d hops", len(r.Names), len(r.Hops))
		}
		version = VersionNamed
	}
	striped, err := r.striped()
	if err != nil {
		return nil, err
	}
	if striped {
		version = VersionStriped
	}
	typ := byte(typeRequest)
	if r.UDP {
		if r.Dst != "" {
			return nil, fmt.Errorf("route: a UDP association names no destination, got %q", r.Dst)
		}
		typ = typeAssociate
	}
	b := make([]byte, 0, 512)
	b = append(b, magic[:]...)
	b = append(b, version, typ)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time.UnixMilli()))
	b = append(b, r.Nonce[:]...)
	b = append(b, byte(len(r.Hops)))
	if striped {
		b = append(b, boolByte(r.Names != nil), byte(max(r.InStripes, 1)))
	}
	for i, h := range r.Hops {
		if b, err = appendAddr(b, h); err != nil {
			return nil, fmt.Errorf("hop %d: %w", i+1, err)
		}
		if r.Names != nil {
			if err := checkName(r.Names[i]); err != nil {
				return nil, fmt.Errorf("hop %d: %w", i+1, err)
			}
			b = append(b, byte(len(r.Names[i])))
			b = append(b, r.Names[i]...)
		}
		if striped {
			b = append(b, byte(max(r.stripesOf(i), 1)))
		}
	}
	if !r.UDP {
		if b, err = appendAddr(b, r.Dst); err != nil {
			return nil, fmt.Errorf("destination: %w", err)
		}
	}
	b = appendMAC(b, key, r.Bind)
	if len(b) > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header %d bytes", ErrTooLarge, len(b))
	}
	return b, nil
}

// striped says whether r needs VersionStriped, and checks its stripe counts.
func (r *Request) striped() (bool, error) {
	if r.Stripes != nil && len(r.Stripes) != len(r.Hops) {
		return false, fmt.Errorf("route: %d stripe counts for %d hops", len(r.Stripes), len(r.Hops))
	}
	striped := false
	for i := -1; i < len(r.Hops); i++ {
		n := r.InStripes
		if i >= 0 {
			n = r.stripesOf(i)
		}
		if n < 0 || n > MaxStripes {
			return false, fmt.Errorf("%w: %d links on a segment (max %d)", ErrTooLarge, n, MaxStripes)
		}
		striped = striped || n > 1
	}
	if striped && r.UDP {
		return false, errors.New("route: a UDP association is not striped")
	}
	return striped, nil
}

// stripesOf is the links into hop i as given (0 when Stripes is nil).
func (r *Request) stripesOf(i int) int {
	if r.Stripes == nil {
		return 0
	}
	return r.Stripes[i]
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// ReadRequest reads exactly one request header from rd and verifies its MAC
// under key (LinkKey). It reads no byte past the header. A bad MAC is
// ErrAuth; the caller checks freshness and nonce reuse with a ReplayGuard.
// bind is the link's channel binding (Request.Bind); a header made for
// another link is ErrAuth.
func ReadRequest(rd io.Reader, key, bind []byte) (*Request, error) {
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	var buf [MaxHeaderBytes]byte // bounded by the protocol, never by a length field
	b := buf[:requestPrefix]
	if _, err := io.ReadFull(rd, b); err != nil {
		return nil, err
	}
	version, err := checkPrefix(b, typeRequest)
	if err != nil {
		return nil, err
	}
	r := &Request{Time: time.UnixMilli(int64(binary.BigEndian.Uint64(b[6:14]))), Bind: bind, UDP: b[5] == typeAssociate}
	copy(r.Nonce[:], b[14:14+NonceBytes])
	n := int(b[requestPrefix-1])
	if n > MaxHops {
		return nil, fmt.Errorf("%w: %d hops (max %d)", ErrMalformed, n, MaxHops)
	}
	named := version == VersionNamed
	if version == VersionStriped {
		if b, named, err = readStripedPrefix(rd, b, r); err != nil {
			return nil, err
		}
		r.Stripes = make([]int, 0, n)
	}
	if named {
		r.Names = make([]string, 0, n)
	}
	for i := 0; i < n; i++ {
		var host string
		if b, host, err = readAddr(rd, b); err != nil {
			return nil, err
		}
		r.Hops = append(r.Hops, host)
		if named {
			var name string
			if b, name, err = readName(rd, b); err != nil {
				return nil, err
			}
			r.Names = append(r.Names, name)
		}
		if version == VersionStriped {
			var links int
			if b, links, err = readStripes(rd, b); err != nil {
				return nil, err
			}
			r.Stripes = append(r.Stripes, links)
		}
	}
	if version == VersionStriped {
		// One encoding per header: unstriped ones are Version or VersionNamed.
		if striped, _ := r.striped(); !striped {
			return nil, fmt.Errorf("%w: a striped header with no striped segment", ErrMalformed)
		}
	}
	if !r.UDP {
		if b, r.Dst, err = readAddr(rd, b); err != nil {
			return nil, err
		}
	}
	body := len(b)
	b = b[:body+MACBytes]
	if _, err := io.ReadFull(rd, b[body:]); err != nil {
		return nil, noEOF(err)
	}
	if !verifyMAC(b[:body], b[body:], key, bind) {
		return nil, ErrAuth
	}
	return r, nil
}

// readStripedPrefix reads a VersionStriped request's flags and the links
// into the receiver, appending the raw bytes to b.
func readStripedPrefix(rd io.Reader, b []byte, r *Request) ([]byte, bool, error) {
	start := len(b)
	b = b[:start+1]
	if _, err := io.ReadFull(rd, b[start:]); err != nil {
		return b, false, noEOF(err)
	}
	flags := b[start]
	if flags > 1 {
		return b, false, fmt.Errorf("%w: flags 0x%02x", ErrMalformed, flags)
	}
	if r.UDP {
		return b, false, fmt.Errorf("%w: a striped UDP association", ErrMalformed)
	}
	b, links, err := readStripes(rd, b)
	r.InStripes = links
	return b, flags == 1, err
}

// readStripes reads one segment's link count, 1 to MaxStripes.
func readStripes(rd io.Reader, b []byte) ([]byte, int, error) {
	start := len(b)
	b = b[:start+1]
	if _, err := io.ReadFull(rd, b[start:]); err != nil {
		return b, 0, noEOF(err)
	}
	n := int(b[start])
	if n < 1 || n > MaxStripes {
		return b, 0, fmt.Errorf("%w: %d links on a segment (1 to %d)", ErrMalformed, n, MaxStripes)
	}
	return b, n, nil
}

// ParseRequest is ReadRequest over a byte slice that must hold exactly one header.
func ParseRequest(b, secret, bind []byte) (*Request, error) {
	rd := &sliceReader{b: b}
	r, err := ReadRequest(rd, secret, bind)
	if err != nil {
		return nil, err
	}
	if len(rd.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rd.b))
	}
	return r, nil
}

// Status is the outcome a relay reports back.
type Status byte

const (
	StatusOK              Status = 0x00
	StatusDenied          Status = 0x01 // destination policy refused it
	StatusNetUnreachable  Status = 0x02
	StatusHostUnreachable Status = 0x03 // includes DNS failure
	StatusRefused         Status = 0x04
	StatusTimeout         Status = 0x05
	StatusAuthFailed      Status = 0x06 // a relay refused our header (secret, replay)
	StatusGeneral         Status = 0x07
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusDenied:
		return "denied"
	case StatusNetUnreachable:
		return "network unreachable"
	case StatusHostUnreachable:
		return "host unreachable"
	case StatusRefused:
		return "connection refused"
	case StatusTimeout:
		return "timeout"
	case StatusAuthFailed:
		return "authentication failed"
	case StatusGeneral:
		return "general failure"
	}
	return "status 0x" + strconv.FormatUint(uint64(s), 16)
}

// Response is what comes back. Hop is which relay reported the status,
// counted from the relay that sends the response (0: that relay itself
// tried and failed to reach its next step; 1: the relay after it; ...).
type Response struct {
	Status Status
	Hop    uint8
	Reason string // short, human-readable; never carries secrets
}

// Marshal encodes the response with a MAC bound to reqNonce, the nonce of the
// request it answers, so an old response cannot be replayed onto a new request.
func (r *Response) Marshal(secret []byte, reqNonce [NonceBytes]byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, ErrNoKey
	}
	if len(r.Reason) > MaxReason {
		return nil, fmt.Errorf("%w: reason %d bytes (max %d)", ErrTooLarge, len(r.Reason), MaxReason)
	}
	if r.Status > StatusGeneral {
		return nil, fmt.Errorf("%w: unknown status %d", ErrMalformed, r.Status)
	}
	b := make([]byte, 0, responsePrefix+len(r.Reason)+MACBytes)
	b = append(b, magic[:]...)
	b = append(b, Version, typeResponse, byte(r.Status), r.Hop, byte(len(r.Reason)))
	b = append(b, r.Reason...)
	return appendMAC(b, secret, reqNonce[:]), nil
}

// ReadResponse reads exactly one response from rd (no byte past it: the
// destination's first bytes may follow) and verifies its MAC.
func ReadResponse(rd io.Reader, secret []byte, reqNonce [NonceBytes]byte) (*Response, error) {
	if len(secret) == 0 {
		return nil, ErrNoKey
	}
	var buf [responsePrefix + MaxReason + MACBytes]byte
	b := buf[:responsePrefix]
	if _, err := io.ReadFull(rd, b); err != nil {
		return nil, err
	}
	if _, err := checkPrefix(b, typeResponse); err != nil {
		return nil, err
	}
	r := &Response{Status: Status(b[6]), Hop: b[7]}
	if r.Status > StatusGeneral {
		return nil, fmt.Errorf("%w: unknown status %d", ErrMalformed, b[6])
	}
	body := responsePrefix + int(b[8])
	b = buf[:body+MACBytes]
	if _, err := io.ReadFull(rd, b[responsePrefix:]); err != nil {
		return nil, noEOF(err)
	}
	if !verifyMAC(b[:body], b[body:], secret, reqNonce[:]) {
		return nil, ErrAuth
	}
	r.Reason = string(b[responsePrefix:body])
	return r, nil
}

// ParseResponse is ReadResponse over a byte slice holding exactly one response.
func ParseResponse(b []byte, secret []byte, reqNonce [NonceBytes]byte) (*Response, error) {
	rd := &sliceReader{b: b}
	r, err := ReadResponse(rd, secret, reqNonce)
	if err != nil {
		return nil, err
	}
	if len(rd.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(rd.b))
	}
	return r, nil
}

// checkPrefix checks a message's magic, version and type, and returns its
// version: a request is Version or VersionNamed, a response Version. A
// request may be a UDP association's (typeAssociate).
func checkPrefix(b []byte, typ byte) (byte, error) {
	if [4]byte(b[:4]) != magic {
		return 0, fmt.Errorf("%w: bad magic", ErrMalformed)
	}
	if b[4] != Version && !(typ == typeRequest && (b[4] == VersionNamed || b[4] == VersionStriped)) {
		return 0, fmt.Errorf("%w: version %d (want %d)", ErrMalformed, b[4], Version)
	}
	if b[5] != typ && !(typ == typeRequest && b[5] == typeAssociate) {
		return 0, fmt.Errorf("%w: message type %d (want %d)", ErrMalformed, b[5], typ)
	}
	return b[4], nil
}

// readName reads a hop's relay name (length byte, bytes), appending its
// raw bytes to b.
func readName(rd io.Reader, b []byte) ([]byte, string, error) {
	start := len(b)
	b = b[:start+1]
	if _, err := io.ReadFull(rd, b[start:]); err != nil {
		return b, "", noEOF(err)
	}
	n := int(b[start])
	if n == 0 || n > MaxNameBytes {
		return b, "", fmt.Errorf("%w: relay name of %d bytes", ErrMalformed, n)
	}
	b = b[:start+1+n]
	if _, err := io.ReadFull(rd, b[start+1:]); err != nil {
		return b, "", noEOF(err)
	}
	name := string(b[start+1:])
	if err := checkName(name); err != nil {
		return b, "", fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return b, name, nil
}

// checkName accepts a relay name as identities carry it.
func checkName(n string) error { return linktls.CheckName(n) }

// appendMAC appends HMAC-SHA256(secret, bind || b) to b. bind is the request
// nonce for responses, the link's channel binding (or nil) for requests; the
// type byte in b keeps the two apart.
func appendMAC(b, secret, bind []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(bind)
	m.Write(b)
	return m.Sum(b)
}

func verifyMAC(b, mac, secret, bind []byte) bool {
	m := hmac.New(sha256.New, secret)
	m.Write(bind)
	m.Write(b)
	return hmac.Equal(m.Sum(nil), mac) // constant time
}

// appendAddr encodes host:port as atyp, address, port (big endian).
func appendAddr(b []byte, hostport string) ([]byte, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", hostport, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("%q: port must be 1..65535", hostport)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return nil, fmt.Errorf("%q: zoned addresses are not routable between relays", hostport)
		}
		if ip.Is4() {
			b = append(b, atypIPv4)
		} else {
			b = append(b, atypIPv6)
		}
		b = append(b, ip.AsSlice()...)
	} else {
		if err := checkDomain(host); err != nil {
			return nil, fmt.Errorf("%q: %w", hostport, err)
		}
		b = append(b, atypDomain, byte(len(host)))
		b = append(b, host...)
	}
	return binary.BigEndian.AppendUint16(b, uint16(port)), nil
}

// readAddr reads one address from rd, appending its raw bytes to b (which
// has capacity MaxHeaderBytes, enough for every address the protocol allows).
func readAddr(rd io.Reader, b []byte) ([]byte, string, error) {
	read := func(n int) ([]byte, error) {
		start := len(b)
		b = b[:start+n]
		if _, err := io.ReadFull(rd, b[start:]); err != nil {
			return nil, noEOF(err)
		}
		return b[start:], nil
	}
	t, err := read(1)
	if err != nil {
		return b, "", err
	}
	var host string
	switch t[0] {
	case atypIPv4:
		a, err := read(4)
		if err != nil {
			return b, "", err
		}
		host = netip.AddrFrom4([4]byte(a)).String()
	case atypIPv6:
		a, err := read(16)
		if err != nil {
			return b, "", err
		}
		host = netip.AddrFrom16([16]byte(a)).String()
	case atypDomain:
		l, err := read(1)
		if err != nil {
			return b, "", err
		}
		d, err := read(int(l[0]))
		if err != nil {
			return b, "", err
		}
		host = string(d)
		if err := checkDomain(host); err != nil {
			return b, "", fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if _, err := netip.ParseAddr(host); err == nil {
			// One encoding per address: IPs travel as IPs.
			return b, "", fmt.Errorf("%w: IP literal %q sent as a domain", ErrMalformed, host)
		}
	default:
		return b, "", fmt.Errorf("%w: address type %d", ErrMalformed, t[0])
	}
	p, err := read(2)
	if err != nil {
		return b, "", err
	}
	port := binary.BigEndian.Uint16(p)
	if port == 0 {
		return b, "", fmt.Errorf("%w: port 0", ErrMalformed)
	}
	return b, net.JoinHostPort(host, strconv.Itoa(int(port))), nil
}

// checkDomain accepts host names made of letters, digits, '.', '-' and '_'.
// Anything else (':', '/', spaces, control bytes) has no business in a DNS
// name and would only make logs and re-encoding ambiguous.
func checkDomain(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if len(h) > MaxHostBytes {
		return fmt.Errorf("host is %d bytes (max %d)", len(h), MaxHostBytes)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Errorf("host has byte 0x%02x", c)
		}
	}
	return nil
}

// noEOF turns an EOF inside a header into ErrUnexpectedEOF: the peer stopped
// mid-header, which is not a clean close.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
