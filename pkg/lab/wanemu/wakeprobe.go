package wanemu

import (
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// WakeStats describe how late a sleeping real-time thread runs again after
// its deadline on this machine: the floor under any packet engine that
// sleeps between packets.
type WakeStats struct {
	KeepAwake bool  `json:"keep_awake"` // the CPUs were kept from idling
	Samples   int   `json:"samples"`
	P50Ns     int64 `json:"p50_ns"`
	P99Ns     int64 `json:"p99_ns"`
	P999Ns    int64 `json:"p999_ns"`
	MaxNs     int64 `json:"max_ns"`
}

// MeasureWake sleeps for intervalNs at a time, for d, on a locked thread at
// the engine's real-time priority (when allowed), and returns how late each
// wake-up was. With keepCPUsAwake the engine's idle spinners run meanwhile.
func MeasureWake(d time.Duration, intervalNs int64, keepCPUsAwake bool) WakeStats {
	if keepCPUsAwake {
		release := keepAwake()
		defer release()
		time.Sleep(50 * time.Millisecond) // let the spinners start
	}
	res := make(chan []int64)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread's priority stays with it
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		_ = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 50}, 0)
		var late []int64
		end := nowNs() + d.Nanoseconds()
		for nowNs() < end {
			target := nowNs() + intervalNs
			ts := unix.NsecToTimespec(intervalNs)
			_ = unix.Nanosleep(&ts, nil)
			late = append(late, nowNs()-target)
		}
		res <- late
	}()
	late := <-res
	slices.Sort(late)
	st := WakeStats{KeepAwake: keepCPUsAwake, Samples: len(late)}
	if n := len(late); n > 0 {
		st.P50Ns, st.P99Ns, st.P999Ns, st.MaxNs = late[n/2], late[n*99/100], late[n*999/1000], late[n-1]
	}
	return st
}

// GapStats describe how often a thread that never sleeps is not running:
// gaps between consecutive reads of the clock in a busy loop, over 20 us
// (interrupts, other threads, the host taking the virtual CPU away).
type GapStats struct {
	Gaps        int     `json:"gaps"`          // over 20 us
	LostPercent float64 `json:"lost_percent"`  // time in those gaps
	Over300us   int     `json:"over_300us"`    // gaps longer than 0.3 ms
	Over300usNs int64   `json:"over_300us_ns"` // time in them
	MaxNs       int64   `json:"max_ns"`
}

// MeasureGaps spins for d on a locked thread at normal priority (a real-time
// spinner would be throttled by the kernel after 0.95 s) and returns the
// gaps it saw.
func MeasureGaps(d time.Duration) GapStats {
	res := make(chan GapStats)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var st GapStats
		var lost int64
		start := nowNs()
		last := start
		for last-start < d.Nanoseconds() {
			now := nowNs()
			if g := now - last; g > 20_000 {
				st.Gaps++
				lost += g
				st.MaxNs = max(st.MaxNs, g)
				if g > 300_000 {
					st.Over300us++
					st.Over300usNs += g
				}
			}
			last = now
		}
		st.LostPercent = 100 * float64(lost) / float64(last-start)
		res <- st
	}()
	return <-res
}

// PairStats count, over the same periods, how often each of two real-time
// threads pinned to different CPUs woke more than LateNs after a shared
// deadline, and how often both did: when both are late together, a second
// scheduler thread on the other CPU would not have been on time either.
type PairStats struct {
	Periods int   `json:"periods"`
	LateNs  int64 `json:"late_ns"`
	LateA   int   `json:"late_a"`
	LateB   int   `json:"late_b"`
	Both    int   `json:"both"`
}

// MeasureWakePair runs two locked real-time threads, on CPUs 0 and 1, that
// sleep to the same absolute deadlines every periodNs for d.
func MeasureWakePair(d time.Duration, periodNs, lateNs int64) PairStats {
	start := nowNs() + 1e6
	end := start + d.Nanoseconds()
	res := make(chan []int64, 2)
	for cpu := range 2 {
		go func() {
			runtime.LockOSThread() // not unlocked: the thread's priority stays with it
			var set unix.CPUSet
			set.Set(cpu)
			_ = unix.SchedSetaffinity(0, &set)
			_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
			_ = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 50}, 0)
			var late []int64
			for k := int64(1); start+k*periodNs < end; k++ {
				target := start + k*periodNs
				if wait := target - nowNs(); wait > 0 {
					ts := unix.NsecToTimespec(wait)
					_ = unix.Nanosleep(&ts, nil)
				}
				late = append(late, nowNs()-target)
			}
			res <- late
		}()
	}
	a, b := <-res, <-res
	st := PairStats{Periods: min(len(a), len(b)), LateNs: lateNs}
	for i := range st.Periods {
		x, y := a[i] > lateNs, b[i] > lateNs
		if x {
			st.LateA++
		}
		if y {
			st.LateB++
		}
		if x && y {
			st.Both++
		}
	}
	return st
}
