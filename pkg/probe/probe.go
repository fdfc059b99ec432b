// Package probe measures round-trip times to peers on a schedule and keeps
// a rolling window of samples per peer (min, median, p90, jitter, loss).
//
// One sample is the duration of a TCP connect to the peer's admin port: the
// kernel returns from connect() when the SYN-ACK arrives, so it is one round
// trip with no process on the far side in the loop (an echo over a warm
// connection would add the peer's scheduling delay, and its RTT estimate
// from TCP_INFO is smoothed and inflated by delayed ACKs). The cost per peer
// is one handshake and close per interval: about 7 packets (~450 bytes on the
// wire both ways together); at the default 2 s interval that is 30 samples
// and ~14 KB per peer per minute.
package probe

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// Defaults.
const (
	DefaultInterval = 2 * time.Second // between two samples of one peer
	DefaultWindow   = 30              // samples kept per peer (1 min at the default interval)
	DefaultTimeout  = 2 * time.Second // a connect slower than this counts as lost
)

// OutageRun is how many lost samples in a row make an outage rather than
// loss: the peer or the path was down (a restart, a failover, a cut), which
// says nothing of how many packets the path drops once it is up. Random
// loss of 1 % loses three probes in a row about once in a million tries;
// at the default interval three are 6 s without an answer.
const OutageRun = 3

// MaxTargets is how many targets one /v1/probe request may name: a
// planner asks a relay for all of a round's probes from it at once, and
// a relay makes them at once; larger batches are split.
const MaxTargets = 64

// Summary describes a window of samples. RTTs are in milliseconds over the
// samples that were not lost. Lost counts every lost sample; those in runs
// of at least OutageRun are OutageLost, and Loss is the lost fraction of
// the other samples (1 when every sample was lost): an outage that ended
// does not linger as loss, and one going on shows in LastErr.
type Summary struct {
	Samples    int       `json:"samples"`
	Lost       int       `json:"lost"`
	OutageLost int       `json:"outage_lost,omitempty"`
	Loss       float64   `json:"loss"`
	MinMs      float64   `json:"min_ms"`
	MedianMs   float64   `json:"median_ms"`
	P90Ms      float64   `json:"p90_ms"`
	JitterMs   float64   `json:"jitter_ms"` // mean |difference| of consecutive RTTs (RFC 3550 style, unsmoothed)
	LastAt     time.Time `json:"last_at"`   // time of the newest sample
	LastErr    string    `json:"last_error,omitempty"`
	// LearntRecvBps is, in a relay's answer for a target, the best rate
	// the relay's tunnels received from the target's host while nothing
	// after the relay held them back, bits/s (0: none learnt);
	// LearntRecvAgeSec how long ago. Not a probe's: the relay adds it.
	LearntRecvBps    float64 `json:"learnt_recv_bps,omitempty"`
	LearntRecvAgeSec float64 `json:"learnt_recv_age_s,omitempty"`
}

// Reachable says whether any sample in the window got an answer.
func (s Summary) Reachable() bool { return s.Samples > s.Lost }

type sample struct {
	rttNs int64
	lost  bool
	at    time.Time
	err   string
}

// Window is a fixed-size rolling window of samples. The zero value is not
// usable: make one with NewWindow.
type Window struct {
	mu      sync.Mutex
	samples []sample // ring
	next    int
	full    bool
}

// NewWindow keeps the last size samples (DefaultWindow if size <= 0).
func NewWindow(size int) *Window {
	if size <= 0 {
		size = DefaultWindow
	}
	return &Window{samples: make([]sample, size)}
}

