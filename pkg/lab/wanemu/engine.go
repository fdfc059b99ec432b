package wanemu

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Packet engines. EngineSched is the default: a few scheduler threads
// ("shards", one by default) each serve many link directions from one
// epoll set and one due-time wait, wake a little before a packet is due and
// spin the rest of the way, and move TCP super-packets through TUNs with
// offloads. EngineThread is the first design, one real-time thread per
// link direction, kept to compare against (docs/lab.md has the figures).
const (
	EngineSched  = "sched"
	EngineThread = "thread"
)

// Config is the packet engine of the links a process creates from now on.
// Its zero value is the default; the RELAYMESH_WANEMU_* variables (see
// ConfigFromEnv) override it in every process that reads them, so a lab's
// engine can be chosen for one run without flags.
type Config struct {
	Engine string // EngineSched (default) or EngineThread
	// NoOffload turns the TUN offloads off (sched engine): one read and
	// one write per packet of at most MTU bytes, as EngineThread does.
	NoOffload bool
	// Shards is the number of scheduler threads (sched engine; default 1).
	// Each shard thread runs at real-time priority, and on a TUN write the
	// receiving stack's work (TCP receive, ACKs, the sender's next burst)
	// runs on the same CPU, so a shard holds a CPU when traffic is heavy;
	// on a 2-CPU machine one shard leaves the other CPU to the endpoints.
	Shards int
	// WakeEarlyNs: a shard sleeps until this long before the next packet
	// is due, then spins (reading arrivals meanwhile) until it is. It
	// hides the machine's wake-up latency at the cost of CPU; default 0
	// (DefaultWakeEarlyNs says why).
	WakeEarlyNs int64
	// JoinEarlyNs: when a packet is written, packets due within this much
	// after it go out with it (sched engine), up to JoinEarlyNs early: one
	// write instead of several, as a NIC's interrupt coalescing and GRO
	// deliver a burst. A lone packet still leaves exactly on time. Default
	// DefaultJoinEarlyNs, negative for none.
	JoinEarlyNs int64
	// Steer (sched engine, more CPUs than shards): pin each shard thread
	// to a CPU of its own, counting down from the last; have every TUN
	// steer what the engine writes into it (RPS) to the other CPUs, so a
	// write only queues the packet and the TCP work it causes runs
	// elsewhere; and keep the lab's processes off the shards' CPUs
	// (AppCPUs): with the kernel's preempt=none a waking shard otherwise
	// waits until a process in a long system call on its CPU leaves it.
	// Off by default. Measured on 2 CPUs (docs/lab.md): the world demo was
	// valid in 3 of 3 runs with it against 1 of 3 without, but every
	// relay then shares one CPU, and the RTTs relayd measures at the
	// application came 1-4 ms over the link RTT (the lab's RTT-matrix
	// test failed), for ~25 % more engine CPU.
	Steer bool
	// NoStandby: one thread per shard. By default (sched engine, two or
	// more CPUs, no steering) each shard has a second thread on another
	// CPU that sleeps to the same due times and does the work when the
	// first is not running: on these VMs a thread's CPU is now and then
	// held for a millisecond or more (by a process in a long system call,
	// which a preempt=none kernel does not interrupt, or by the host), and
	// the other CPU is then usually free. Whichever thread wakes first
	// takes the shard's lock and serves every direction; the other finds
	// nothing due. Measured with a TCP sender loading both CPUs
	// (BenchmarkWakePairUnderLoad): each CPU woke over 0.3 ms late in
	// 2.5-3.7 % of 200 us periods, both at once in 0.1 %.
	NoStandby bool
	// NoKeepAwake: let idle CPUs halt while links run (keepawake.go says
	// why they are kept awake by default). Both engines.
	NoKeepAwake bool
	// Inject is timing error added on purpose to every link (calibrating
	// the self-check; none by default). Both engines.
	Inject Injection
}

// DefaultWakeEarlyNs is 0: no spinning. With the CPUs kept awake a sleeping
// shard wakes 50 us late at the median and ~100 us at p99, well inside the
// self-check's 0.5 ms, and spinning toward due times took a third of the
// engine's CPU and, under steady load, kept its real-time thread busy
// enough for the kernel to throttle it for 50 ms (bench/results/lab-engine.md).
const DefaultWakeEarlyNs = 0

// DefaultJoinEarlyNs: 250 us, half the self-check's lateness bound. A
// write costs 1.2-1.4 us of system call on these VMs before any work, and
// a joined write also spares the receiver per-packet work and ACKs: at
// 250 us the engine carried 4 links at 300 Mbit/s valid with a third of the
// CPU per Gbit of joining at 100 us (bench/results/lab-engine.md).
const DefaultJoinEarlyNs = 250_000

