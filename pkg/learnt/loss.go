package learnt

import (
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A sender learns each path's loss from the data it sent on it: when a
// tunnel ends, and every relay.LessonEvery while it runs, its sockets'
// TCP_INFO say how many bytes went out (since the lesson before) and how
// many of them went again (retransmitted). Probes cannot tell: a lost SYN
// is sent again after a second and the handshake succeeds late, so random
// loss of a few percent barely shows in them, while the planner's Mathis
// bound needs it. An estimate needs enough data sent to the peer in the
// last lossWindow; until then the probes' loss stands.
const (
	// lossWindow is how far back the tunnels count.
	lossWindow = 10 * time.Minute
	// lossMinSentBytes is how much must have gone to a peer in the window
	// for an estimate: 1 MiB is ~720 full segments, so at 1 % loss about
	// 7 retransmissions (±40 %, or ±20 % on the Mathis bound, which goes
	// with √loss); more data, a closer estimate.
	lossMinSentBytes = 1 << 20
	// lossMinTunnelBytes: tunnels that sent less are left out (requests,
	// handshakes: their losses are tail losses, not the link's rate).
	lossMinTunnelBytes = 64 << 10
	// lossSamplesKept bounds the tunnels remembered per peer.
	lossSamplesKept = 256
	// lossHostsKept bounds the hosts a Record remembers.
	lossHostsKept = 4096
)

type lossSample struct {
	sentBytes, retrans uint64
}

// Loss is the record of what was sent and resent, by key: a host's
// address (Record), or a relay's name (relayd's peers). Its zero value
// keeps any number of keys.
type Loss[K comparable] struct {
	mu sync.Mutex
	s  series[K, lossSample]
}

// Counts says whether a tunnel that sent st counts towards an estimate.
func Counts(st tunnel.SocketStats) bool {
	return st.Valid && st.SentBytes >= lossMinTunnelBytes
}

// Add records a tunnel's sends to k, when it sent enough to count.
func (l *Loss[K]) Add(k K, at time.Time, st tunnel.SocketStats) { l.add(k, at, st, 0) }

// add is Add keeping at most maxKeys keys (0: no bound).
func (l *Loss[K]) add(k K, at time.Time, st tunnel.SocketStats, maxKeys int) {
	if !Counts(st) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.add(k, at, lossSample{sentBytes: st.SentBytes, retrans: st.RetransmittedBytes}, lossWindow, lossSamplesKept, maxKeys)
}

// Estimate is the share of bytes sent to k in the window before now that
// were sent again, and how long ago the newest sample that counts was
// taught (a tunnel's end or lesson);
// ok false below lossMinSentBytes.
func (l *Loss[K]) Estimate(k K, now time.Time) (loss float64, age time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var sent, retrans uint64
	l.s.each(k, now, lossWindow, func(a time.Duration, s lossSample) {
		sent, retrans = sent+s.sentBytes, retrans+s.retrans
		age = a // oldest first
	})
	if sent < lossMinSentBytes {
		return 0, 0, false
	}
	return float64(retrans) / float64(sent+retrans), age, true
}

// keys is how many keys are kept.
func (l *Loss[K]) keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.len()
}