// Add records one sample; err != nil marks it lost, except a refused
// connection: the RST came back after one round trip, so the network path
// answered (rtt counts) though the peer's service did not (err is kept, and
// Summary.LastErr reports it). A relay probing a peer that is still
// starting, or restarting, thus measures the path without counting loss.
func (w *Window) Add(rtt time.Duration, err error, at time.Time) {
	s := sample{rttNs: int64(rtt), at: at}
	if err != nil {
		s.err = err.Error()
		if !errors.Is(err, syscall.ECONNREFUSED) || rtt <= 0 {
			s.lost, s.rttNs = true, 0
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples[w.next] = s
	w.next = (w.next + 1) % len(w.samples)
	if w.next == 0 {
		w.full = true
	}
}

// Summary computes the window's statistics.
func (w *Window) Summary() Summary {
	w.mu.Lock()
	var ordered []sample // oldest first
	if w.full {
		ordered = append(ordered, w.samples[w.next:]...)
	}
	ordered = append(ordered, w.samples[:w.next]...)
	w.mu.Unlock()
	return summarize(ordered)
}

func summarize(ordered []sample) Summary {
	var s Summary
	var rtts []int64
	var jitterSum float64
	var prev int64 = -1
	run := 0 // lost samples in a row so far
	endRun := func() {
		if run >= OutageRun {
			s.OutageLost += run
		}
		run = 0
	}
	for _, x := range ordered {
		s.Samples++
		s.LastAt = x.at
		s.LastErr = x.err
		if x.lost {
			s.Lost++
			run++
			continue
		}
		endRun()
		if prev >= 0 {
			d := x.rttNs - prev
			jitterSum += float64(max(d, -d))
		}
		prev = x.rttNs
		rtts = append(rtts, x.rttNs)
	}
	endRun()
	switch {
	case s.Samples > 0 && s.Lost == s.Samples:
		s.Loss = 1 // unreachable throughout, whatever the runs
	case s.Samples > s.OutageLost:
		s.Loss = float64(s.Lost-s.OutageLost) / float64(s.Samples-s.OutageLost)
	}
	if len(rtts) == 0 {
		return s
	}
	if len(rtts) > 1 {
		s.JitterMs = jitterSum / float64(len(rtts)-1) / 1e6
	}
	slices.Sort(rtts)
	s.MinMs = float64(rtts[0]) / 1e6
	s.MedianMs = float64(rtts[len(rtts)/2]) / 1e6
	s.P90Ms = float64(rtts[(len(rtts)*9)/10]) / 1e6
	return s
}

// HandshakeRTT measures one round trip to addr as the duration of a TCP
// connect, and closes the connection. On error it still returns how long
// the attempt took (a refused connect is one round trip too).
func HandshakeRTT(ctx context.Context, addr string) (time.Duration, error) {
	var d net.Dialer
	return TimedConnect(ctx, &d, addr)
}

// TimedConnect times one TCP connect through d and closes the connection.
// A connect that succeeded is timed by the kernel: the RTT its TCP measured
// from SYN to SYN-ACK (TCP_INFO, microseconds), which leaves out what the
// wall clock around the call adds: the runtime putting the goroutine back
// on a CPU after the answer came, a millisecond and more on a busy host. A
// refused or failed connect is timed by the wall clock.
func TimedConnect(ctx context.Context, d *net.Dialer, addr string) (time.Duration, error) {
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", addr)
	rtt := time.Since(start)
	if err == nil {
		if k, ok := kernelRTT(c); ok && k <= rtt {
			rtt = k
		}
		c.Close()
	}
	return rtt, err
}

// kernelRTT is the smoothed RTT of c's TCP connection, which right after
// the handshake is the handshake's round trip.
func kernelRTT(c net.Conn) (time.Duration, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	info, err := hostnet.TCPInfo(tc)
	if err != nil || info.Rtt == 0 {
		return 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, true
}

// Sample measures count round trips to addr, spaced by gap, with a timeout
// each, into a fresh window.
func Sample(ctx context.Context, addr string, count int, gap, timeout time.Duration, measure func(context.Context, string) (time.Duration, error)) Summary {
	if measure == nil {
		measure = HandshakeRTT
	}
	w := NewWindow(count)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
		mctx, cancel := context.WithTimeout(ctx, timeout)
		rtt, err := measure(mctx, addr)
		cancel()
		w.Add(rtt, err, time.Now())
	}
	return w.Summary()
}

// Prober samples every target on a schedule. Targets is read before every
// round, so a reloaded fleet takes effect at the next interval.
type Prober struct {
	Interval time.Duration // default DefaultInterval
	Timeout  time.Duration // default DefaultTimeout
	Window   int           // default DefaultWindow
	// Targets returns the peers to probe: name -> host:port.
	Targets func() map[string]string
	// Measure takes one sample; default HandshakeRTT.
	Measure func(ctx context.Context, addr string) (time.Duration, error)

	mu      sync.Mutex
	windows map[string]*Window
	addrs   map[string]string
}

// Run probes until ctx ends. Targets are probed concurrently; each round
// starts Interval after the previous one started.
func (p *Prober) Run(ctx context.Context) {
	interval := cmp.Or(p.Interval, DefaultInterval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Prober) round(ctx context.Context) {
	targets := p.Targets()
	measure := p.Measure
	if measure == nil {
		measure = HandshakeRTT
	}
	p.mu.Lock()
	if p.windows == nil {
		p.windows = map[string]*Window{}
	}
	for name, addr := range targets {
		if p.windows[name] == nil || p.addrs[name] != addr {
			p.windows[name] = NewWindow(p.Window) // new peer, or it moved
		}
	}
	for name := range p.windows {
		if _, ok := targets[name]; !ok {
			delete(p.windows, name) // left the fleet
		}
	}
	p.addrs = maps.Clone(targets)
	windows := maps.Clone(p.windows)
	p.mu.Unlock()

	var wg sync.WaitGroup
	for name, addr := range targets {
		w := windows[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, cancel := context.WithTimeout(ctx, cmp.Or(p.Timeout, DefaultTimeout))
			defer cancel()
			rtt, err := measure(mctx, addr)
			if ctx.Err() != nil {
				return // shutting down: not a lost sample
			}
			w.Add(rtt, err, time.Now())
		}()
	}
	wg.Wait()
}

// Snapshot returns the current summary per peer.
func (p *Prober) Snapshot() map[string]Summary {
	p.mu.Lock()
	windows := maps.Clone(p.windows)
	p.mu.Unlock()
	out := make(map[string]Summary, len(windows))
	for name, w := range windows {
		out[name] = w.Summary()
	}
	return out
}