// Environment variables ConfigFromEnv reads.
const (
	EnvEngine    = "RELAYMESH_WANEMU_ENGINE"        // sched | thread
	EnvOffload   = "RELAYMESH_WANEMU_OFFLOAD"       // 1 (default) | 0
	EnvShards    = "RELAYMESH_WANEMU_SHARDS"        // scheduler threads
	EnvWakeEarly = "RELAYMESH_WANEMU_WAKE_EARLY_US" // microseconds
	EnvKeepAwake = "RELAYMESH_WANEMU_KEEP_AWAKE"    // 1 (default) | 0
	EnvJoinEarly = "RELAYMESH_WANEMU_JOIN_EARLY_US" // microseconds
	EnvSteer     = "RELAYMESH_WANEMU_STEER"         // 0 (default) | 1
	EnvStandby   = "RELAYMESH_WANEMU_STANDBY"       // 1 (default) | 0
	// EnvInject (inject.go): timing error injected on purpose.
)

// ConfigFromEnv returns the default Config with the RELAYMESH_WANEMU_*
// variables applied, or an error naming a bad one.
func ConfigFromEnv() (Config, error) {
	var c Config
	switch v := os.Getenv(EnvEngine); v {
	case "", EngineSched, EngineThread:
		c.Engine = v
	default:
		return c, fmt.Errorf("%s=%q: want %s or %s", EnvEngine, v, EngineSched, EngineThread)
	}
	// Switches: the variable, whether it turns the setting on at "1" or
	// off at "0" (the other value is the default), and the field.
	for _, sw := range []struct {
		name    string
		onIsOne bool
		field   *bool
	}{{EnvOffload, false, &c.NoOffload}, {EnvSteer, true, &c.Steer}, {EnvKeepAwake, false, &c.NoKeepAwake}, {EnvStandby, false, &c.NoStandby}} {
		switch v := os.Getenv(sw.name); v {
		case "":
		case "0", "1":
			*sw.field = (v == "1") == sw.onIsOne
		default:
			return c, fmt.Errorf("%s=%q: want 0 or 1", sw.name, v)
		}
	}
	if v := os.Getenv(EnvShards); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return c, fmt.Errorf("%s=%q: want 1-64", EnvShards, v)
		}
		c.Shards = n
	}
	for _, e := range []struct {
		name string
		ns   *int64
	}{{EnvWakeEarly, &c.WakeEarlyNs}, {EnvJoinEarly, &c.JoinEarlyNs}} {
		v := os.Getenv(e.name)
		if v == "" {
			continue
		}
		us, err := strconv.ParseInt(v, 10, 64)
		if err != nil || us > 10_000 {
			return c, fmt.Errorf("%s=%q: want microseconds, at most 10000 (0: none)", e.name, v)
		}
		*e.ns = us * 1000
		if us <= 0 {
			*e.ns = -1
		}
	}
	in, err := ParseInjection(os.Getenv(EnvInject))
	if err != nil {
		return c, err
	}
	c.Inject = in
	return c, nil
}

func (c Config) withDefaults() Config {
	if c.Engine == "" {
		c.Engine = EngineSched
	}
	if c.Shards <= 0 {
		c.Shards = 1
	}
	if c.WakeEarlyNs < 0 {
		c.WakeEarlyNs = 0
	}
	if c.JoinEarlyNs == 0 {
		c.JoinEarlyNs = DefaultJoinEarlyNs
	}
	c.JoinEarlyNs = max(c.JoinEarlyNs, 0)
	return c
}

// steers says whether shards are pinned and TUNs steer to other CPUs.
func (c Config) steers() bool {
	c = c.withDefaults()
	return c.Engine == EngineSched && c.Steer && runtime.NumCPU() > c.Shards
}

// workers is how many threads serve each shard (standby: 2).
func (c Config) workers() int {
	c = c.withDefaults()
	if c.Engine != EngineSched || c.NoStandby || c.steers() || runtime.NumCPU() < 2 {
		return 1
	}
	return 2
}

// shardCPU is the CPU shard id is pinned to when steering.
func shardCPU(id int) int { return runtime.NumCPU() - 1 - id }

// steerMask is the rps_cpus mask (hex) of the CPUs no shard is pinned to,
// or "" when not steering.
func (c Config) steerMask() string {
	if !c.steers() {
		return ""
	}
	c = c.withDefaults()
	var mask uint64
	for cpu := range min(runtime.NumCPU()-c.Shards, 64) {
		mask |= 1 << cpu
	}
	return strconv.FormatUint(mask, 16)
}

