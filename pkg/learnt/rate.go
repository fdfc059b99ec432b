package learnt

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
	"github.com/relaymesh/relaymesh/planner"
)

// A sender learns what each path it sends on can carry from the tunnels
// it carries: while a tunnel runs, its sockets' TCP_INFO is read every
// rateSampleEvery, and an interval counts when the path set its rate:
// data in flight throughout, the latest rate sample not app-limited (the
// socket had less to send than its congestion window allowed, as a relay
// whose upstream is slower has), and either not held by the receiver's
// window or the send buffer, or held while a standing queue on the path
// (smoothed RTT at least rateQueuedRTT × the socket's least) shows that
// the bottleneck link was busy all the same: a loss-based sender fills a
// deep buffer until the receiver's window stops it, and the rate it then
// sees is the bottleneck's. A loss-based sender (CUBIC, Reno: not
// planner.LossTolerant) counts only so, held by the window over a
// standing queue: without a queue the bottleneck had room, so its rate
// was its window's climb, back from a loss or up from slow start, not the
// path's capacity, and the least of such a run is a random draw below
// what the path carries. Where random loss is what held it, the planner
// prices that loss apart (the Mathis bound on the loss learnt, loss.go);
// counted here too, it would be charged twice. Its smoothed RTT alone is
// no proof of a queue: a CUBIC relay link losing 0.3 % of its packets at
// ~8 of its 100 Mbit/s read 1.5-2× its least RTT with its window open
// (docs/planning.md), where the window's stop is what a queue's
// standing shows. A loss-tolerant sender (BBR) paces at its estimate of
// the bottleneck's rate, queue or not. And a queue is read only while
// the receiver advertises at least rateWindowKeptShare of the largest
// window it advertised to the tunnel: a receiver whose reader fell behind
// (a relay held back by the slower segment after it) holds its sender
// with a window shrunk to what its buffer has left, and its sender's RTT
// is no queue's; one that keeps up advertises its whole buffer. A
// tunnel's rate to its peer is the best it sustained over rateRunSamples
// such intervals in a row (the least of the run, so one fast interval
// counts for nothing, and slow start's intervals do not pull it down),
// and steady: the run's fastest interval at most rateSteadyRatio × its
// slowest. A bottleneck's capacity holds a sender's rate steady; what
// swings from one interval to the next (a loss-based sender's sawtooth,
// a sender the next relay's window holds now and then) is the sender's
// own dynamics, and the least of such a run is below what the path
// carries.
// The planner takes it as a bound on what that sender puts on that path:
// declared capacities need an operator; this needs only traffic.
const (
	rateSampleEvery = 500 * time.Millisecond
	// rateRunSamples in a row make a sustained rate: 1.5 s.
	rateRunSamples = 3
	// rateSteadyRatio: a run whose fastest interval is faster than this
	// × its slowest is not the path's steady rate.
	rateSteadyRatio = 1.25
	// rateBusyShare of an interval the socket must have had data in
	// flight, and at most rateHeldShare held by a window or a buffer.
	rateBusyShare = 0.9
	rateHeldShare = 0.1
	// rateQueuedRTT: a smoothed RTT this many times the least seen is a
	// standing queue (the lab's 30 Mbit/s link: 92 ms against 20).
	rateQueuedRTT = 1.5
	// rateWindowKeptShare of the largest window the receiver advertised
	// to the tunnel: below it, the receiver's reader fell behind.
	rateWindowKeptShare = 0.5
	// rateWindow is how long a learnt rate counts; a host's rate is the
	// best of its tunnels' in the window.
	rateWindow = 10 * time.Minute
	// rateHostsKept and rateSamplesPerHost bound memory; rateWatchedMax
	// bounds the sockets read each interval (two TCP_INFO reads each).
	rateHostsKept      = 4096
	rateSamplesPerHost = 16
	rateWatchedMax     = 1024
)

// Socket is one watched sending side of a live tunnel: one socket, or
// the links of a striped stream (tunnel.LinksUnder), each its own TCP
// connection to the same host.
type Socket struct {
	links  []*sendLink
	host   netip.Addr
	prevAt time.Time
	// run holds the current run's last rates, bits/s; bestBps is the best
	// sustained rate so far (0 = none yet).
	run     []float64
	bestBps float64
	// taughtBps is the rate recorded for the host last (Teach, Done): a
	// live tunnel teaches a rate again only when it sustained a better one.
	taughtBps float64
	// peerWindowBytes is the largest receive window the peer advertised
	// in the readings (TCP_INFO snd_wnd), on any one link: a window is
	// one connection's.
	peerWindowBytes uint32
	// readings is Sample's buffer for one reading of each link, so
	// that sampling a thousand sockets twice a second allocates nothing.
	readings []tunnel.SocketStats
}

