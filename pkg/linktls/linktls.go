// Package linktls encrypts and mutually authenticates the links between
// relays (and from relayctl to a relay) with TLS 1.3, keyed by the fleet
// secret alone, so one secret file is still all a relay needs.
//
// The construction (docs/security.md, "Relay links"):
//
//   - The fleet CA's Ed25519 key is derived from the fleet secret with HKDF
//     (SHA-256, a fixed salt and label). Every holder of the secret derives
//     the same key and, because Ed25519 signatures and the certificate's
//     fields are fixed, the same CA certificate byte for byte.
//   - Each process makes a fresh Ed25519 key at start and a certificate for
//     it, signed by the fleet CA, naming the relay (or "relayctl") and its
//     role. The private key never leaves the process.
//   - Both ends of a link present their certificate and verify the other's
//     against the fleet CA (crypto/tls, TLS 1.3 only). A dialer that knows
//     which relay it wants also checks the name.
//
// What it gives: a network attacker (on the path, or a Consul writer who
// planted an address) without the fleet secret can neither read, inject,
// nor pass for a relay. What it does not: every holder of the fleet secret
// can mint a certificate for any name, so the names tell relays apart but
// do not stop a compromised relay from claiming another's name.
//
// Route headers are bound to the link they travel on with Binding (the TLS
// exporter), so a header is worth nothing on any other connection.
package linktls

import (
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"regexp"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Roles a certificate names (its Subject's OrganizationalUnit).
const (
	RoleRelay  = "relay"
	RoleClient = "client" // relayctl: connects to relays, accepts none
)

// ALPN protocol of a relay link; a TLS server for anything else (or a
// relay from an incompatible version) fails the handshake instead of
// misreading bytes.
const ALPN = "relaymesh/1"

// exporterLabel is the TLS exporter label of a route header's binding.
const exporterLabel = "EXPORTER-relaymesh-route-binding"

// caSalt and caInfo fix the derivation: changing either makes a new fleet CA.
var (
	caSalt = []byte("relaymesh fleet CA")
	caInfo = "ed25519 seed v1"
)

// caEpoch is the CA certificate's fixed validity start; its end is far off.
// Fixed, so every secret holder makes the same certificate.
var (
	caNotBefore = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2124, 1, 1, 0, 0, 0, 0, time.UTC)
)

// leafLifetime is how long a process's certificate is valid. A relay makes
// a new one at every start; the hour before now absorbs peers' clock skew.
const (
	leafLifetime = 365 * 24 * time.Hour
	leafBackdate = time.Hour
)

// Identity is one process's side of the fleet's TLS: the fleet CA and its
// own certificate. Safe for concurrent use once made.
type Identity struct {
	Name   string // relay name, or "relayctl"
	Role   string // RoleRelay or RoleClient
	roots  *x509.CertPool
	caCert *x509.Certificate
	cert   tls.Certificate
	// issued: the identity comes from an operator's CA (Load), not from
	// the fleet secret (New); crl is then its revocation list.
	issued bool
	crl    *revocations
}

// New derives the fleet CA from secret and issues this process a
// certificate for name and role.
func New(secret []byte, name, role string) (*Identity, error) {
	if len(secret) == 0 {
		return nil, errors.New("linktls: no fleet secret")
	}
	if name == "" {
		return nil, errors.New("linktls: no name for this process's certificate")
	}
	caKey, caCert, err := fleetCA(secret)
	if err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("linktls: key: %w", err)
	}
	der, err := issueLeaf(caCert, caKey, pub, name, role, time.Now(), leafLifetime)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("linktls: certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &Identity{
		Name:   name,
		Role:   role,
		roots:  roots,
		caCert: caCert,
		cert:   tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf},
	}, nil
}

// CAPEM returns the fleet CA's certificate, PEM-encoded: what a tool that
// is not relaymesh (Prometheus, curl) needs to verify a relay's admin API.
// It is public; the key stays in the secret.
func CAPEM(secret []byte) ([]byte, error) {
	_, cert, err := fleetCA(secret)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}

// hostName is a name usable as a DNS name in a certificate.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

