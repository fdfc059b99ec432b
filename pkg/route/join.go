package route

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// Join adds a link to a striped segment (pkg/stripe): the relay that
// opens the segment sends the request header on its first link and a Join
// on each other link, then reads the status on the first. The receiver
// holds the request until every link has joined, within its handshake
// timeout. A Join is MAC'd like a request (under the link's key, bound to
// the link it travels on) and has a nonce of its own, checked by the
// replay guard, so neither a stranger nor a copied join can add a link.
type Join struct {
	Time  time.Time
	Nonce [NonceBytes]byte
	// Group is the nonce of the request whose segment the link joins.
	Group [NonceBytes]byte
	// Index is the link's place in the segment, 1 to Count−1 (0 is the
	// request's link); Count the segment's links, 2 to MaxStripes.
	Index, Count int
	// Bind is the link's channel binding (as Request.Bind): not sent,
	// covered by the MAC.
	Bind []byte
}

// joinBytes is a join before its MAC: magic, version, type, time, nonce,
// group, index, count.
const joinBytes = 4 + 1 + 1 + 8 + NonceBytes + NonceBytes + 1 + 1

// NewJoin stamps the join of link index of count to the request with
// nonce group, with now and a fresh nonce.
func NewJoin(group [NonceBytes]byte, index, count int, now time.Time) (*Join, error) {
	j := &Join{Time: now, Group: group, Index: index, Count: count}
	if _, err := rand.Read(j.Nonce[:]); err != nil {
		return nil, fmt.Errorf("route: nonce: %w", err)
	}
	return j, nil
}

func (j *Join) check() error {
	if j.Count < 2 || j.Count > MaxStripes || j.Index < 1 || j.Index >= j.Count {
		return fmt.Errorf("%w: link %d of %d", ErrMalformed, j.Index, j.Count)
	}
	return nil
}

// Marshal encodes the join and appends its MAC under key (LinkKey).
func (j *Join) Marshal(key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	if err := j.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, joinBytes+MACBytes)
	b = append(b, magic[:]...)
	b = append(b, VersionStriped, typeJoin)
	b = binary.BigEndian.AppendUint64(b, uint64(j.Time.UnixMilli()))
	b = append(b, j.Nonce[:]...)
	b = append(b, j.Group[:]...)
	b = append(b, byte(j.Index), byte(j.Count))
	return appendMAC(b, key, j.Bind), nil
}

// IsJoin says whether a message starting with prefix (at least its first
// 6 bytes) is a join rather than a request.
func IsJoin(prefix []byte) bool {
	return len(prefix) >= 6 && [4]byte(prefix[:4]) == magic && prefix[4] == VersionStriped && prefix[5] == typeJoin
}

// ReadJoin reads exactly one join from rd and verifies its MAC under key on
// the link whose channel binding is bind. The caller checks freshness and
// nonce reuse (ReplayGuard.CheckJoin).
func ReadJoin(rd io.Reader, key, bind []byte) (*Join, error) {
	if len(key) == 0 {
		return nil, ErrNoKey
	}
	var buf [joinBytes + MACBytes]byte
	if _, err := io.ReadFull(rd, buf[:]); err != nil {
		return nil, noEOF(err)
	}
	if !IsJoin(buf[:]) {
		return nil, fmt.Errorf("%w: not a join", ErrMalformed)
	}
	if !verifyMAC(buf[:joinBytes], buf[joinBytes:], key, bind) {
		return nil, ErrAuth
	}
	j := &Join{Time: time.UnixMilli(int64(binary.BigEndian.Uint64(buf[6:14]))), Bind: bind}
	copy(j.Nonce[:], buf[14:14+NonceBytes])
	copy(j.Group[:], buf[14+NonceBytes:14+2*NonceBytes])
	j.Index, j.Count = int(buf[joinBytes-2]), int(buf[joinBytes-1])
	if err := j.check(); err != nil {
		return nil, err
	}
	return j, nil
}
