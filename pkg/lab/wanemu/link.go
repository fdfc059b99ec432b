// Package wanemu emulates WAN links between network namespaces on one Linux
// machine (there is no netem here): each link is a pair of TUN devices, and a
// Go process moves IP packets between them, holding each until its due time.
// Two packet engines do it (engine.go): the default one scheduler thread
// serving every link direction, and the first design, one locked OS thread
// per direction waiting in ppoll (this file). Both wait with ns timeouts on
// locked threads (timer slack 1 ns) because Go timers wake ~1 ms late.
// docs/lab.md has the measurements behind the design.
package wanemu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Params shape one direction of a link.
type Params struct {
	DelayNs    int64   // one-way propagation delay
	RateBps    int64   // serialization rate in bits/s; 0 = DefaultRateBps
	QueueBytes int     // tail-drop limit on the bytes held, queued or on the delay line; 0 = DefaultQueueBytes
	Loss       float64 // Bernoulli loss probability, 0..1
	// JitterNs adds a uniform random 0..JitterNs to each packet's delay. A
	// packet never overtakes the one before it (its due time is raised to
	// its predecessor's), so jitter does not reorder: TCP would read
	// reordering as loss, which real WAN paths rarely show.
	JitterNs int64
}

// DefaultRateBps is the line rate of a link given no rate (1 Gbit/s). There
// is no "unlimited": a sender with a large window emits bursts of thousands
// of packets at once, and a link without a rate would make them all due at
// the same instant; the emulator writes ~150k packets/s, so the tail of such
// a burst was written milliseconds late and the self-check failed. At
// 1 Gbit/s each 1500-byte packet leaves 12 us after the one before, as on a
// real line, which the emulator keeps up with.
const DefaultRateBps = 1_000_000_000

// DefaultQueueBytes bounds the bytes held by one direction, queued or on
// the delay line.
const DefaultQueueBytes = 16 << 20

const (
	// One TUN packet at most: NewLink sets MTU 1500 and the TUN has no
	// offloads (no IFF_VNET_HDR), so no packet is larger. Kept small: a
	// direction holds up to SlotsFor of them (slots.go).
	slotBytes = 2048
	batch     = 256 // packets read per wake-up
)

// Stats of one direction. Lateness is how long after its due time a packet
// was written (scheduling error of the emulator itself).
type Stats struct {
	Packets uint64 `json:"packets"` // delivered
	Bytes   uint64 `json:"bytes"`   // delivered
	// Drops by cause: the rate queue's byte limit (what a real bottleneck
	// does), emulated random loss, all packet slots held (the emulator's own
	// limit: the run is suspect), and writes the receiving TUN refused.
	DropsQueue  uint64 `json:"drops_queue"`
	DropsLoss   uint64 `json:"drops_loss"`
	DropsSlots  uint64 `json:"drops_slots"`
	WriteErrors uint64 `json:"write_errors"`
	// Slots is how many packets the direction can hold (SlotsFor), and
	// HeldPeak the most it held at once: how near it came to DropsSlots.
	Slots    int `json:"slots"`
	HeldPeak int `json:"held_peak"`
	// Lateness percentiles over the most recent 65,536 packets; max over all.
	LatenessP50Ns int64 `json:"lateness_p50_ns"`
	LatenessP99Ns int64 `json:"lateness_p99_ns"`
	LatenessMaxNs int64 `json:"lateness_max_ns"`
	// LatenessSamples is how many packets the percentiles are over, and
	// LateSamples how many of them were more than MaxP99LatenessNs late.
	LatenessSamples int `json:"lateness_samples"`
	LateSamples     int `json:"late_samples"`
	// LatenessMeanNs is the mean over every packet written since the last
	// reset: how much the emulator added to this direction's delay.
	LatenessMeanNs int64 `json:"lateness_mean_ns"`
}

// MaxP99LatenessNs is the self-check bound: at most 1 % of packets may be
// written more than this late. Above it, delays are no longer what the
// topology says (docs/lab.md, pitfalls) and a run is invalid.
const MaxP99LatenessNs = 500_000

