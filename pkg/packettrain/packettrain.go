// Package packettrain measures the capacity of the path from one relay to
// another with short trains of UDP datagrams sent back to back: the
// bottleneck link spaces them by its serialization time, so the receiver's
// arrival times give the rate the bottleneck forwards at (packet-pair
// dispersion). It holds what the sender and the receiver share: the
// datagram's wire format (pure codec), the admin API's JSON (Expectation,
// Arrivals, Answer) and the estimator (Estimate). Sockets, budgets and
// authentication live in the relay (relay/capacityprobe.go).
//
// A train measures the bottleneck's capacity, not what other traffic left
// of it: docs/planning.md says how the planner weighs it against the rate
// a relay's tunnels were learnt to sustain.
package packettrain

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// The shape of one measurement. Every figure is fixed: the receiver's
// budget charges the most a measurement can cost before it issues a nonce,
// and the docs' per-relay-per-hour figure is computed from these.
const (
	// Trains is how many trains one measurement sends; the estimate is
	// their median, so one train disturbed by cross traffic or a stall
	// does not decide.
	Trains = 3
	// PacketsPerTrain is each train's length: 40 datagrams of
	// PayloadBytes, about 48 KB, long enough that a train spans several
	// milliseconds at 100 Mbit/s and short enough to fit any bottleneck's
	// queue.
	PacketsPerTrain = 40
	// PayloadBytes is each datagram's UDP payload: 1,200 bytes, so that a
	// datagram crosses any path that carries IPv6 (minimum MTU 1,280)
	// without fragmentation.
	PayloadBytes = 1200
	// MaxIPBytes is the most one datagram costs on the wire, IP and UDP
	// headers included (IPv6: 40 + 8).
	MaxIPBytes = PayloadBytes + 48
	// MaxMeasurementBytes is the most one measurement puts on the wire.
	MaxMeasurementBytes = Trains * PacketsPerTrain * MaxIPBytes
)

// headerBytes is the datagram header: magic (4), version (1), train (1),
// seq (2), nonce (16), sent (8).
const headerBytes = 4 + 1 + 1 + 2 + NonceBytes + 8

var magic = [4]byte{'R', 'M', 'P', 'T'}

const version = 1

// NonceBytes is the size of a measurement's nonce.
const NonceBytes = 16

// Nonce names one expected measurement. The receiver issues it over the
// authenticated admin API and counts only datagrams that carry it: whoever
// does not hold it cannot feed the receiver arrivals.
type Nonce [NonceBytes]byte

// NewNonce draws a random nonce.
func NewNonce() Nonce {
	var n Nonce
	_, _ = rand.Read(n[:]) // never fails (crypto/rand)
	return n
}

// String is the nonce in hex, as the admin API carries it.
func (n Nonce) String() string { return hex.EncodeToString(n[:]) }

// ParseNonce reads a nonce written by String.
func ParseNonce(s string) (Nonce, error) {
	var n Nonce
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != NonceBytes {
		return n, fmt.Errorf("nonce %q: want %d bytes in hex", s, NonceBytes)
	}
	copy(n[:], b)
	return n, nil
}

// Datagram is one datagram of a train.
type Datagram struct {
	Nonce Nonce
	Train uint8
	Seq   uint16
	// SentNs is when the sender wrote it, nanoseconds on the sender's
	// clock from its measurement's start: the receiver compares its
	// spacing with the arrivals' to tell a path slower than the sender
	// from a sender slower than the path.
	SentNs int64
}

// Marshal writes d into buf, PayloadBytes long (the rest is padding), and
// returns buf[:PayloadBytes].
func (d Datagram) Marshal(buf []byte) []byte {
	if cap(buf) < PayloadBytes {
		buf = make([]byte, PayloadBytes)
	}
	buf = buf[:PayloadBytes]
	copy(buf[0:4], magic[:])
	buf[4] = version
	buf[5] = d.Train
	binary.BigEndian.PutUint16(buf[6:8], d.Seq)
	copy(buf[8:8+NonceBytes], d.Nonce[:])
	binary.BigEndian.PutUint64(buf[8+NonceBytes:headerBytes], uint64(d.SentNs))
	clear(buf[headerBytes:])
	return buf
}

// errNotTrain: the bytes are not a train datagram of this version.
var errNotTrain = errors.New("not a packet-train datagram")

// Parse reads a datagram; an error for anything that is not one of ours,
// of PayloadBytes, with a train and a sequence number in range.
func Parse(b []byte) (Datagram, error) {
	var d Datagram
	if len(b) != PayloadBytes || [4]byte(b[0:4]) != magic || b[4] != version {
		return d, errNotTrain
	}
	d.Train, d.Seq = b[5], binary.BigEndian.Uint16(b[6:8])
	if int(d.Train) >= Trains || int(d.Seq) >= PacketsPerTrain {
		return d, fmt.Errorf("train %d seq %d: out of range", d.Train, d.Seq)
	}
	copy(d.Nonce[:], b[8:8+NonceBytes])
	d.SentNs = int64(binary.BigEndian.Uint64(b[8+NonceBytes : headerBytes]))
	return d, nil
}

// Expectation is what a receiver answers GET /v1/capacity/expect: the
// nonce the sender's datagrams must carry and the UDP port to send them to
// (on the host of the receiver's relay listener).
type Expectation struct {
	Nonce string `json:"nonce"`
	Port  int    `json:"port"`
	// Trains, PacketsPerTrain and PayloadBytes are the shape the receiver
	// expects (this package's constants): a sender of another version
	// refuses rather than measures wrong.
	Trains          int `json:"trains"`
	PacketsPerTrain int `json:"packets_per_train"`
	PayloadBytes    int `json:"payload_bytes"`
}

// Arrival is one datagram as received: its train and sequence number,
// when it was sent (Datagram.SentNs) and when it arrived, nanoseconds from
// the first arrival of the measurement (the kernel's receive timestamp
// where the socket has one).
type Arrival struct {
	Train  int   `json:"train"`
	Seq    int   `json:"seq"`
	SentNs int64 `json:"sent_ns"`
	AtNs   int64 `json:"at_ns"`
}

// Arrivals is what a receiver answers GET /v1/capacity/arrivals: every
// datagram that carried the nonce, and how the receiver timed them.
type Arrivals struct {
	Arrivals []Arrival `json:"arrivals"`
	// IPHeaderBytes is what IP and UDP added to each datagram on the
	// receiver's socket (28 over IPv4, 48 over IPv6): the rate on the
	// wire counts them.
	IPHeaderBytes int `json:"ip_header_bytes"`
	// KernelTimestamps says the arrival times are the kernel's
	// (SO_TIMESTAMPNS), not read after a wake-up of the receiver.
	KernelTimestamps bool `json:"kernel_timestamps"`
}

// Answer is what a relay answers GET /v1/capacity?to=PEER: its capacity
// towards PEER as its own trains measured it.
type Answer struct {
	From string `json:"from"`
	To   string `json:"to"`
	// SendBps is the estimate (Estimate.TCPBps), bits/s; 0 with Error.
	SendBps float64 `json:"send_bps"`
	// AgeSec is how old the measurement is, seconds (0: just measured;
	// more: a cached one, at most an hour old).
	AgeSec float64 `json:"age_s"`
	// SenderLimited says the trains arrived as fast as the sender wrote
	// them: the path is at least this fast (Estimate.SenderLimited).
	SenderLimited bool   `json:"sender_limited,omitempty"`
	Error         string `json:"error,omitempty"`
}
