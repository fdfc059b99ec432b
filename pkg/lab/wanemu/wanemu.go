package wanemu

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Endpoint is one end of a link: a TUN device in a namespace. Addr is the
// node's own address, kept on its loopback so it stays the same whatever
// link a packet uses; the link adds a host route to the peer's address
// through the TUN (with Addr as source), so two nodes reach each other only
// over the link between them.
type Endpoint struct {
	Netns  string
	Ifname string
	Addr   string // e.g. 10.77.0.1
}

// Link is a running emulated link between two endpoints.
type Link struct {
	a, b   Endpoint
	cfg    Config
	fdA    int
	fdB    int
	ab, ba *direction
	wg     sync.WaitGroup // EngineThread's loops
	// The sched engine's shard and the link's two directions on it.
	shard      *shard
	sdAB, sdBA *schedDir
	release    func() // of the keep-awake spinners
}

// NewLink creates both TUNs, configures them (mtu 1500, txqueuelen 10000,
// up, routes to the peer) and starts forwarding with the engine Configure
// chose. ab shapes packets sent by a toward b. It refuses parameters that
// need more packet slots than MaxSlots (SlotsFor) before creating anything.
func NewLink(a, b Endpoint, ab, ba Params) (*Link, error) {
	slotsAB, slotsBA, err := linkSlots(a, b, ab, ba)
	if err != nil {
		return nil, err
	}
	cfg := CurrentConfig()
	offload := cfg.Engine == EngineSched && !cfg.NoOffload
	l := &Link{a: a, b: b, cfg: cfg, fdA: -1, fdB: -1}
	if l.fdA, err = openTUN(a.Netns, a.Ifname, offload); err != nil {
		return nil, err
	}
	if l.fdB, err = openTUN(b.Netns, b.Ifname, offload); err != nil {
		l.Close()
		return nil, err
	}
	for _, e := range []struct{ self, peer Endpoint }{{a, b}, {b, a}} {
		if err := configure(e.self, e.peer.Addr, cfg.steerMask()); err != nil {
			l.Close()
			return nil, err
		}
	}
	// Packets a's stack writes into its TUN are read from fdA and go to fdB.
	l.ab = newDirection(l.fdA, l.fdB, ab, slotsAB)
	l.ba = newDirection(l.fdB, l.fdA, ba, slotsBA)
	l.ab.inject, l.ba.inject = cfg.Inject, cfg.Inject
	if !cfg.NoKeepAwake {
		l.release = keepAwake()
	}
	if cfg.Engine == EngineThread {
		reserveProcs(2)
		l.wg.Add(2)
		go l.ab.run(&l.wg)
		go l.ba.run(&l.wg)
		return l, nil
	}
	l.shard = pickShard(cfg)
	l.sdAB = l.shard.attach(l.ab, offload)
	l.sdBA = l.shard.attach(l.ba, offload)
	return l, nil
}

// Config is the engine configuration this link runs with.
func (l *Link) Config() Config { return l.cfg }

func configure(e Endpoint, peerAddr, rpsMask string) error {
	h, err := handleIn(e.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(e.Ifname)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", e.Ifname, e.Netns, err)
	}
	// txqueuelen 10000: the TUN ring must absorb bursts while the emulator
	// thread sleeps (docs/lab.md, pitfalls). No IPv6 on the link: no router
	// solicitations or MLD reports, only the traffic under test.
	if err := h.LinkSetMTU(link, 1500); err != nil {
		return fmt.Errorf("mtu of %s in %s: %w", e.Ifname, e.Netns, err)
	}
	if err := h.LinkSetTxQLen(link, 10000); err != nil {
		return fmt.Errorf("txqueuelen of %s in %s: %w", e.Ifname, e.Netns, err)
	}
	if err := SetSysctl(e.Netns, "net.ipv6.conf."+e.Ifname+".disable_ipv6", "1"); err != nil {
		return err
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up in %s: %w", e.Ifname, e.Netns, err)
	}
	if rpsMask != "" {
		// Receive packet steering: what the engine writes into this TUN is
		// handled by the receiving stack on the other CPUs (engine.go).
		// sysfs shows a namespace's devices only to a process that mounted
		// it there, which `ip netns exec` does.
		path := "/sys/class/net/" + e.Ifname + "/queues/rx-0/rps_cpus"
		if err := run("ip", "netns", "exec", e.Netns, "sh", "-c", "echo "+rpsMask+" > "+path); err != nil {
			return fmt.Errorf("steering %s in %s: %w", e.Ifname, e.Netns, err)
		}
	}
	if err := addAddr(h, e.Netns, "lo", e.Addr); err != nil {
		return err
	}
	dst, err := hostNet(peerAddr)
	if err != nil {
		return err
	}
	src, _ := hostNet(e.Addr)
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Src: src.IP, Scope: netlink.SCOPE_LINK}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("route to %s via %s in %s: %w", peerAddr, e.Ifname, e.Netns, err)
	}
	return nil
}

