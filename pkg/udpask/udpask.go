// Package udpask asks a relay for its probes in one UDP datagram, where the
// admin API over HTTPS costs a new connection's TCP and TLS handshakes
// first: one round trip to a relay instead of three, which is most of a
// first plan's time when the relays asked are across the world.
//
// An ask names the relay it is for, targets (host:port) and how many TCP
// handshakes to time to each; the relay answers with an acknowledgement at once and, once its
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
//   - An ask names the relay it is for, under the MAC; a relay refuses one
//     for another name. Each relay remembers only the nonces it saw, so
//     without the name one captured ask would be answered once by every
//     relay of the fleet.
//   - The acknowledgement and the reply together are never larger than
//     the ask, headers of the extra datagram included (AnswerBytes), so a
//     relay cannot be used to amplify traffic.
//
// The wire format, all integers big-endian:
//
//	ask:   "rmA3" nonce[16] unix_ms[8] handshakes[1] timeout_ms[2] flags[1]
//	       rlen[1] relay[rlen] n[1] n × (len[1] host:port[len])
//	       zero padding  mac[32]
//	ack:   "rmK1" nonce[16] mac[32]
//	reply: "rmR2" nonce[16] flags[1] n[1] n × (rtt_us[4] recv_kbps[4] recv_age_s[2])
//	       [info[InfoBytes]]  mac[32]
//
// recv_kbps is the rate the relay's tunnels received from the target's host
// (Learnt, kbit/s; 0: none learnt), recv_age_s how long ago (seconds, at
// most 65535). rtt_us is the median handshake RTT in microseconds, NoAnswer for a target
// the relay could not reach (or refused by its destination policy). With
// FlagInfo the ask asks for the relay's windows too, and may name no
// target: info is the planner's fields of the relay's adminapi.Info (its
// /v1/info, as it would answer the asker),
//
//	info:  window_bytes[8] tcp_wmem_max_bytes[8] capacity_bps[f64]
//	       learnt_send_bps_to_you[f64] learnt_send_age_s[f32]
//	       learnt_loss_to_you[f32] learnt_loss_age_s[f32] congestion[16]
//
// learnt_loss_to_you -1 for none learnt, congestion zero-padded (the
// effective congestion_control, cut at 16 bytes). Every ask is padded to
// AnswerBytes: its acknowledgement and its reply, with their own datagram
// headers, fit in it.
package udpask

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
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
	// askFixed is an ask's fixed fields up to the relay name's length.
	askFixed  = 4 + nonceBytes + 8 + 1 + 2 + 1 + 1
	ackBytes  = 4 + nonceBytes + macBytes
	replyHead = 4 + nonceBytes + 1 + 1
)

// DatagramHeaderBytes is the IP and UDP headers of one datagram at most:
// IPv6's 40 bytes and UDP's 8. A relay answers one datagram with two, so
// an ask pays for the second one's headers too: on the wire, as in
// payload, a relay sends no more than it was sent.
const DatagramHeaderBytes = 40 + 8

// FlagInfo asks for the relay's windows (Info) in the reply.
const FlagInfo = 1

// InfoBytes is the size of a reply's info.
const InfoBytes = 8 + 8 + 8 + 8 + 4 + 4 + 4 + congestionBytes + 1

const congestionBytes = 16

// noLoss is info's learnt_loss_to_you when the relay learnt no loss of its
// path to the asker.
const noLoss = -1

var (
	// The ask's version 2 names the relay; version 3 asks for a reply
	// whose Info carries the loss learnt of the path to the asker
	// (reply version 2); version 4 for one whose Info also carries the
	// relay's max_stripes (reply version 3). An ask of an earlier version
	// is refused as malformed, and its asker falls back to HTTPS; a relay
	// of an earlier version refuses a later ask the same way.
	magicAsk   = [4]byte{'r', 'm', 'A', '4'}
	magicAck   = [4]byte{'r', 'm', 'K', '1'}
	magicReply = [4]byte{'r', 'm', 'R', '3'}
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
	// Relay is the name of the relay asked (its registry name), 1..255
	// bytes: a relay answers only asks for itself.
	Relay      string
	Nonce      Nonce
	At         time.Time // when asked; the relay refuses one beyond Window
	Handshakes int       // timed to each target, 1..255; the reply has their median
	TimeoutMs  int       // a handshake's bound, 1..65535 ms
	Flags      byte      // FlagInfo
	Targets    []string  // host:port, up to 255 of them (1 or more without FlagInfo), each at most 255 bytes
}