// fleetCA derives the CA key from the secret and makes its certificate.
func fleetCA(secret []byte) (ed25519.PrivateKey, *x509.Certificate, error) {
	seed, err := hkdf.Key(sha256.New, secret, caSalt, caInfo, ed25519.SeedSize)
	if err != nil {
		return nil, nil, fmt.Errorf("linktls: derive CA key: %w", err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "relaymesh fleet CA"},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("linktls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("linktls: CA certificate: %w", err)
	}
	return key, cert, nil
}

// Peer is who is at the other end of a verified link.
type Peer struct {
	Name string
	Role string
}

// verify checks that the peer spoke alpn and that its certificate chain
// leads to the fleet CA, and returns whom it names. A dialer (dialing)
// accepts only a relay, and, when want is not empty, only that relay.
func (id *Identity) verify(cs tls.ConnectionState, alpn string, dialing bool, want string) (Peer, error) {
	if cs.NegotiatedProtocol != alpn {
		return Peer{}, fmt.Errorf("linktls: peer did not speak %s", alpn)
	}
	if len(cs.PeerCertificates) == 0 {
		return Peer{}, errors.New("linktls: the peer sent no certificate (not a relaymesh relay, or plain transport)")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         id.roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return Peer{}, fmt.Errorf("linktls: peer certificate is not from this fleet (%s): %w", id.otherFleetHint(), err)
	}
	if id.crl.revoked(leaf) {
		return Peer{}, fmt.Errorf("linktls: peer certificate of %q (serial %x) is revoked", leaf.Subject.CommonName, leaf.SerialNumber)
	}
	p := peerOf(leaf)
	switch {
	case p.Role != RoleRelay && p.Role != RoleClient:
		return Peer{}, fmt.Errorf("linktls: peer certificate has no known role (%q)", leaf.Subject.OrganizationalUnit)
	case want != "" && (p.Name != want || p.Role != RoleRelay):
		return Peer{}, fmt.Errorf("linktls: expected relay %q, the peer is %s %q", want, p.Role, p.Name)
	case dialing && p.Role != RoleRelay:
		return Peer{}, fmt.Errorf("linktls: the peer is %s %q, not a relay", p.Role, p.Name)
	}
	return p, nil
}

// peerOf reads whom a certificate names: the name and the one role.
func peerOf(leaf *x509.Certificate) Peer {
	p := Peer{Name: leaf.Subject.CommonName}
	if len(leaf.Subject.OrganizationalUnit) == 1 {
		p.Role = leaf.Subject.OrganizationalUnit[0]
	}
	return p
}

func (id *Identity) base() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		NextProtos:   []string{ALPN},
		// Verification is by the fleet CA and the name in the certificate,
		// not by host name: relays are addressed by IP and port.
		InsecureSkipVerify: true,
		// No tickets: Go's TLS has no 0-RTT, so resuming saves CPU but no
		// round trip, and warm pools do the handshakes ahead of time
		// anyway. Without tickets, an idle pooled link carries no byte
		// after the handshake, which is how the pool tells it is alive.
		SessionTicketsDisabled: true,
		// One record per write, as large as the write. Dynamic sizing
		// (MSS-sized records for a connection's first 128 KiB) suits a
		// browser rendering as bytes arrive; a relay forwards what it has
		// already read, and the small records, merged by the kernel two
		// or three to a buffer, changed the shape of the first full-size
		// segments the receiver sees, from which Linux fixes the
		// connection's window (see handshakeSegmentBytes).
		DynamicRecordSizingDisabled: true,
	}
}

// ServerConfig accepts links from any fleet member (relays and relayctl).
func (id *Identity) ServerConfig() *tls.Config {
	c := id.base()
	c.ClientAuth = tls.RequireAnyClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := id.verify(cs, ALPN, false, "")
		return err
	}
	return c
}

// ClientConfig dials a relay; want, when not empty, is the relay's name.
func (id *Identity) ClientConfig(want string) *tls.Config {
	c := id.base()
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := id.verify(cs, ALPN, true, want)
		return err
	}
	return c
}

// AdminALPN is the protocol of a relay's admin API over TLS: plain
// HTTP/1.1, so that curl and Prometheus can talk to it too. Being other
// than ALPN, it keeps the two listeners apart: a link handshake fails on
// an admin port and an admin one on a relay port.
const AdminALPN = "http/1.1"

