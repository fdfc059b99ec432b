// Package learnt is what a sender learns of its paths from the traffic it
// carries, by reading its sockets' TCP_INFO: the rate each path sustained
// while the path, not the application or a window, held the sends
// (rate.go), the share of the bytes sent again (loss.go), and the largest
// receive window each receiver advertised (window.go). relayd learns its
// sends to clients, peers and destinations; relayctl connect its own, to
// the first relay of a chain and to a destination it reaches directly.
// Both run relay.Server, which keeps a Record. The planner never reads it
// directly: pkg/survey takes what a Record says of a host.
package learnt

import (
	"net/netip"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// Record is what the sockets sending to each host taught, by the host's
// address. The zero value is ready; Rates.Run samples the watched sockets.
type Record struct {
	Rates Rates
	// Received is what the tunnels received from each host (a relay's
	// destinations): received.go.
	Received Received
	loss     Loss[netip.Addr]
	windows  windows
}

// Sent is what a host's sockets to one host taught, as of a moment.
type Sent struct {
	// RateBps is the best rate the sends sustained while the path held
	// them (rate.go), bits/s; 0: none learnt. RateAge is how long ago
	// a tunnel last taught one (a lesson or its end).
	RateBps float64
	RateAge time.Duration
	// Loss is the share of the bytes sent that went again, LossAge how
	// long ago a tunnel last taught one (a lesson or its end); LossOK false: too
	// little went to tell (a Loss of 0 with LossOK is an answer).
	Loss    float64
	LossAge time.Duration
	LossOK  bool
	// WindowBytes is the largest receive window the host advertised to
	// sockets that sent it enough (window.go); 0: none. WindowAge is how
	// long ago it was.
	WindowBytes int64
	WindowAge   time.Duration
}

// AddLoss records what a tunnel's socket to host sent and resent (st, its
// last reading), when it sent enough to count.
func (r *Record) AddLoss(host netip.Addr, at time.Time, st tunnel.SocketStats) {
	r.loss.add(host.Unmap(), at, st, lossHostsKept)
}

// AddWindow records the window host advertised to a tunnel's socket: st
// is its last reading, w its watch (nil: not watched), whose readings may
// have seen a larger one.
func (r *Record) AddWindow(host netip.Addr, at time.Time, st tunnel.SocketStats, w *Socket) {
	r.windows.add(host, at, st, w.PeerWindowBytes())
}

// SentTo is what the sockets to host taught, as of now.
func (r *Record) SentTo(host netip.Addr, now time.Time) Sent {
	host = host.Unmap()
	var s Sent
	s.RateBps, s.RateAge, _ = r.Rates.Learnt(host, now)
	s.Loss, s.LossAge, s.LossOK = r.loss.Estimate(host, now)
	s.WindowBytes, s.WindowAge, _ = r.windows.largest(host, now)
	return s
}