// AppCPUs is the CPU list (taskset's form, e.g. "0" or "0-2") the lab's own
// processes should keep to so that the pinned shards have their CPUs to
// themselves, or "" when the shards are not pinned.
func AppCPUs() string {
	c := CurrentConfig()
	if !c.steers() {
		return ""
	}
	if n := runtime.NumCPU() - c.Shards; n > 1 {
		return fmt.Sprintf("0-%d", n-1)
	}
	return "0"
}

// String is the configuration as a benchmark table shows it.
func (c Config) String() string {
	c = c.withDefaults()
	awake := "keep-awake"
	if c.NoKeepAwake {
		awake = "cpus-may-idle"
	}
	if c.Engine == EngineThread {
		return EngineThread + "/" + awake + c.injectSuffix()
	}
	off := "offload"
	if c.NoOffload {
		off = "no-offload"
	}
	steer := "steer"
	if !c.steers() {
		steer = "no-steer"
	}
	return fmt.Sprintf("%s/%d shard/%d thread/%s/%s/wake-early %d us/join-early %d us/%s", c.Engine, c.Shards, c.workers(), off, steer, c.WakeEarlyNs/1000, c.JoinEarlyNs/1000, awake) + c.injectSuffix()
}

// injectSuffix names an injection in String, so no table hides one.
func (c Config) injectSuffix() string {
	if c.Inject.Zero() {
		return ""
	}
	return "/inject " + c.Inject.String()
}

var (
	engineMu  sync.Mutex
	engineCfg = envConfigOrDefault()
	shards    []*shard
	nextShard int
)

func envConfigOrDefault() Config {
	c, err := ConfigFromEnv()
	if err != nil {
		// Reported again, as an error, by Configure callers that check;
		// links made without checking get the default engine.
		return Config{}
	}
	return c
}

// Configure sets the engine of links created from now on. The sched
// engine's shard settings apply to shards not yet started: call it before
// the first link.
func Configure(c Config) {
	engineMu.Lock()
	defer engineMu.Unlock()
	engineCfg = c
}

// CurrentConfig is the engine configuration links are created with now.
func CurrentConfig() Config {
	engineMu.Lock()
	defer engineMu.Unlock()
	return engineCfg.withDefaults()
}

// pickShard returns the shard for a new link, starting shards on first use.
func pickShard(c Config) *shard {
	engineMu.Lock()
	defer engineMu.Unlock()
	for len(shards) < c.Shards {
		cpu := -1
		if c.steers() {
			cpu = shardCPU(len(shards))
		}
		s, err := newShard(len(shards), cpu, c.workers(), c.WakeEarlyNs, c.JoinEarlyNs)
		if err != nil {
			panic(fmt.Sprintf("wanemu: starting a scheduler: %v", err)) // epoll/eventfd: out of fds
		}
		shards = append(shards, s)
	}
	s := shards[nextShard%c.Shards]
	nextShard++
	return s
}

// ShardStats are one scheduler thread's own counters, to see where its time
// and its lateness come from (docs/lab.md).
type ShardStats struct {
	Shard int `json:"shard"`
	// CPUNs is the thread's CPU time, kernel work done on its behalf
	// included (a TUN write runs the receiving stack): the engine's cost.
	CPUNs int64 `json:"cpu_ns"`
	// SpinNs is the part of it spent spinning before due times.
	SpinNs int64 `json:"spin_ns"`
	// Sleeps is how many times the thread slept with a packet due; WakeLate*
	// is how long after that due time it ran again, over the most recent
	// 65,536 sleeps that lasted to the due time. Woken by the timer or by
	// an arrival: an arrival's wake-up is late too when the thread cannot
	// run (its CPU is in a long kernel path of another task, which a
	// preempt=none kernel does not interrupt).
	Sleeps      uint64 `json:"sleeps"`
	WakeLateP50 int64  `json:"wake_late_p50_ns"`
	WakeLateP99 int64  `json:"wake_late_p99_ns"`
	WakeLateMax int64  `json:"wake_late_max_ns"`
	Reads       uint64 `json:"reads"`        // read syscalls that returned a packet
	SuperReads  uint64 `json:"super_reads"`  // of them, TCP super-packets
	SegmentsIn  uint64 `json:"segments_in"`  // packets after cutting super-packets
	Writes      uint64 `json:"writes"`       // write syscalls
	SuperWrites uint64 `json:"super_writes"` // of them, joined segments
	SegmentsOut uint64 `json:"segments_out"` // packets written, joined ones counted each
	GSOErrors   uint64 `json:"gso_errors"`   // super-packets of a kind not handled (dropped)
	// The longest stretch the loop ran between two waits, and the longest
	// single read and write system call (a TUN write runs the receiving
	// stack): where lateness comes from when wake-ups were on time.
	MaxBusyNs  int64 `json:"max_busy_ns"`
	MaxReadNs  int64 `json:"max_read_ns"`
	MaxWriteNs int64 `json:"max_write_ns"`
	// Takeovers: how often the standby thread served the shard because
	// the primary had not run by a due time plus a grace.
	Takeovers    uint64 `json:"takeovers"`
	Directions   int    `json:"directions"`    // link directions served
	WakeEarlyNs  int64  `json:"wake_early_ns"` // the setting
	ThreadPolicy string `json:"thread_policy"` // "fifo/50" or why not
}