// AdminServerConfig serves a relay's admin API over TLS with the relay's
// certificate. It asks for no client certificate: the admin token
// authenticates requests, and TLS keeps it and the answers from the path.
//
// Serve it with HTTPSServer, and records go out as large as each write
// (as on relay links): the admin API is the traffic source relayctl bench
// downloads from, and the small records of Go's dynamic sizing at the
// start of a connection would set the client's receive window low.
func (id *Identity) AdminServerConfig() *tls.Config {
	c := &tls.Config{
		MinVersion:                  tls.VersionTLS13,
		Certificates:                []tls.Certificate{id.cert},
		NextProtos:                  []string{AdminALPN},
		DynamicRecordSizingDisabled: true,
	}
	if id.issued {
		// A fleet of identities: a relay or relayctl user may prove
		// itself with its certificate instead of a token (the relay's
		// admin API authorizes it: relay/admin.go). Asked, not required:
		// curl and Prometheus come with the token. One that is sent must
		// verify (and not be revoked), or the handshake fails.
		c.ClientAuth = tls.RequestClientCert
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil
			}
			_, err := id.verify(cs, AdminALPN, false, "")
			return err
		}
	}
	return c
}

// AdminClientConfig reaches relays' admin APIs: the server must hold a
// certificate from this fleet's CA, so a registry entry pointing at
// another host cannot collect the admin token. Either role will do (a
// relayd without a relay listener holds a client certificate). Which
// relay it is, the caller checks against the one it meant (AdminPeer)
// before it believes the answer.
func (id *Identity) AdminClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{AdminALPN},
		// Sent only to a server that asks (one of a fleet of identities).
		Certificates: []tls.Certificate{id.cert},
		// Verified by the fleet CA and the role, not by host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := id.verify(cs, AdminALPN, false, "")
			return err
		},
	}
}

// AdminPeer returns whom the certificate of a verified admin connection
// names (cs from an HTTPS response); ok is false without one.
func AdminPeer(cs *tls.ConnectionState) (Peer, bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Peer{}, false
	}
	return peerOf(cs.PeerCertificates[0]), true
}

// PeerOf returns whom a handshaken link's certificate names (verified in
// the handshake). ok is false for a conn that is not a finished TLS link.
func PeerOf(c net.Conn) (Peer, bool) {
	tc, ok := c.(*Conn)
	if !ok {
		return Peer{}, false
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return Peer{}, false
	}
	return peerOf(cs.PeerCertificates[0]), true
}

// CheckPeer says whether c, a link this identity handshook (a pooled one,
// say), reaches the relay called want ("": any relay of the fleet) and
// whether its certificate has been revoked since.
func (id *Identity) CheckPeer(c net.Conn, want string) error {
	tc, ok := c.(*Conn)
	if !ok {
		return errors.New("linktls: not a relay link")
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return errors.New("linktls: not a handshaken relay link")
	}
	leaf := cs.PeerCertificates[0]
	p := peerOf(leaf)
	switch {
	case p.Role != RoleRelay:
		return fmt.Errorf("linktls: the peer is %s %q, not a relay", p.Role, p.Name)
	case want != "" && p.Name != want:
		return fmt.Errorf("linktls: expected relay %q, the peer is relay %q", want, p.Name)
	case id.crl.revoked(leaf):
		return fmt.Errorf("linktls: peer certificate of %q (serial %x) is revoked", p.Name, leaf.SerialNumber)
	}
	return nil
}

// Binding returns the channel binding of a TLS link (RFC 9266's
// tls-exporter, under relaymesh's own label): 32 bytes both ends compute
// alike and nobody else can. nil for a conn that is not TLS (plain
// transport: no binding).
func Binding(c net.Conn) ([]byte, error) {
	tc, ok := c.(*Conn)
	if !ok {
		return nil, nil
	}
	cs := tc.ConnectionState()
	b, err := cs.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("linktls: channel binding: %w", err)
	}
	return b, nil
}

// Client runs the TLS handshake on raw, a connection to a relay listener,
// within ctx. want, when not empty, is the relay's name. It owns raw: closed
// on failure.
func (id *Identity) Client(ctx context.Context, raw net.Conn, want string) (net.Conn, error) {
	tc, err := handshake(ctx, raw, func(c net.Conn) *tls.Conn { return tls.Client(c, id.ClientConfig(want)) })
	if err != nil {
		return nil, &HandshakeError{Err: err}
	}
	return tc, nil
}

// Server runs the server side of the TLS handshake on raw, a connection
// accepted on a relay listener, within ctx (the caller sets raw's deadline).
// It owns raw: closed on failure.
func (id *Identity) Server(ctx context.Context, raw net.Conn) (*Conn, error) {
	return handshake(ctx, raw, func(c net.Conn) *tls.Conn { return tls.Server(c, id.ServerConfig()) })
}

