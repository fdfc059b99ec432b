package learnt

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A relay also learns what a destination's path to it carries, from the
// tunnels whose data it receives from the destination (a download's last
// segment): no relay sends on that segment, so Rates cannot, and a loss on
// the destination's sends (which only the destination's host could count)
// would otherwise stay unknown to every plan. While a tunnel runs, each
// rateSampleEvery the relay reads the receiving socket and the socket it
// forwards on; an interval counts when data arrived and the relay kept up
// with it (keptUp), so neither this relay nor anything after it held the
// destination back. The
// tunnel's rate from that host is the best it kept over rateRunSamples
// such intervals in a row (the least of the run), and Received keeps per
// host the best of its tunnels' in rateWindow, as Rates does for sends.
//
// What it cannot tell apart is a destination that had less to send (a
// stream at its own bitrate): that rate reads as the path's. Only tunnels
// that received recvMinTunnelBytes count, and the best of the window
// stands, so one bulk transfer outweighs streams.
const recvMinTunnelBytes = 1 << 20

// Inflow is one watched tunnel's socket from its destination, and the
// socket the relay forwards on.
type Inflow struct {
	// from and onward are the sockets' readers: one each, or a striped
	// stream's links (tunnel.LinksUnder), read together (joinReadings).
	from, onward []*tunnel.StatsReader
	host         netip.Addr
	prevRecv     uint64
	prevAt       time.Time
	// run holds the current run's last rates, bits/s; bestBps is the best
	// kept so far (0 = none yet).
	run     []float64
	bestBps float64
}

// Received is the per-host record of rates received, and the watcher of
// the sockets that teach them. The zero value is ready; Run samples.
type Received struct {
	mu    sync.Mutex
	live  map[*Inflow]struct{}
	hosts series[netip.Addr, float64]
}

// Watch starts sampling from (a tunnel's socket to the host it receives
// from) and onward (the socket it forwards that data on); nil when either
// is not TCP or rateWatchedMax are watched already.
func (r *Received) Watch(from, onward net.Conn, now time.Time) *Inflow {
	host, ok := HostOf(from)
	if !ok || r.full() {
		return nil // full: no readers made for sockets that are not watched
	}
	fromStats, onwardStats := readersOf(from), readersOf(onward)
	st := joinReadings(fromStats)
	if !st.Valid || !joinReadings(onwardStats).Valid {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live = map[*Inflow]struct{}{}
	}
	if len(r.live) >= rateWatchedMax {
		return nil
	}
	w := &Inflow{from: fromStats, onward: onwardStats, host: host, prevRecv: st.ReceivedBytes, prevAt: now}
	r.live[w] = struct{}{}
	return w
}

// full reports whether rateWatchedMax pairs are watched already.
func (r *Received) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live) >= rateWatchedMax
}

// Sample reads every watched pair of sockets once; Run calls it each
// interval.
func (r *Received) Sample(now time.Time) {
	r.mu.Lock()
	ws := liveOf(r.live)
	r.mu.Unlock()
	for _, w := range ws {
		from, onward := joinReadings(w.from), joinReadings(w.onward) // outside the lock
		r.mu.Lock()
		if _, ok := r.live[w]; ok {
			w.add(from, onward, now)
		}
		r.mu.Unlock()
	}
}

// readersOf reads c's socket, or each of its links' (tunnel.LinksUnder).
func readersOf(c net.Conn) []*tunnel.StatsReader {
	links := tunnel.LinksUnder(c)
	rs := make([]*tunnel.StatsReader, len(links))
	for i, l := range links {
		rs[i] = tunnel.NewStatsReader(l)
	}
	return rs
}