// EngineStats returns the counters of every scheduler thread running.
func EngineStats() []ShardStats {
	engineMu.Lock()
	ss := slices.Clone(shards)
	engineMu.Unlock()
	var out []ShardStats
	for _, s := range ss {
		out = append(out, s.stats())
	}
	return out
}

// ResetEngineStats zeroes the scheduler threads' counters.
func ResetEngineStats() {
	engineMu.Lock()
	ss := slices.Clone(shards)
	engineMu.Unlock()
	for _, s := range ss {
		s.resetStats()
	}
}

// shard is one scheduler thread and the link directions it serves.
type shard struct {
	id          int
	cpu         int // pinned to, or -1
	epfd, evfd  int
	wakeEarlyNs int64
	joinEarlyNs int64
	ops         chan func() // run on the loop thread, between packets
	policy      atomic.Value

	// busy is the shard's lock: a worker thread holds it while it reads,
	// writes or changes directions; everything below marked "owned by
	// the loop" is touched only under it.
	busy atomic.Bool
	// dueAt is the next due time as the last lock holder left it
	// (MaxInt64: nothing held), for the standby.
	dueAt atomic.Int64
	// takeovers counts the times the standby served the shard.
	takeovers atomic.Uint64

	// Owned by the loop thread.
	dirs []*schedDir
	byID map[int32]*schedDir
	seq  int32

	workerCPUNs                                                   []atomic.Int64
	spinNs                                                        atomic.Int64
	sleeps, reads, superReads, segIn, writes, superWrites, segOut atomic.Uint64
	gsoErrors                                                     atomic.Uint64
	maxBusyNs, maxReadNs, maxWriteNs                              atomic.Int64
	nDirs                                                         atomic.Int64

	mu       sync.Mutex // guards wakeLate
	wakeLate []int64
	wakePos  int
	wakeMax  int64
	cpuBase  atomic.Int64 // CPUNs at the last reset
}

func newShard(id, cpu, workers int, wakeEarlyNs, joinEarlyNs int64) (*shard, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		return nil, fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	s := &shard{id: id, cpu: cpu, epfd: epfd, evfd: evfd, wakeEarlyNs: wakeEarlyNs, joinEarlyNs: joinEarlyNs, ops: make(chan func(), 64),
		byID: map[int32]*schedDir{}, wakeLate: make([]int64, 0, 1<<16)}
	s.policy.Store("starting")
	s.workerCPUNs = make([]atomic.Int64, workers)
	s.dueAt.Store(math.MaxInt64)
	reserveProcs(workers)
	for w := range workers {
		go s.run(w, workers)
	}
	return s, nil
}

// do runs f on the loop thread and returns when it has run.
func (s *shard) do(f func()) {
	done := make(chan struct{})
	s.ops <- func() { f(); close(done) }
	one := [8]byte{1}
	_, _ = unix.Write(s.evfd, one[:])
	<-done
}

// schedDir is one link direction served by a shard.
type schedDir struct {
	d       *direction
	id      int32
	in, out int
	offload bool
	// FIFO ring of held packets; due times only increase along it. It
	// has a place for every slot of the pool (fitRing).
	ring       []slot
	head, held int
	pool       *slotPool
	rq         rateQueue
	t          tally
	lastPubNs  int64
}

func (sd *schedDir) pkt(i int) []byte {
	sl := &sd.ring[(sd.head+i)%len(sd.ring)]
	return sl.buf[vnetHdrLen : vnetHdrLen+sl.n]
}

// attach adds a direction to the shard (on the loop thread).
func (s *shard) attach(d *direction, offload bool) *schedDir {
	sd := &schedDir{d: d, in: d.in, out: d.out, offload: offload, ring: make([]slot, MinSlots), pool: newSlotPool(), rq: rateQueue{inject: d.inject}}
	s.do(func() {
		s.seq++
		sd.id = s.seq
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: sd.id}
		if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, sd.in, &ev); err != nil {
			panic(fmt.Sprintf("wanemu: epoll_ctl add: %v", err)) // a fresh TUN fd: cannot fail
		}
		s.dirs = append(s.dirs, sd)
		s.byID[sd.id] = sd
		s.nDirs.Add(1)
	})
	return sd
}