// AskSize is the size of an ask's datagram for relay with these targets
// and flags, its padding included.
func AskSize(relay string, targets []string, flags byte) int {
	n := askFixed + len(relay) + 1 + macBytes
	for _, t := range targets {
		n += 1 + len(t)
	}
	return max(n, AnswerBytes(len(targets), flags))
}

// AnswerBytes is what a relay sends to answer an ask for n targets with
// flags: the acknowledgement and the reply, and the headers of the one
// datagram more than the ask (DatagramHeaderBytes). An ask is at least
// this large (padded to it); a relay refuses a shorter one.
func AnswerBytes(n int, flags byte) int {
	return ackBytes + replySize(n, flags) + DatagramHeaderBytes
}

// AckBytes is the size of an acknowledgement.
const AckBytes = ackBytes

// replySize is the size of a reply for n targets with flags.
func replySize(n int, flags byte) int {
	size := replyHead + targetReplyBytes*n + macBytes
	if flags&FlagInfo != 0 {
		size += InfoBytes
	}
	return size
}

// SealAsk encodes a and signs it.
func (k Key) SealAsk(a Ask) ([]byte, error) {
	switch {
	case a.Handshakes < 1 || a.Handshakes > 255:
		return nil, fmt.Errorf("udpask: %d handshakes, want 1..255", a.Handshakes)
	case a.TimeoutMs < 1 || a.TimeoutMs > math.MaxUint16:
		return nil, fmt.Errorf("udpask: timeout %d ms, want 1..%d", a.TimeoutMs, math.MaxUint16)
	case len(a.Targets) > 255 || (len(a.Targets) == 0 && a.Flags&FlagInfo == 0):
		return nil, fmt.Errorf("udpask: %d targets, want 1..255 (0 only with FlagInfo)", len(a.Targets))
	case len(a.Relay) == 0 || len(a.Relay) > 255:
		return nil, fmt.Errorf("udpask: relay name %q: want 1..255 bytes", a.Relay)
	case AskSize(a.Relay, a.Targets, a.Flags) > MaxDatagram:
		return nil, fmt.Errorf("udpask: %d targets take %d bytes, over %d", len(a.Targets), AskSize(a.Relay, a.Targets, a.Flags), MaxDatagram)
	}
	size := AskSize(a.Relay, a.Targets, a.Flags)
	b := make([]byte, 0, size)
	b = append(b, magicAsk[:]...)
	b = append(b, a.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.At.UnixMilli()))
	b = append(b, byte(a.Handshakes))
	b = binary.BigEndian.AppendUint16(b, uint16(a.TimeoutMs))
	b = append(b, a.Flags)
	b = append(b, byte(len(a.Relay)))
	b = append(b, a.Relay...)
	b = append(b, byte(len(a.Targets)))
	for _, t := range a.Targets {
		if len(t) == 0 || len(t) > 255 {
			return nil, fmt.Errorf("udpask: target %q: want 1..255 bytes", t)
		}
		b = append(b, byte(len(t)))
		b = append(b, t...)
	}
	b = append(b, make([]byte, size-macBytes-len(b))...) // padding: the answers fit
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
	if len(body) < askFixed {
		return a, errMalformed
	}
	copy(a.Nonce[:], body[4:])
	a.At = time.UnixMilli(int64(binary.BigEndian.Uint64(body[4+nonceBytes:])))
	a.Handshakes = int(body[4+nonceBytes+8])
	a.TimeoutMs = int(binary.BigEndian.Uint16(body[4+nonceBytes+9:]))
	a.Flags = body[askFixed-2]
	rlen := int(body[askFixed-1])
	rest := body[askFixed:]
	if rlen == 0 || len(rest) < rlen+1 {
		return a, errMalformed
	}
	a.Relay = string(rest[:rlen])
	n := int(rest[rlen])
	rest = rest[rlen+1:]
	for range n {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) || rest[0] == 0 {
			return a, errMalformed
		}
		a.Targets = append(a.Targets, string(rest[1:1+int(rest[0])]))
		rest = rest[1+int(rest[0]):]
	}
	for _, c := range rest {
		if c != 0 {
			return a, errMalformed
		}
	}
	if (n == 0 && a.Flags&FlagInfo == 0) || a.Handshakes == 0 || a.TimeoutMs == 0 || len(b) < AnswerBytes(n, a.Flags) {
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
// or negative for a target the relay could not measure; Recv[i] what the
// relay learnt of the target's sends to it (nil: none of any); Info the
// relay's windows when the ask had FlagInfo: sealed, its planner's fields
// (the package doc's info); opened, an adminapi.Info with those alone.
type Reply struct {
	Nonce Nonce
	RTTs  []time.Duration
	Recv  []Learnt
	Info  *adminapi.Info
}

// Learnt is the best rate a relay's tunnels received from a target's host
// while nothing after the relay held them back, bits/s (0: none learnt),
// and how long ago, seconds.
type Learnt struct {
	Bps    float64
	AgeSec float64
}

// targetReplyBytes is a reply's bytes per target: rtt_us, recv_kbps,
// recv_age_s.
const targetReplyBytes = 4 + 4 + 2

// SealReply encodes r and signs it.
func (k Key) SealReply(r Reply) []byte {
	var flags byte
	if r.Info != nil {
		flags = FlagInfo
	}
	b := make([]byte, 0, replySize(len(r.RTTs), flags))
	b = append(b, magicReply[:]...)
	b = append(b, r.Nonce[:]...)
	b = append(b, flags)
	b = append(b, byte(len(r.RTTs)))
	for i, d := range r.RTTs {
		us := uint32(NoAnswer)
		if d >= 0 {
			us = uint32(min(d.Microseconds(), NoAnswer-1))
		}
		b = binary.BigEndian.AppendUint32(b, us)
		var l Learnt
		if i < len(r.Recv) {
			l = r.Recv[i]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(min(max(l.Bps/1e3, 0), math.MaxUint32)))
		b = binary.BigEndian.AppendUint16(b, uint16(min(max(l.AgeSec, 0), math.MaxUint16)))
	}
	if r.Info != nil {
		b = appendInfo(b, *r.Info)
	}
	return append(b, k.mac(b)...)
}

// appendInfo appends info's planner fields, InfoBytes of them.
func appendInfo(b []byte, info adminapi.Info) []byte {
	loss, lossAgeSec, ok := info.LearntLoss()
	if !ok {
		loss, lossAgeSec = noLoss, 0
	}
	b = binary.BigEndian.AppendUint64(b, uint64(max(info.Limits.WindowBytesApprox, 0)))
	b = binary.BigEndian.AppendUint64(b, uint64(max(info.Limits.TCPWmemMaxBytes, 0)))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(info.CapacityBps))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(info.LearntSendBpsToYou))
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(info.LearntSendAgeSec)))
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(loss)))
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(lossAgeSec)))
	var cc [congestionBytes]byte
	copy(cc[:], info.CongestionControl)
	b = append(b, cc[:]...)
	return append(b, byte(min(max(info.MaxStripes, 0), math.MaxUint8)))
}

