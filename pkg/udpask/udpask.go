// Package udpask asks a relay for its probes in one UDP datagram, where the
// admin API over HTTPS costs a new connection's TCP and TLS handshakes
// first: one round trip to a relay instead of three, which is most of a
// first plan's time when the relays asked are across the world.
//
// An ask names targets (host:port) and how many TCP handshakes to time to
// each; the relay answers with an acknowledgement at once and, once its
// handshakes are done, a reply with each target's median RTT. The
// acknowledgement tells the asker that asks get through (a firewall that
// drops UDP is told apart from probes that take long), so it can fall back
// to HTTPS without waiting for a timeout.
//
// Security (docs/security.md, "Probe asks over UDP"):
//
//   - Every datagram carries an HMAC-SHA256 under a key derived from the
//     fleet secret and the admin token (Key): only who may already ask the
//     relay's /v1/probe over HTTPS can ask, and a reply cannot be forged.
//   - A relay answers nothing to a datagram that does not verify: to a
//     scanner the port is silent, and a spoofed source gets no bytes.
//   - An ask carries its time and a random nonce; a relay refuses one more
//     than Window away from its clock or seen before (Replays), so a
//     captured ask cannot be replayed at a relay, from any source.
//   - The acknowledgement and the reply are never larger than the ask, so
//     a relay cannot be used to amplify traffic.
//
// The wire format, all integers big-endian:
//
//	ask:   "rmA1" nonce[16] unix_ms[8] handshakes[1] timeout_ms[2] n[1]
//	       n × (len[1] host:port[len])  mac[32]
//	ack:   "rmK1" nonce[16] mac[32]
//	reply: "rmR1" nonce[16] n[1] n × rtt_us[4]  mac[32]
//
// rtt_us is the median handshake RTT in microseconds, NoAnswer for a target
// the relay could not reach (or refused by its destination policy).
package udpask

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// MaxDatagram is the largest datagram sent or read, bytes: the payload that
// fits an IPv6 minimum MTU of 1280 bytes without fragments (as DNS does).
const MaxDatagram = 1232

// Window is how far an ask's time may be from the relay's clock, either
// way: an ask older than this, or from a clock this far off, is refused.
const Window = 30 * time.Second

// NoAnswer is a reply's rtt_us for a target the relay could not measure.
const NoAnswer = math.MaxUint32

const (
	macBytes   = sha256.Size
	nonceBytes = 16
	askHead    = 4 + nonceBytes + 8 + 1 + 2 + 1
	ackBytes   = 4 + nonceBytes + macBytes
	replyHead  = 4 + nonceBytes + 1
)

var (
	magicAsk   = [4]byte{'r', 'm', 'A', '1'}
	magicAck   = [4]byte{'r', 'm', 'K', '1'}
	magicReply = [4]byte{'r', 'm', 'R', '1'}
)

// Key authenticates asks and replies.
type Key [32]byte

// DeriveKey is the fleet's ask key: HKDF-SHA256 of the fleet secret, the
// admin token as its info. Both are needed, as both are to ask over HTTPS
// (the fleet CA comes from the secret, the bearer token is the token).
func DeriveKey(fleetSecret, adminToken string) (Key, error) {
	var k Key
	if fleetSecret == "" || adminToken == "" {
		return k, errors.New("udpask: a key needs the fleet secret and the admin token")
	}
	b, err := hkdf.Key(sha256.New, []byte(fleetSecret), []byte("relaymesh udp probe ask v1"), adminToken, len(k))
	if err != nil {
		return k, err
	}
	copy(k[:], b)
	return k, nil
}

func (k Key) mac(b []byte) []byte {
	h := hmac.New(sha256.New, k[:])
	h.Write(b)
	return h.Sum(nil)
}

// verify splits b into its body and checks the MAC at its end.
func (k Key) verify(b []byte, magic [4]byte) ([]byte, error) {
	if len(b) < 4+nonceBytes+macBytes || [4]byte(b[:4]) != magic {
		return nil, errMalformed
	}
	body, sum := b[:len(b)-macBytes], b[len(b)-macBytes:]
	if !hmac.Equal(k.mac(body), sum) {
		return nil, ErrBadMAC
	}
	return body, nil
}

var (
	errMalformed = errors.New("udpask: not an ask or a reply of this version")
	// ErrBadMAC is a datagram whose MAC does not verify under the key:
	// another fleet's, a different admin token, or forged.
	ErrBadMAC = errors.New("udpask: MAC does not verify (another fleet secret or admin token?)")
)

// Nonce tells one ask and its answers apart.
type Nonce [nonceBytes]byte

// Ask is a relay's probes asked in one datagram.
type Ask struct {
	Nonce      Nonce
	At         time.Time // when asked; the relay refuses one beyond Window
	Handshakes int       // timed to each target, 1..255; the reply has their median
	TimeoutMs  int       // a handshake's bound, 1..65535 ms
	Targets    []string  // host:port, 1..255 of them, each at most 255 bytes
}

// AskSize is the size of an ask's datagram with these targets.
func AskSize(targets []string) int {
	n := askHead + macBytes
	for _, t := range targets {
		n += 1 + len(t)
	}
	return n
}