// detach removes a direction; its held packets are dropped unwritten and
// its counts published.
func (s *shard) detach(sd *schedDir) {
	s.do(func() {
		_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, sd.in, nil)
		s.dirs = slices.DeleteFunc(s.dirs, func(x *schedDir) bool { return x == sd })
		delete(s.byID, sd.id)
		sd.d.publish(&sd.t)
		s.nDirs.Add(-1)
	})
}

func epollPwait2(epfd int, events []unix.EpollEvent, timeoutNs int64) (int, error) {
	var tsp unsafe.Pointer
	var ts unix.Timespec
	if timeoutNs >= 0 {
		ts = unix.NsecToTimespec(timeoutNs)
		tsp = unsafe.Pointer(&ts)
	}
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(tsp), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// monoBase anchors nowNs. nowNs reads Go's monotonic clock, which the vDSO
// serves without a system call; x/sys's ClockGettime is a real system call,
// and on the VMs this was built on a system call costs 1.2-1.4 us (30 ns
// through the vDSO): the first engine read the clock 3-4 times a packet.
var monoBase = time.Now()

// nowNs is the monotonic time in ns since monoBase.
func nowNs() int64 { return int64(time.Since(monoBase)) }

// rawRead and rawWrite are read(2) and write(2) without telling the Go
// scheduler: the shard thread keeps its P across them (see shard.run).
func rawRead(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func threadCPUNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// idleWaitNs bounds a sleep with nothing held: the loop publishes counters.
const idleWaitNs = 50_000_000

// readBatch bounds the packets read from one TUN per turn, so one busy
// link does not keep the others' arrivals waiting.
const readBatch = 64

// readTurnNs bounds the time one TUN's reads take per turn (cutting a
// super-packet into segments costs ~10 us).
const readTurnNs = 200_000

func (s *shard) run(w, workers int) {
	runtime.LockOSThread() // for the life of the process: shards never stop
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// Real-time priority: a waking shard preempts the endpoints and relays
	// at once. It never spins unless WakeEarlyNs asks for it: an RT thread
	// that runs 95 % of a second is throttled by the kernel for 50 ms.
	//
	// Its system calls are raw (rawRead, rawWrite, epollPwait2): a Go
	// system call lets the runtime hand the thread's P to other goroutines
	// when the call lasts over 20 us, and the thread must then find a P
	// again before it runs on; a TUN write, which runs the receiving
	// stack, often lasts that long. A raw call keeps the P. The runtime
	// still preempts the loop now and then (it looks busy); a signal ends
	// a wait early (EINTR) and the loop just goes round.
	policy := "fifo/50"
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 50}, 0); err != nil {
		policy = "normal (SCHED_FIFO refused: " + err.Error() + ")"
	}
	// Not pinned with a standby: a pinned thread whose CPU is held waits
	// for it, where a free one is woken on the other CPU (pinned, the
	// RTTs relays measured in the lab came ~1 ms over the links).
	cpu := s.cpu
	if cpu >= 0 {
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			policy += ", not pinned: " + err.Error()
		} else {
			policy += fmt.Sprintf(", cpu %d", cpu)
		}
	}
	if workers > 1 {
		policy = fmt.Sprintf("%d threads: %s", workers, policy)
	}
	if w == 0 {
		s.policy.Store(policy)
	}
	events := make([]unix.EpollEvent, 128)
	rbuf := make([]byte, vnetHdrLen+maxSuperBytes+1)
	wbuf := make([]byte, vnetHdrLen+maxSuperBytes+1)
	if w > 0 {
		s.standby(w, events, rbuf, wbuf)
		return
	}
	var wakeLate []int64
	lastCPUPub := nowNs()
	for {
		if !s.busy.CompareAndSwap(false, true) {
			// The standby is serving the shard; look again soon.
			sleepNs(lockRetryNs)
			continue
		}
		start := nowNs()
		next, now := s.serve(start, events, rbuf, wbuf)
		if now-lastCPUPub > 50e6 || len(wakeLate) >= 1024 {
			s.workerCPUNs[w].Store(threadCPUNs())
			s.recordWakes(wakeLate)
			wakeLate = wakeLate[:0]
			lastCPUPub = now
		}
		timeoutNs := int64(idleWaitNs)
		target := int64(math.MaxInt64)
		if next != math.MaxInt64 {
			target = next - s.wakeEarlyNs
			timeoutNs = max(target-now, 0)
		}
		s.noteMax(&s.maxBusyNs, now-start)
		s.busy.Store(false)
		_, err := epollPwait2(s.epfd, events, timeoutNs)
		woke := nowNs()
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(fmt.Sprintf("wanemu: epoll_pwait2: %v", err)) // EBADF/EINVAL: a bug here
		}
		if next != math.MaxInt64 && timeoutNs > 0 && woke >= target {
			wakeLate = append(wakeLate, woke-target)
		}
		if s.wakeEarlyNs > 0 && woke >= target && woke < next {
			// Spin the rest of the way (WakeEarlyNs), reading only the
			// clock; arrivals are read once the lock is taken.
			now := woke
			for now < next {
				now = nowNs()
			}
			s.spinNs.Add(now - woke)
		}
	}
}