// parseInfo is the adminapi.Info of appendInfo's bytes: its planner
// fields alone.
func parseInfo(b []byte) *adminapi.Info {
	info := &adminapi.Info{
		Limits: adminapi.Limits{
			WindowBytesApprox: int64(binary.BigEndian.Uint64(b)),
			TCPWmemMaxBytes:   int64(binary.BigEndian.Uint64(b[8:])),
		},
		CapacityBps:        math.Float64frombits(binary.BigEndian.Uint64(b[16:])),
		LearntSendBpsToYou: math.Float64frombits(binary.BigEndian.Uint64(b[24:])),
		LearntSendAgeSec:   float64(math.Float32frombits(binary.BigEndian.Uint32(b[32:]))),
		CongestionControl:  strings.TrimRight(string(b[44:44+congestionBytes]), "\x00"),
		MaxStripes:         int(b[44+congestionBytes]),
	}
	if loss := math.Float32frombits(binary.BigEndian.Uint32(b[36:])); loss >= 0 {
		info.SetLearntLoss(float64(loss), float64(math.Float32frombits(binary.BigEndian.Uint32(b[40:]))))
	}
	return info
}

// OpenReply verifies and decodes a reply.
func (k Key) OpenReply(b []byte) (Reply, error) {
	var r Reply
	body, err := k.verify(b, magicReply)
	if err != nil {
		return r, err
	}
	if len(body) < replyHead {
		return r, errMalformed
	}
	flags, n := body[replyHead-2], int(body[replyHead-1])
	if len(body)+macBytes != replySize(n, flags) {
		return r, errMalformed
	}
	copy(r.Nonce[:], body[4:])
	at := replyHead
	for range n {
		us := binary.BigEndian.Uint32(body[at:])
		d := time.Duration(-1)
		if us != NoAnswer {
			d = time.Duration(us) * time.Microsecond
		}
		r.RTTs = append(r.RTTs, d)
		r.Recv = append(r.Recv, Learnt{Bps: float64(binary.BigEndian.Uint32(body[at+4:])) * 1e3,
			AgeSec: float64(binary.BigEndian.Uint16(body[at+8:]))})
		at += targetReplyBytes
	}
	if flags&FlagInfo != 0 {
		r.Info = parseInfo(body[at:])
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