// lateFractionBound is the "1 %" above, and lateConfidence how sure the check
// must be that a direction broke it before it calls the run invalid. The
// sample p99 of a few hundred packets is the third-worst one: one VM wake-up
// hiccup (an idle thread here wakes up to a few ms late now and then) put
// three probe packets late and failed a lab whose traffic was fine, while 3
// of 300 is exactly what a 1 % rate predicts. So the check is a one-sided
// binomial test: invalid when P(X >= late | n, 1 %) < 1 %. For 300 packets
// that is 9 or more late (3 %); for 60 packets, 4 or more; for the 65,536 a
// busy direction keeps, 716 or more (1.09 %), so a busy direction is held to
// its p99 as before.
const (
	lateFractionBound = 0.01
	lateConfidence    = 0.99
)

// lateTooOften reports whether late of n samples shows, at lateConfidence,
// that more than lateFractionBound of all packets were late.
func lateTooOften(late, n int) bool {
	if late <= 0 || n <= 0 {
		return false
	}
	return binomialUpperTail(n, late, lateFractionBound) < 1-lateConfidence
}

// binomialUpperTail is P(X >= k) for X ~ Binomial(n, p), summed in log space
// (n is at most 65,536, so the terms below k are at most a few thousand).
func binomialUpperTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if k > n {
		return 0
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	below := 0.0
	for i := 0; i < k; i++ {
		lgI, _ := math.Lgamma(float64(i + 1))
		lgR, _ := math.Lgamma(float64(n - i + 1))
		below += math.Exp(lgN - lgI - lgR + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return max(0, 1-below)
}

// MaxLatenessNs bounds the single worst packet. p99 misses one long stall
// (a thread not run for 70 ms while other processes compiled kept p99 at
// 0.15 ms but made a 50 ms-RTT flow 9 % slow); this VM's idle wake-up
// latency peaks at a few ms, so 20 ms means something really stalled.
const MaxLatenessNs = 20_000_000

// Check returns why these stats make a run invalid by the strict, absolute
// bounds, or nil (LinkEffect.Check is the check by effect). Queue and loss
// drops are emulated behaviour, not faults.
func (s Stats) Check() error {
	var errs []error
	if lateTooOften(s.LateSamples, s.LatenessSamples) {
		errs = append(errs, fmt.Errorf("%d of %d packets more than %.1f ms late, p99 lateness %.3f ms (emulator overloaded)",
			s.LateSamples, s.LatenessSamples, float64(MaxP99LatenessNs)/1e6, float64(s.LatenessP99Ns)/1e6))
	}
	if s.LatenessMaxNs > MaxLatenessNs {
		errs = append(errs, fmt.Errorf("a packet %.1f ms late > %.0f ms (emulator stalled)", float64(s.LatenessMaxNs)/1e6, float64(MaxLatenessNs)/1e6))
	}
	errs = append(errs, s.checkDrops())
	return errors.Join(errs...)
}

// checkDrops says which packets the emulator lost that the link did not
// mean to lose: every check, strict or by effect, refuses them.
func (s Stats) checkDrops() error {
	var errs []error
	if s.DropsSlots > 0 {
		errs = append(errs, fmt.Errorf("%d packets dropped with every emulator slot held", s.DropsSlots))
	}
	if s.WriteErrors > 0 {
		errs = append(errs, fmt.Errorf("%d TUN write errors", s.WriteErrors))
	}
	return errors.Join(errs...)
}

// direction moves packets from in to out.
type direction struct {
	in, out int
	params  atomic.Pointer[Params]
	stop    atomic.Bool
	slots   atomic.Int64 // packets it may hold: SlotsFor its parameters

	cpuNs atomic.Int64 // EngineThread: the loop thread's CPU time so far

	inject Injection // set before the packet loop starts

	mu       sync.Mutex // guards stats and lateness samples
	st       Stats
	lateness []int64 // ring of recent samples, ns
	latePos  int
	lateSum  int64 // ns, over lateN packets since the last reset
	lateN    int64
}

func newDirection(in, out int, p Params, slots int) *direction {
	d := &direction{in: in, out: out, lateness: make([]int64, 0, 1<<16)}
	d.params.Store(&p)
	d.slots.Store(int64(slots))
	return d
}

// slotLimit is how many packets the direction may hold now.
func (d *direction) slotLimit() int { return int(d.slots.Load()) }

func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// tally is what a packet loop counted since it last published.
type tally struct {
	pk, by, dq, dl, ds, we uint64
	late                   []int64
	heldPeak               int
}

// publish adds t to the direction's statistics and empties t.
func (d *direction) publish(t *tally) {
	d.mu.Lock()
	d.st.Packets += t.pk
	d.st.Bytes += t.by
	d.st.DropsQueue += t.dq
	d.st.DropsLoss += t.dl
	d.st.DropsSlots += t.ds
	d.st.WriteErrors += t.we
	d.st.HeldPeak = max(d.st.HeldPeak, t.heldPeak)
	for _, l := range t.late {
		if len(d.lateness) < cap(d.lateness) {
			d.lateness = append(d.lateness, l)
		} else {
			d.lateness[d.latePos] = l
			d.latePos = (d.latePos + 1) % len(d.lateness)
		}
		d.st.LatenessMaxNs = max(d.st.LatenessMaxNs, l)
		d.lateSum += l
	}
	d.lateN += int64(len(t.late))
	d.mu.Unlock()
	t.late = t.late[:0]
	t.pk, t.by, t.dq, t.dl, t.ds, t.we, t.heldPeak = 0, 0, 0, 0, 0, 0, 0
}

// rateQueue decides packets' due times for one direction: Bernoulli loss,
// the byte limit, serialization at the line rate, delay and jitter, and
// FIFO order. Owned by the direction's packet loop.
type rateQueue struct {
	queuedBytes     int   // held and not yet written
	lastDepartureNs int64 // when the last admitted packet finished serializing
	inject          Injection
}

// due is when a held packet is written (atNs) and when the emulated link
// makes it due (linkNs): the same unless an Injection delays it, and
// lateness is counted from linkNs.
type due struct{ atNs, linkNs int64 }

// admit returns the due times of an m-byte packet that arrived at
// arrivalNs, or false with the drop counted in t. tail holds the due times
// of the newest held packet (zero when none): a packet is never due before
// it.
func (q *rateQueue) admit(p *Params, arrivalNs int64, m int, tail due, t *tally) (due, bool) {
	if p.Loss > 0 && rand.Float64() < p.Loss {
		t.dl++
		return due{}, false
	}
	// The limit counts every byte held, on the delay line too (SlotsFor
	// relies on it).
	if q.queuedBytes+m > p.queueBytes() {
		t.dq++
		return due{}, false
	}
	// Serialization: a packet leaves after the packets before it.
	linkNs := max(arrivalNs, q.lastDepartureNs) + int64(m)*8*1e9/p.rateBps()
	q.lastDepartureNs = linkNs
	linkNs += p.DelayNs
	if p.JitterNs > 0 {
		linkNs += rand.Int64N(p.JitterNs + 1)
	}
	// FIFO: after jitter, a parameter change or an injected delay.
	d := due{linkNs: max(linkNs, tail.linkNs)}
	d.atNs = max(d.linkNs+q.inject.extraNs(d.linkNs), tail.atNs)
	q.queuedBytes += m
	return d, true
}

// run is the thread-per-direction packet loop (EngineThread); it returns
// when stop is set (within 50 ms).
func (d *direction) run(wg *sync.WaitGroup) {
	defer wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// Real-time priority for this thread only (within 0-2.6 % of rwin/RTT
	// with it, 2-8 % low without). Best effort: needs root. Safe, because
	// the loop always blocks in ppoll and never spins.
	_ = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 50}, 0)

	pool := newSlotPool()
	// FIFO ring of held packets; due times only increase along it. It has
	// a place for every slot of the pool, and grows only with it (fitRing):
	// every held packet owns a slot. (A slice appended at the tail and cut
	// at the head grew without bound under a steady flow that never
	// emptied it, and each regrowth copied it: writes were up to 12 ms
	// late.)
	q := make([]slot, MinSlots)
	head, held := 0, 0
	tail := func() *slot { return &q[(head+held-1)%len(q)] }
	rq := rateQueue{inject: d.inject}
	fds := []unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}}
	var t tally
	var lastFlushNs int64
	defer d.publish(&t)

	for !d.stop.Load() {
		now := monoNs()
		for held > 0 && q[head].due.atNs <= now {
			p := q[head]
			if _, err := unix.Write(d.out, p.buf[:p.n]); err != nil {
				t.we++
			} else {
				t.pk++
				t.by += uint64(p.n)
			}
			t.late = append(t.late, now-p.due.linkNs)
			rq.queuedBytes -= p.n
			pool.put(p.buf)
			q[head].buf = nil
			head = (head + 1) % len(q)
			held--
			now = monoNs()
		}
		// Publish stats in batches: every 1024 packets, every 50 ms, and
		// whenever the link goes idle (so a reader sees a finished transfer
		// whole).
		if len(t.late) >= 1024 || (len(t.late) > 0 && (held == 0 || now-lastFlushNs > 50e6)) {
			d.publish(&t)
			lastFlushNs = now
			d.cpuNs.Store(threadCPUNs())
		}
		waitNs := int64(50e6)
		if held > 0 {
			waitNs = min(waitNs, q[head].due.atNs-now)
		}
		ts := unix.NsecToTimespec(max(waitNs, 0))
		n, err := unix.Ppoll(fds, &ts, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if n <= 0 || fds[0].Revents&unix.POLLIN == 0 {
			continue
		}
		p := d.params.Load()
		for i := 0; i < batch; i++ {
			if !pool.ready(d.slotLimit()) {
				// Every slot is held: read into a scratch slot and drop.
				var scratch [slotBytes]byte
				if _, err := unix.Read(d.in, scratch[:]); err != nil {
					break
				}
				t.ds++
				continue
			}
			q, head = fitRing(q, head, held, pool.allocated)
			buf := pool.take()
			m, err := unix.Read(d.in, buf)
			if err != nil || m <= 0 {
				pool.put(buf)
				break
			}
			arrival := monoNs()
			var tailDue due
			if held > 0 {
				tailDue = tail().due
			}
			pd, ok := rq.admit(p, arrival, m, tailDue, &t)
			if !ok {
				pool.put(buf)
				continue
			}
			held++
			t.heldPeak = max(t.heldPeak, held)
			*tail() = slot{due: pd, n: m, buf: buf}
			// Reading a batch takes ~2 us a packet: stop as soon as the
			// oldest held packet is due, so reads never make writes late.
			if q[head].due.atNs <= arrival {
				break
			}
		}
	}
}

// reset zeroes the statistics (the packet loop adds to them from now on).
func (d *direction) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.st = Stats{}
	d.lateness = d.lateness[:0]
	d.latePos = 0
	d.lateSum, d.lateN = 0, 0
}

func (d *direction) stats() Stats {
	// Copy under the lock, sort outside it: the packet loop takes this lock
	// to publish, and sorting 65,536 samples takes milliseconds.
	d.mu.Lock()
	s := d.st
	s.Slots = d.slotLimit()
	v := slices.Clone(d.lateness)
	if d.lateN > 0 {
		s.LatenessMeanNs = d.lateSum / d.lateN
	}
	d.mu.Unlock()
	if len(v) > 0 {
		slices.Sort(v)
		s.LatenessSamples = len(v)
		s.LatenessP50Ns = v[len(v)/2]
		s.LatenessP99Ns = v[len(v)*99/100]
		onTime, _ := slices.BinarySearch(v, MaxP99LatenessNs+1)
		s.LateSamples = len(v) - onTime
	}
	return s
}