// serve does the shard's work under its lock: writes what is due, reads
// what arrived, until nothing is due and nothing waits to be read. It
// returns the next due time (MaxInt64: none), also published for the
// standby, and the time it finished.
func (s *shard) serve(now int64, events []unix.EpollEvent, rbuf, wbuf []byte) (next, end int64) {
	for {
		// Write what is due one write per direction per pass, passes
		// until nothing is due: a direction with a backlog (after a
		// stall, or a burst at a high rate) does not hold up the others'
		// packets.
		for wrote := true; wrote; {
			wrote = false
			for _, sd := range s.dirs {
				if sd.held > 0 && sd.ring[sd.head].due.atNs <= now {
					sd.writeOne(s, now, wbuf)
					now = nowNs()
					wrote = true
				}
			}
		}
		next = s.nextDue(now)
		// Arrivals, without waiting (epoll is level-triggered): the
		// thread holding the lock reads every ready TUN.
		n, err := epollPwait2(s.epfd, events, 0)
		if err != nil && !errors.Is(err, unix.EINTR) {
			panic(fmt.Sprintf("wanemu: epoll_pwait2: %v", err)) // EBADF/EINVAL: a bug here
		}
		for _, ev := range events[:max(n, 0)] {
			if ev.Fd == -1 {
				s.runOps()
				continue
			}
			if sd := s.byID[ev.Fd]; sd != nil {
				sd.readReady(s, rbuf, next)
				if sd.held > 0 {
					next = min(next, sd.ring[sd.head].due.atNs)
				}
			}
		}
		now = nowNs()
		if n <= 0 && next > now {
			s.dueAt.Store(next)
			return next, now
		}
	}
}

// standbyGraceNs: the standby thread acts on a due time only when it has
// been due this long and the primary has not written it. The primary
// wakes ~40 us late at the median and ~100 us at p99 on these VMs: a
// shorter grace would have the standby race it for work it is about to
// do, a longer one lets the packets of a stalled primary run late.
const standbyGraceNs = 150_000

// standby is the second thread of a shard: it sleeps (timer only, no
// epoll: arrivals wake the primary) to the published due time plus a
// grace, and serves the shard itself when the primary has not.
func (s *shard) standby(w int, events []unix.EpollEvent, rbuf, wbuf []byte) {
	lastCPUPub := nowNs()
	for {
		now := nowNs()
		if now-lastCPUPub > 50e6 {
			s.workerCPUNs[w].Store(threadCPUNs())
			lastCPUPub = now
		}
		due := s.dueAt.Load()
		if due == math.MaxInt64 || now < due+standbyGraceNs {
			sleepNs(min(max(due+standbyGraceNs-now, 0), idleWaitNs))
			continue
		}
		if !s.busy.CompareAndSwap(false, true) {
			// The primary is serving; look again soon. (Looking again
			// only a grace later cut the worst single packet in the
			// lab-engine bench, 1-7 ms against 9-19, but the demo's
			// self-check then held in 3 runs of 5 against 5 of 5:
			// bench/results/lab-engine-standby.md, demo-runs-grace.md.)
			sleepNs(lockRetryNs)
			continue
		}
		if s.dueAt.Load() != due {
			s.busy.Store(false) // served meanwhile
			continue
		}
		s.takeovers.Add(1)
		_, end := s.serve(now, events, rbuf, wbuf)
		s.noteMax(&s.maxBusyNs, end-now)
		s.busy.Store(false)
	}
}