// joinReadings reads rs as one socket, for what Received asks of it: the
// bytes received and the bytes not yet sent, in all; and a link whose unread
// bytes reach its window stands for all (its sender is held back, and a
// striped sender waits for its slowest link), else the sums, whose unread
// stay below their windows. Not Valid unless every link is.
func joinReadings(rs []*tunnel.StatsReader) tunnel.SocketStats {
	j := tunnel.SocketStats{Valid: len(rs) > 0}
	held := false
	for _, r := range rs {
		st := r.Read()
		j.Valid = j.Valid && st.Valid
		j.ReceivedBytes += st.ReceivedBytes
		j.NotsentBytes += st.NotsentBytes
		switch {
		case held:
		case st.UnreadBytes >= int(st.WindowBytes):
			held, j.UnreadBytes, j.WindowBytes = true, st.UnreadBytes, st.WindowBytes
		default:
			j.UnreadBytes += st.UnreadBytes
			j.WindowBytes += st.WindowBytes
		}
	}
	return j
}

// add takes one reading of the receiving and the onward socket: an
// interval that qualifies extends the run, any other ends it.
func (w *Inflow) add(from, onward tunnel.SocketStats, now time.Time) {
	prevRecv, dtMs := w.prevRecv, float64(now.Sub(w.prevAt).Milliseconds())
	w.prevRecv, w.prevAt = from.ReceivedBytes, now
	if !from.Valid || !onward.Valid || dtMs <= 0 || from.ReceivedBytes <= prevRecv || !keptUp(from, onward) {
		w.run = w.run[:0]
		return
	}
	w.run = append(w.run, float64(from.ReceivedBytes-prevRecv)*8*1000/dtMs)
	if len(w.run) > rateRunSamples {
		w.run = w.run[1:]
	}
	if len(w.run) == rateRunSamples {
		w.bestBps = max(w.bestBps, min(w.run[0], w.run[1], w.run[2]))
	}
}

// keptUp says the relay was not holding its sender back at the reading:
// it had read what arrived (less sits unread in the receiving socket than
// the window that socket last advertised) and passed it on (less than
// backlogBytes sits unsent in the onward socket). A relay held back by
// what comes after it stops reading, and what arrives piles up unread;
// where its receive buffer is small (autotuned to what it is read at), the
// pile is in its onward socket instead.
//
// The onward socket's app-limited flag says nothing here: the kernel sets
// it whenever the socket has nothing unsent, and a socket whose send
// buffer is all in flight (a long segment on a stock 4 MiB buffer) has
// nothing unsent while the relay behind it cannot write another byte. In
// the stripe lab such a relay left 5.5 MB unread from the server at every
// reading with its onward socket "app-limited", and learnt the one
// connection's 114 Mbit/s as the server's rate to it.
func keptUp(from, onward tunnel.SocketStats) bool {
	readAll := from.UnreadBytes < int(from.WindowBytes)
	if from.WindowBytes == 0 { // a kernel before 6.2 does not report it
		readAll = from.UnreadBytes < backlogBytes
	}
	return readAll && onward.NotsentBytes < backlogBytes
}

// backlogBytes is what may sit unread, or unsent, in a socket of a relay
// that keeps up: two of its reads (a splice pipe, a copy buffer: 64 KiB).
const backlogBytes = 128 << 10

// Done stops watching w and records its tunnel's rate, if any, when the
// tunnel received enough to count.
func (r *Received) Done(w *Inflow, now time.Time) {
	if w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, w)
	if w.bestBps <= 0 || w.prevRecv < recvMinTunnelBytes {
		return
	}
	r.hosts.add(w.host, now, w.bestBps, rateWindow, rateSamplesPerHost, rateHostsKept)
}

// Learnt is the best rate received from host in the window before now,
// bits/s, and how long ago the newest tunnel that taught one ended; ok
// false when none did.
func (r *Received) Learnt(host netip.Addr, now time.Time) (bps float64, age time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bestRate(&r.hosts, host, now)
}

// Run samples until ctx ends.
func (r *Received) Run(ctx context.Context) { sampleEvery(ctx, r.Sample) }