// sendLink is one socket of a Socket.
type sendLink struct {
	stats *tunnel.StatsReader
	prev  tunnel.SocketStats
	// lossBased: the socket's congestion control is bound by random loss.
	lossBased bool
}

// Rates is the per-host record of sustained send rates, and the watcher
// of the sockets that teach them. The zero value is ready; Run samples.
type Rates struct {
	mu   sync.Mutex
	live map[*Socket]struct{}
	// liveLinks is the sockets of live's members, rateWatchedMax at most.
	liveLinks int
	hosts     series[netip.Addr, float64]
}

// HostOf is c's remote host, IPv4 in IPv6 unmapped; ok false when c's
// remote address is not an IP address and port.
func HostOf(c net.Conn) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// Watch starts sampling c, the sending side of a tunnel towards its
// remote host; nil (nothing to do) when c is not TCP or rateWatchedMax
// sockets are watched already. A striped stream is watched over its links
// (tunnel.LinksUnder), all of which must be TCP: its rate is theirs
// together, what the tunnel moved, as for any other tunnel.
func (r *Rates) Watch(c net.Conn, now time.Time) *Socket {
	host, ok := HostOf(c)
	if !ok || r.full() {
		return nil // full: no readers made for a socket that is not watched
	}
	w := &Socket{host: host, prevAt: now}
	for _, l := range tunnel.LinksUnder(c) {
		stats := tunnel.NewStatsReader(l)
		st := stats.Read()
		if !st.Valid {
			return nil
		}
		w.links = append(w.links, &sendLink{stats: stats, prev: st, lossBased: !planner.LossTolerant(tunnel.Congestion(l))})
		w.peerWindowBytes = max(w.peerWindowBytes, st.PeerWindowBytes)
	}
	w.readings = make([]tunnel.SocketStats, len(w.links))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live == nil {
		r.live = map[*Socket]struct{}{}
	}
	if r.liveLinks+len(w.links) > rateWatchedMax {
		return nil
	}
	r.live[w] = struct{}{}
	r.liveLinks += len(w.links)
	return w
}

// full reports whether rateWatchedMax sockets are watched already.
func (r *Rates) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.liveLinks >= rateWatchedMax
}

// Sample reads every watched socket once; Run calls it each interval,
// never two at once (each Socket's readings are its own, reused).
func (r *Rates) Sample(now time.Time) {
	r.mu.Lock()
	ws := liveOf(r.live)
	r.mu.Unlock()
	for _, w := range ws {
		sts := w.readings
		for i, l := range w.links {
			sts[i] = l.stats.Read() // outside the lock: a syscall each
		}
		r.mu.Lock()
		if _, ok := r.live[w]; ok {
			w.add(sts, now)
		}
		r.mu.Unlock()
	}
}

// add takes one reading of each link: an interval that qualifies on every
// link extends the run, at the links' rate together; any other ends it. A
// striped stream's links share its bytes, so one link's rate alone is a
// share of what the path carried, not a bound on it; and a link idle or
// held while the others ran means the stream, not the path, set the pace.
func (w *Socket) add(sts []tunnel.SocketStats, now time.Time) {
	dtMs := float64(now.Sub(w.prevAt).Milliseconds())
	w.prevAt = now
	counts := len(sts) == len(w.links) && len(sts) > 0
	var sentBytes uint64
	for i, l := range w.links {
		if i >= len(sts) {
			break
		}
		w.peerWindowBytes = max(w.peerWindowBytes, sts[i].PeerWindowBytes)
		sent, ok := l.interval(sts[i], dtMs, w.peerWindowBytes)
		counts = counts && ok
		sentBytes += sent
	}
	if !counts {
		w.run = w.run[:0]
		return
	}
	w.run = append(w.run, float64(sentBytes)*8*1000/dtMs)
	if len(w.run) > rateRunSamples {
		w.run = w.run[1:]
	}
	if len(w.run) == rateRunSamples {
		if least := min(w.run[0], w.run[1], w.run[2]); max(w.run[0], w.run[1], w.run[2]) <= rateSteadyRatio*least {
			w.bestBps = max(w.bestBps, least)
		}
	}
}