// SealAsk encodes a and signs it.
func (k Key) SealAsk(a Ask) ([]byte, error) {
	switch {
	case a.Handshakes < 1 || a.Handshakes > 255:
		return nil, fmt.Errorf("udpask: %d handshakes, want 1..255", a.Handshakes)
	case a.TimeoutMs < 1 || a.TimeoutMs > math.MaxUint16:
		return nil, fmt.Errorf("udpask: timeout %d ms, want 1..%d", a.TimeoutMs, math.MaxUint16)
	case len(a.Targets) < 1 || len(a.Targets) > 255:
		return nil, fmt.Errorf("udpask: %d targets, want 1..255", len(a.Targets))
	case AskSize(a.Targets) > MaxDatagram:
		return nil, fmt.Errorf("udpask: %d targets take %d bytes, over %d", len(a.Targets), AskSize(a.Targets), MaxDatagram)
	}
	b := make([]byte, 0, AskSize(a.Targets))
	b = append(b, magicAsk[:]...)
	b = append(b, a.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.At.UnixMilli()))
	b = append(b, byte(a.Handshakes))
	b = binary.BigEndian.AppendUint16(b, uint16(a.TimeoutMs))
	b = append(b, byte(len(a.Targets)))
	for _, t := range a.Targets {
		if len(t) == 0 || len(t) > 255 {
			return nil, fmt.Errorf("udpask: target %q: want 1..255 bytes", t)
		}
		b = append(b, byte(len(t)))
		b = append(b, t...)
	}
	return append(b, k.mac(b)...), nil
}

// OpenAsk verifies and decodes an ask.
func (k Key) OpenAsk(b []byte) (Ask, error) {
	var a Ask
	if len(b) > MaxDatagram {
		return a, errMalformed
	}
	body, err := k.verify(b, magicAsk)
	if err != nil {
		return a, err
	}
	if len(body) < askHead {
		return a, errMalformed
	}
	copy(a.Nonce[:], body[4:])
	a.At = time.UnixMilli(int64(binary.BigEndian.Uint64(body[4+nonceBytes:])))
	a.Handshakes = int(body[4+nonceBytes+8])
	a.TimeoutMs = int(binary.BigEndian.Uint16(body[4+nonceBytes+9:]))
	n := int(body[askHead-1])
	rest := body[askHead:]
	for range n {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) || rest[0] == 0 {
			return a, errMalformed
		}
		a.Targets = append(a.Targets, string(rest[1:1+int(rest[0])]))
		rest = rest[1+int(rest[0]):]
	}
	if len(rest) != 0 || n == 0 || a.Handshakes == 0 || a.TimeoutMs == 0 {
		return a, errMalformed
	}
	return a, nil
}

// SealAck is the acknowledgement of the ask with nonce n.
func (k Key) SealAck(n Nonce) []byte {
	b := append(magicAck[:], n[:]...)
	return append(b, k.mac(b)...)
}

// OpenAck verifies an acknowledgement and returns its ask's nonce.
func (k Key) OpenAck(b []byte) (Nonce, error) {
	var n Nonce
	if len(b) != ackBytes {
		return n, errMalformed
	}
	body, err := k.verify(b, magicAck)
	if err != nil {
		return n, err
	}
	copy(n[:], body[4:])
	return n, nil
}

// Reply is an ask's answer: RTTs[i] is Targets[i]'s median handshake RTT,
// or negative for a target the relay could not measure.
type Reply struct {
	Nonce Nonce
	RTTs  []time.Duration
}

// SealReply encodes r and signs it.
func (k Key) SealReply(r Reply) []byte {
	b := make([]byte, 0, replyHead+4*len(r.RTTs)+macBytes)
	b = append(b, magicReply[:]...)
	b = append(b, r.Nonce[:]...)
	b = append(b, byte(len(r.RTTs)))
	for _, d := range r.RTTs {
		us := uint32(NoAnswer)
		if d >= 0 {
			us = uint32(min(d.Microseconds(), NoAnswer-1))
		}
		b = binary.BigEndian.AppendUint32(b, us)
	}
	return append(b, k.mac(b)...)
}

// OpenReply verifies and decodes a reply.
func (k Key) OpenReply(b []byte) (Reply, error) {
	var r Reply
	body, err := k.verify(b, magicReply)
	if err != nil {
		return r, err
	}
	if len(body) < replyHead || len(body) != replyHead+4*int(body[replyHead-1]) {
		return r, errMalformed
	}
	copy(r.Nonce[:], body[4:])
	for i := replyHead; i < len(body); i += 4 {
		us := binary.BigEndian.Uint32(body[i:])
		d := time.Duration(-1)
		if us != NoAnswer {
			d = time.Duration(us) * time.Microsecond
		}
		r.RTTs = append(r.RTTs, d)
	}
	return r, nil
}

// Replays refuses asks outside Window of the clock and asks seen before.
// It remembers each nonce until its ask is out of the window, at most max
// of them: beyond that it refuses asks (ErrBusy) rather than forget one
// that could still be replayed.
type Replays struct {
	mu   sync.Mutex
	max  int
	seen map[Nonce]time.Time // nonce → when its ask leaves the window
}

// NewReplays remembers at most max nonces.
func NewReplays(max int) *Replays {
	return &Replays{max: max, seen: map[Nonce]time.Time{}}
}

var (
	// ErrStale is an ask from more than Window away: replayed, or a clock
	// that is off.
	ErrStale = errors.New("udpask: ask outside the time window (a replay, or a clock more than 30 s off)")
	// ErrReplay is an ask whose nonce was seen before.
	ErrReplay = errors.New("udpask: ask seen before (a replay)")
	// ErrBusy is an ask refused because too many are remembered.
	ErrBusy = errors.New("udpask: too many asks in the window")
)

// Admit records a's nonce, or says why a is refused.
func (r *Replays) Admit(a Ask, now time.Time) error {
	if d := now.Sub(a.At); d > Window || d < -Window {
		return ErrStale
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[a.Nonce]; ok {
		return ErrReplay
	}
	if len(r.seen) >= r.max {
		for n, until := range r.seen {
			if now.After(until) {
				delete(r.seen, n)
			}
		}
		if len(r.seen) >= r.max {
			return ErrBusy
		}
	}
	r.seen[a.Nonce] = a.At.Add(Window)
	return nil
}
