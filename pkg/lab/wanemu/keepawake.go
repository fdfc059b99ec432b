package wanemu

import (
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Keeping the CPUs awake. On the VMs this runs on, a thread that sleeps on
// an idle CPU wakes late now and then by milliseconds (measured: p99.9
// 1.8-2.9 ms, max 10-15 ms over 10 s of 500 us sleeps), while a CPU that
// never goes idle misses almost nothing (a spinning thread saw 4 ms of
// gaps over 300 us in 10 s, the longest 1.1 ms): an idle virtual CPU halts
// and only the host can wake it, at the host's leisure. So while links
// run, one SCHED_IDLE thread per CPU spins: it runs only when nothing else
// wants the CPU, so it takes no time from the endpoints, relays or the
// engine, but the CPU never halts and a timer expiry is handled at once.
// The price is CPUs that look 100 % busy to the host while a lab is up.
// docs/lab.md has the measurements; Config.NoKeepAwake turns it off.

const schedIdle = 5 // SCHED_IDLE (linux/sched.h)

var (
	awakeMu    sync.Mutex
	awakeUsers int
	awakeStop  *atomic.Bool
)

// keepAwake starts the spinners on first use; release stops them after the
// last user.
func keepAwake() (release func()) {
	awakeMu.Lock()
	defer awakeMu.Unlock()
	awakeUsers++
	if awakeUsers == 1 {
		stop := &atomic.Bool{}
		awakeStop = stop
		n := runtime.NumCPU()
		// Each spinner holds a P while it spins: give them their own, so
		// the engine and the rest of the process keep theirs.
		reserveProcs(n)
		for cpu := range n {
			go spinIdle(cpu, stop)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			awakeMu.Lock()
			defer awakeMu.Unlock()
			awakeUsers--
			if awakeUsers == 0 {
				awakeStop.Store(true)
				reserveProcs(-runtime.NumCPU())
			}
		})
	}
}

func spinIdle(cpu int, stop *atomic.Bool) {
	// The thread stays locked when this returns, so the runtime discards
	// it rather than reuse a thread that is pinned and SCHED_IDLE.
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if unix.SchedSetaffinity(0, &set) != nil {
		return
	}
	if unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: schedIdle}, 0) != nil {
		return // never spin at a priority that competes with real work
	}
	for !stop.Load() {
	}
}