// linkSlots is SlotsFor both directions, an error naming the direction.
func linkSlots(a, b Endpoint, ab, ba Params) (slotsAB, slotsBA int, err error) {
	slotsAB, errAB := SlotsFor(ab, ba)
	if errAB != nil {
		errAB = fmt.Errorf("%s->%s: %w", a.Netns, b.Netns, errAB)
	}
	slotsBA, errBA := SlotsFor(ba, ab)
	if errBA != nil {
		errBA = fmt.Errorf("%s->%s: %w", b.Netns, a.Netns, errBA)
	}
	return slotsAB, slotsBA, errors.Join(errAB, errBA)
}

// SetParams changes one direction while running ("ab" or "ba"); Set
// changes both at once.
func (l *Link) SetParams(dir string, p Params) error {
	switch dir {
	case "ab":
		return l.Set(p, *l.ba.params.Load())
	case "ba":
		return l.Set(*l.ab.params.Load(), p)
	}
	return fmt.Errorf("direction %q: want ab or ba", dir)
}

// Set changes both directions while running, and how many packets each
// may hold with them (SlotsFor); it refuses, changing nothing, parameters
// that need more than MaxSlots. A direction that holds more slots than its
// new limit keeps them (it only stops growing).
func (l *Link) Set(ab, ba Params) error {
	slotsAB, slotsBA, err := linkSlots(l.a, l.b, ab, ba)
	if err != nil {
		return err
	}
	l.ab.slots.Store(int64(slotsAB))
	l.ba.slots.Store(int64(slotsBA))
	l.ab.params.Store(&ab)
	l.ba.params.Store(&ba)
	return nil
}

// Stats returns the statistics of both directions.
func (l *Link) Stats() (ab, ba Stats) { return l.ab.stats(), l.ba.stats() }

// ResetStats zeroes both directions' statistics, e.g. once a lab is set up,
// so that packets sent while the machine was busy building it do not count
// against the self-check of what runs afterwards.
func (l *Link) ResetStats() {
	l.ab.reset()
	l.ba.reset()
}

// Endpoints returns the two ends as given to NewLink.
func (l *Link) Endpoints() (a, b Endpoint) { return l.a, l.b }

// SelfCheck says why a run over this link is invalid by the strict bounds,
// or nil: an emulator direction fell behind (Stats.Check), or a TUN ring
// dropped packets the emulator did not read in time, which TCP sees as
// unexplained loss. CheckEffect is the check by effect.
func (l *Link) SelfCheck() error {
	ab, ba := l.Stats()
	return l.checkDirections(ab, ba, Stats.Check)
}

// checkDirections applies check to each direction's stats, naming the
// direction in what it finds, and adds the TUN rings' drops.
func (l *Link) checkDirections(ab, ba Stats, check func(Stats) error) error {
	var errs []error
	for _, c := range []struct {
		name string
		st   Stats
	}{{l.a.Netns + "->" + l.b.Netns, ab}, {l.b.Netns + "->" + l.a.Netns, ba}} {
		if err := check(c.st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	errs = append(errs, l.ringDrops()...)
	return errors.Join(errs...)
}

// ringDrops reports packets a TUN ring dropped because the emulator did
// not read them in time.
func (l *Link) ringDrops() []error {
	var errs []error
	for _, e := range []Endpoint{l.a, l.b} {
		n, err := TxDropped(e.Netns, e.Ifname)
		if err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			errs = append(errs, fmt.Errorf("%s %s: TUN ring dropped %d packets", e.Netns, e.Ifname, n))
		}
	}
	return errs
}

// Close stops forwarding and removes both TUNs.
func (l *Link) Close() error {
	switch {
	case l.shard != nil:
		l.shard.detach(l.sdAB)
		l.shard.detach(l.sdBA)
		l.shard = nil
	case l.ab != nil && l.cfg.Engine == EngineThread:
		l.ab.stop.Store(true)
		l.ba.stop.Store(true)
		l.wg.Wait()
		reserveProcs(-2)
		l.cfg.Engine = "" // closed
	}
	for _, fd := range []int{l.fdA, l.fdB} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	l.fdA, l.fdB = -1, -1
	if l.release != nil {
		l.release()
	}
	return nil
}

// QuietGC makes the garbage collector run only when the heap nears
// limitBytes. A process that runs packet loops should call it once: a GC
// cycle stops every goroutine, the loops' RT threads included, and on a
// busy machine stopping the world waits until the OS schedules each of the
// process's other threads (a 70 ms stall was seen while other processes
// compiled). The loops allocate nothing in steady state, so the heap grows
// only with what the rest of the process does.
func QuietGC(limitBytes int64) {
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(limitBytes)
}

var (
	procsMu    sync.Mutex
	activeDirs int // packet loops running in this process
	baseProcs  = runtime.GOMAXPROCS(0)
)

// reserveProcs keeps GOMAXPROCS at the process's own setting plus one P per
// running packet loop. A loop's thread leaves its P whenever it blocks in
// ppoll; when it wakes it needs a P again to run Go code, and with only
// GOMAXPROCS=NumCPU Ps shared by dozens of loops it waited for one until the
// runtime's sysmon took a P back from another thread: packets were written
// 1-3 ms late on a quiet machine (world topology, 68 loops, 2 CPUs). An idle
// P costs nothing; the loops' threads still mostly sleep in ppoll.
func reserveProcs(delta int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	activeDirs += delta
	if want := baseProcs + activeDirs; runtime.GOMAXPROCS(0) != want {
		runtime.GOMAXPROCS(want)
	}
}