// interval takes l's reading st, dtMs after its last: what it sent since,
// and whether the path set its rate throughout (the rules above).
// peerWindowMaxBytes is the largest window the receiver advertised to the
// tunnel so far.
func (l *sendLink) interval(st tunnel.SocketStats, dtMs float64, peerWindowMaxBytes uint32) (sentBytes uint64, counts bool) {
	prev := l.prev
	l.prev = st
	if !st.Valid || dtMs <= 0 || st.SentBytes < prev.SentBytes || st.BusyMs < prev.BusyMs {
		return 0, false
	}
	busyMs := float64(st.BusyMs - prev.BusyMs)
	heldMs := float64(st.RwndLimitedMs-prev.RwndLimitedMs) + float64(st.SndbufLimitedMs-prev.SndbufLimitedMs)
	held := heldMs > rateHeldShare*dtMs
	receiverKeptUp := float64(st.PeerWindowBytes) >= rateWindowKeptShare*float64(peerWindowMaxBytes)
	queued := receiverKeptUp && st.MinRTTMs > 0 && st.RTTMs >= rateQueuedRTT*st.MinRTTMs
	if st.AppLimited || busyMs < rateBusyShare*dtMs || (held && !queued) || (l.lossBased && !(held && queued)) || st.SentBytes == prev.SentBytes {
		return 0, false
	}
	return st.SentBytes - prev.SentBytes, true
}

// Done stops watching w and records its tunnel's sustained rate, if any and
// better than what it taught while it ran (Teach).
// w's readings stay readable (PeerWindowBytes).
func (r *Rates) Done(w *Socket, now time.Time) {
	if w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[w]; ok {
		delete(r.live, w)
		r.liveLinks -= len(w.links)
	}
	r.teachLocked(w, now)
}

// Teach records w's sustained rate so far while its tunnel runs, when it
// is better than what w taught before: a tunnel that runs for an hour
// teaches while it runs, not only when it ends (relayd's lessons).
func (r *Rates) Teach(w *Socket, now time.Time) {
	if w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.teachLocked(w, now)
}

// teachLocked is Teach with r.mu held.
func (r *Rates) teachLocked(w *Socket, now time.Time) {
	if w.bestBps <= w.taughtBps {
		return
	}
	w.taughtBps = w.bestBps
	r.hosts.add(w.host, now, w.bestBps, rateWindow, rateSamplesPerHost, rateHostsKept)
}

// PeerWindowBytes is the largest receive window w's peer advertised in
// its readings; 0 for nil. Read it after Done.
func (w *Socket) PeerWindowBytes() uint32 {
	if w == nil {
		return 0
	}
	return w.peerWindowBytes
}

// Learnt is the best sustained rate to host in the window before now,
// bits/s, and how long ago it was last taught (a tunnel's end, or Teach);
// ok false when
// no tunnel taught one.
func (r *Rates) Learnt(host netip.Addr, now time.Time) (bps float64, age time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bestRate(&r.hosts, host, now)
}

// bestRate is the best of host's rates in rates within rateWindow before
// now, and how long ago the newest was recorded; ok false when none is.
func bestRate(rates *series[netip.Addr, float64], host netip.Addr, now time.Time) (bps float64, age time.Duration, ok bool) {
	rates.each(host.Unmap(), now, rateWindow, func(a time.Duration, v float64) {
		if !ok || a < age {
			age = a
		}
		bps, ok = max(bps, v), true
	})
	return bps, age, ok
}

// Run samples until ctx ends.
func (r *Rates) Run(ctx context.Context) { sampleEvery(ctx, r.Sample) }

// sampleEvery calls sample each rateSampleEvery until ctx ends.
func sampleEvery(ctx context.Context, sample func(now time.Time)) {
	t := time.NewTicker(rateSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			sample(now)
		}
	}
}

// liveOf is the watched set's members, to read outside its owner's lock.
func liveOf[W comparable](live map[W]struct{}) []W {
	ws := make([]W, 0, len(live))
	for w := range live {
		ws = append(ws, w)
	}
	return ws
}