// handshake runs side's handshake over raw, written in small pieces.
func handshake(ctx context.Context, raw net.Conn, side func(net.Conn) *tls.Conn) (*Conn, error) {
	rc := &rawConn{Conn: raw}
	if sc, ok := raw.(syscall.Conn); ok {
		rc.rc, _ = sc.SyscallConn() // looked up once: every fill reads through it
	}
	tc := side(rc)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	rc.handshaken.Store(true)
	mss := socketMSS(rc.rc)
	c := &Conn{Conn: tc, raw: rc, rampRecord: rampRecordFor(mss), pushAfter: pushAfter}
	if rc.rc != nil && c.rampRecord < maxPlaintext && c.rampRecord == mss-RecordOverheadBytes {
		c.mssBytes = mss // records can fill segments: align them
	}
	return c, nil
}

// socketMSS is the segment size the socket under rc sends (TCP_MAXSEG), or
// defaultMSSBytes when rc is nil or does not say.
func socketMSS(rc syscall.RawConn) int {
	mss := defaultMSSBytes
	if rc == nil {
		return mss
	}
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil && v > 0 {
			mss = v
		}
	})
	return mss
}

// handshakeSegmentBytes bounds each write of the handshake. Why: Linux
// sizes a connection's receive window from its estimate of payload per
// buffer byte (tcp_measure_rcv_mss: skb len / truesize), and updates the
// estimate only when a segment of a new size arrives. TLS 1.3 flights with
// the post-quantum key share are ~1.9 KB, so the first full-size (MSS)
// segment each end received was a lone handshake packet, whose ratio is
// poor, and the estimate never moved again: the bulk data's GRO aggregates
// have the same segment size. Measured in the lab: the receiver's
// rcv_ssthresh stuck at 0.43 of its buffer, a window-limited TLS link at 35
// Mbit/s against 52 plain. Written in pieces below any MSS, the handshake
// leaves the measurement to the first full-size segment of data, as on a
// plain link.
const handshakeSegmentBytes = 512

// smallHandshake writes p to c in pieces of at most handshakeSegmentBytes
// (each its own segment: Go sets TCP_NODELAY).
func smallHandshake(c net.Conn, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Write(p[n:min(len(p), n+handshakeSegmentBytes)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// smallWrites cuts writes into pieces of at most handshakeSegmentBytes
// until done is set.
type smallWrites struct {
	net.Conn
	done atomic.Bool
}

func (c *smallWrites) Write(p []byte) (int, error) {
	if c.done.Load() {
		return c.Conn.Write(p)
	}
	return smallHandshake(c.Conn, p)
}

// HTTPSServer and HTTPSClient are tls.Server and tls.Client over raw, the
// handshake run within ctx and written in pieces below any MSS, as a relay
// link's (see handshakeSegmentBytes): for the admin API, whose downloads
// (the relays' traffic source, which relayctl bench times) would otherwise
// get the window a handshake packet sets. They own raw: closed on failure.
func HTTPSServer(ctx context.Context, raw net.Conn, conf *tls.Config) (*tls.Conn, error) {
	return smallHandshakeTLS(ctx, raw, func(c net.Conn) *tls.Conn { return tls.Server(c, conf) })
}

// HTTPSClient: see HTTPSServer.
func HTTPSClient(ctx context.Context, raw net.Conn, conf *tls.Config) (*tls.Conn, error) {
	return smallHandshakeTLS(ctx, raw, func(c net.Conn) *tls.Conn { return tls.Client(c, conf) })
}

func smallHandshakeTLS(ctx context.Context, raw net.Conn, side func(net.Conn) *tls.Conn) (*tls.Conn, error) {
	sw := &smallWrites{Conn: raw}
	tc := side(sw)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	sw.done.Store(true)
	return tc, nil
}

// HandshakeError is a failed TLS handshake toward a relay: the peer is not
// a member of this fleet, or not a relay listener speaking TLS.
type HandshakeError struct{ Err error }

func (e *HandshakeError) Error() string {
	return "relay link TLS handshake: " + e.Err.Error() +
		" (does the peer run with the same fleet secret and transport: tls?)"
}
func (e *HandshakeError) Unwrap() error { return e.Err }