// sleepNs sleeps without the runtime's help (the thread keeps its P, as
// the loop's other raw system calls do).
func sleepNs(ns int64) {
	ts := unix.NsecToTimespec(ns)
	_, _, _ = unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// lockRetryNs: how long a shard thread that found the other serving waits
// before it looks again.
const lockRetryNs = 20_000

// nextDue is the earliest due time of any held packet (MaxInt64: none),
// publishing each direction's counts on the way: every 1024 packets, every
// 50 ms, and when the direction goes idle (a reader sees a finished
// transfer whole).
func (s *shard) nextDue(now int64) int64 {
	next := int64(math.MaxInt64)
	for _, sd := range s.dirs {
		if sd.held > 0 {
			next = min(next, sd.ring[sd.head].due.atNs)
		}
		if n := len(sd.t.late); n >= 1024 || (n > 0 && (sd.held == 0 || now-sd.lastPubNs > 50e6)) {
			sd.d.publish(&sd.t)
			sd.lastPubNs = now
		}
	}
	return next
}

// noteMax raises a maximum kept for ShardStats (loop thread only writes).
func (s *shard) noteMax(m *atomic.Int64, v int64) {
	if v > m.Load() {
		m.Store(v)
	}
}

func (s *shard) runOps() {
	var b [8]byte
	_, _ = unix.Read(s.evfd, b[:])
	for {
		select {
		case f := <-s.ops:
			f()
		default:
			return
		}
	}
}

func (s *shard) recordWakes(v []int64) {
	if len(v) == 0 {
		return
	}
	s.sleeps.Add(uint64(len(v)))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range v {
		if len(s.wakeLate) < cap(s.wakeLate) {
			s.wakeLate = append(s.wakeLate, l)
		} else {
			s.wakeLate[s.wakePos] = l
			s.wakePos = (s.wakePos + 1) % len(s.wakeLate)
		}
		s.wakeMax = max(s.wakeMax, l)
	}
}

func (s *shard) stats() ShardStats {
	st := ShardStats{
		Shard: s.id, CPUNs: s.cpuTotalNs() - s.cpuBase.Load(), SpinNs: s.spinNs.Load(), Sleeps: s.sleeps.Load(),
		Reads: s.reads.Load(), SuperReads: s.superReads.Load(), SegmentsIn: s.segIn.Load(),
		Writes: s.writes.Load(), SuperWrites: s.superWrites.Load(), SegmentsOut: s.segOut.Load(),
		GSOErrors: s.gsoErrors.Load(), MaxBusyNs: s.maxBusyNs.Load(), MaxReadNs: s.maxReadNs.Load(), MaxWriteNs: s.maxWriteNs.Load(), Takeovers: s.takeovers.Load(), Directions: int(s.nDirs.Load()), WakeEarlyNs: s.wakeEarlyNs,
		ThreadPolicy: s.policy.Load().(string),
	}
	s.mu.Lock()
	v := slices.Clone(s.wakeLate)
	st.WakeLateMax = s.wakeMax
	s.mu.Unlock()
	if len(v) > 0 {
		slices.Sort(v)
		st.WakeLateP50 = v[len(v)/2]
		st.WakeLateP99 = v[len(v)*99/100]
	}
	return st
}

// cpuTotalNs is the CPU time of the shard's threads together.
func (s *shard) cpuTotalNs() int64 {
	var t int64
	for i := range s.workerCPUNs {
		t += s.workerCPUNs[i].Load()
	}
	return t
}

func (s *shard) resetStats() {
	s.cpuBase.Store(s.cpuTotalNs())
	s.spinNs.Store(0)
	s.maxBusyNs.Store(0)
	s.maxReadNs.Store(0)
	s.maxWriteNs.Store(0)
	for _, c := range []*atomic.Uint64{&s.takeovers, &s.sleeps, &s.reads, &s.superReads, &s.segIn, &s.writes, &s.superWrites, &s.segOut, &s.gsoErrors} {
		c.Store(0)
	}
	s.mu.Lock()
	s.wakeLate = s.wakeLate[:0]
	s.wakePos, s.wakeMax = 0, 0
	s.mu.Unlock()
}

// readReady reads what the direction's TUN holds, up to readBatch packets,
// stopping early once a held packet (of any direction: nextDueNs) is due so
// that reading never makes writes late.
func (sd *schedDir) readReady(s *shard, rbuf []byte, nextDueNs int64) {
	p := sd.d.params.Load()
	start := nowNs()
	for range readBatch {
		t0 := nowNs()
		m, err := rawRead(sd.in, rbuf)
		if err != nil || m <= 0 {
			return
		}
		arrival := nowNs()
		s.noteMax(&s.maxReadNs, arrival-t0)
		s.reads.Add(1)
		var h vnetHdr
		pkt := rbuf[:m]
		if sd.offload {
			if m < vnetHdrLen {
				continue
			}
			h.decode(rbuf)
			pkt = rbuf[vnetHdrLen:m]
		}
		if h.gsoType == vnetGSONone {
			if len(pkt) > slotBytes-vnetHdrLen {
				s.gsoErrors.Add(1)
				continue
			}
			if buf := sd.admit(p, arrival, len(pkt)); buf != nil {
				h.gsoType, h.gsoSize, h.hdrLen = vnetGSONone, 0, 0
				h.encode(buf)
				copy(buf[vnetHdrLen:], pkt)
			}
			s.segIn.Add(1)
		} else {
			segs, err := gsoSegments(pkt, h)
			if err != nil {
				s.gsoErrors.Add(1)
				continue
			}
			s.superReads.Add(1)
			s.segIn.Add(uint64(segs))
			iph, tcph, _ := tcp4Layout(pkt)
			seg := vnetHdr{flags: vnetFlagNeedsCsum, csumStart: uint16(iph), csumOffset: 16}
			for i := range segs {
				n := min(int(h.gsoSize), len(pkt)-iph-tcph-i*int(h.gsoSize)) + iph + tcph
				if buf := sd.admit(p, arrival, n); buf != nil {
					seg.encode(buf)
					gsoSegment(buf[vnetHdrLen:], pkt, int(h.gsoSize), i)
				}
			}
		}
		// Stop once a held packet is due, or after readTurnNs on this TUN:
		// the other TUNs' arrivals are waiting to be timestamped.
		if arrival >= nextDueNs || arrival-start > readTurnNs {
			return
		}
	}
}

// admit queues an n-byte packet and returns the slot buffer to fill, or nil
// when the packet is dropped (loss, queue limit, or every slot held).
func (sd *schedDir) admit(p *Params, arrivalNs int64, n int) []byte {
	if !sd.pool.ready(sd.d.slotLimit()) {
		sd.t.ds++
		return nil
	}
	sd.ring, sd.head = fitRing(sd.ring, sd.head, sd.held, sd.pool.allocated)
	var tailDue due
	if sd.held > 0 {
		tailDue = sd.ring[(sd.head+sd.held-1)%len(sd.ring)].due
	}
	d, ok := sd.rq.admit(p, arrivalNs, n, tailDue, &sd.t)
	if !ok {
		return nil
	}
	buf := sd.pool.take()
	sd.ring[(sd.head+sd.held)%len(sd.ring)] = slot{due: d, n: n, buf: buf}
	sd.held++
	sd.t.heldPeak = max(sd.t.heldPeak, sd.held)
	return buf
}

// writeOne makes one write of what is due by now: the head packet or, with
// offloads, the run of one TCP flow's segments that starts with it, joined
// into a super-packet.
func (sd *schedDir) writeOne(s *shard, now int64, wbuf []byte) {
	var run [maxSuperSegs][]byte
	if sd.held > 0 && sd.ring[sd.head].due.atNs <= now {
		segs := run[:1]
		segs[0] = sd.pkt(0)
		bytes := len(segs[0])
		if sd.offload {
			for len(segs) < sd.held && sd.ring[(sd.head+len(segs))%len(sd.ring)].due.atNs <= now+s.joinEarlyNs &&
				canJoin(segs[0], segs[len(segs)-1], sd.pkt(len(segs)), bytes, len(segs)) {
				next := sd.pkt(len(segs))
				segs = append(segs, next)
				_, tcph, _ := tcp4Layout(next)
				bytes += len(next) - 20 - tcph // canJoin: IPv4 header without options
			}
		}
		var err error
		t0 := nowNs()
		if len(segs) == 1 {
			sl := &sd.ring[sd.head]
			if sd.offload {
				_, err = rawWrite(sd.out, sl.buf[:vnetHdrLen+sl.n])
			} else {
				_, err = rawWrite(sd.out, sl.buf[vnetHdrLen:vnetHdrLen+sl.n])
			}
		} else {
			n := joinSegments(wbuf, segs)
			_, err = rawWrite(sd.out, wbuf[:n])
			s.superWrites.Add(1)
		}
		s.noteMax(&s.maxWriteNs, nowNs()-t0)
		s.writes.Add(1)
		s.segOut.Add(uint64(len(segs)))
		for range segs {
			sl := &sd.ring[sd.head]
			if err != nil {
				sd.t.we++
			} else {
				sd.t.pk++
				sd.t.by += uint64(sl.n)
			}
			// A joined packet may leave up to joinEarlyNs early (by design, bounded).
			sd.t.late = append(sd.t.late, max(now-sl.due.linkNs, 0))
			sd.rq.queuedBytes -= sl.n
			sd.pool.put(sl.buf)
			sl.buf = nil
			sd.head = (sd.head + 1) % len(sd.ring)
			sd.held--
		}
	}
}
