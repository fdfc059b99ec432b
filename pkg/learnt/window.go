package learnt

import (
	"net/netip"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A sender learns the receive window each host advertises from the
// sockets it sends to it on (TCP_INFO snd_wnd): for a destination, what
// bounds an upload's last segment, which otherwise only a timed upload
// (relayctl bench) shows. A receiver's kernel grows the window it
// advertises with what it receives (Linux autotuning: from about 64 KiB,
// tcp_rmem's default, to about twice what its application read in a
// round trip, up to tcp_rmem's max), so a socket that sent little (a
// request, a handshake) saw the window the receiver starts with, not the
// one it reaches. Only a socket that sent at least WindowMinSentBytes
// counts: a sender that keeps the window full doubles it each round trip
// and sends about twice the window it reaches on the way, so after 4 MiB
// the window can have grown past 2 MiB where the path needs that much,
// beyond the windows that hold a path of 100 ms below 168 Mbit/s. The
// window grows only as far as the sends needed (about twice what they
// kept in flight), so where it did not hold them it is a lower bound of
// the receiver's limit, which still bounds a prediction at about twice
// what they carried. The largest of the last windowKeep counts: a slow,
// app-limited sender (an interactive session) may send 4 MiB without
// growing the window, and must not lower what a bulk transfer taught.
const (
	// WindowMinSentBytes is how much a socket must have sent for its
	// peer's window to count.
	WindowMinSentBytes = 4 << 20
	// windowKeep is how long a learnt window counts: a host's window is
	// its buffers' setting, which changes far more rarely than a path's
	// rate (the hour relayctl bench's history counts).
	windowKeep = time.Hour
	// windowHostsKept and windowSamplesPerHost bound memory.
	windowHostsKept      = 4096
	windowSamplesPerHost = 16
)

// windows is the per-host record of the largest windows the hosts
// advertised.
type windows struct {
	mu sync.Mutex
	s  series[netip.Addr, uint32]
}

// add records the largest window host advertised to a socket that sent
// st (its last reading) and whose earlier readings saw at most
// sampledBytes, when it sent enough to count.
func (w *windows) add(host netip.Addr, at time.Time, st tunnel.SocketStats, sampledBytes uint32) {
	win := max(st.PeerWindowBytes, sampledBytes)
	if !st.Valid || st.SentBytes < WindowMinSentBytes || win == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.add(host.Unmap(), at, win, windowKeep, windowSamplesPerHost, windowHostsKept)
}

// largest is the largest window host advertised in the keep before now,
// bytes, and how long ago (the newest of that size); ok false when none
// counts.
func (w *windows) largest(host netip.Addr, now time.Time) (bytes int64, age time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.each(host.Unmap(), now, windowKeep, func(a time.Duration, v uint32) {
		if int64(v) >= bytes {
			bytes, age, ok = int64(v), a, true // oldest first: the newest of the largest
		}
	})
	return bytes, age, ok
}
