package wanemu

import (
	"fmt"
	"math"
)

// Packet slots. Every packet a direction holds, in its rate queue or on
// its delay line, owns one slot of slotBytes; a packet that arrives with
// every slot held is dropped and the run is invalid (Stats.DropsSlots). A
// fixed 4096 slots a direction was too few for long, fast links: at
// 400 Mbit/s a 100 ms delay line alone is 3,333 full-sized packets, and the
// queue comes on top. So each direction's number of slots is derived from
// its link (SlotsFor), and memory is spent as packets are held (slotPool).
const (
	// MinSlots is what every direction held before the number was
	// derived; no direction gets fewer, so no link holds less than it did.
	MinSlots = 4096
	// MaxSlots caps one direction (MaxSlots x slotBytes = 128 MiB): a link
	// that needs more is refused when it is set up, not run short.
	MaxSlots = 1 << 16
	// slotPacketBytes is the size data packets are counted at: the TUN's
	// MTU. What fills a queue or a long delay line is bulk data, whose
	// segments are full-sized.
	slotPacketBytes = 1500
	// slotMargin covers what the count leaves out: the shorter last
	// segment of each TSO burst, and ACKs waiting behind queued data when
	// a link carries bulk data both ways at once.
	slotMargin = 1.25
	// growSlots is how many slots (2 MiB) a direction adds at a time once
	// it holds all it has, up to its limit: a direction starts with
	// MinSlots, as before, and only a link that holds more pays for more.
	growSlots = 1024
)

// SlotsFor returns how many packets direction p of a link must be able to
// hold, rev being the link's other direction, or an error saying why that
// is more than MaxSlots.
//
// Data: the byte limit (QueueBytes) counts every byte a direction holds,
// the delay line's included (rateQueue.admit), so it bounds the data, in
// full-sized packets. ACKs are small and cannot be counted by bytes: at
// most one answers each data packet rev carries (arriving at most at rev's
// rate in full-sized packets), and each is held for the delay and jitter.
func SlotsFor(p, rev Params) (int, error) {
	dataPkts := float64(p.queueBytes()) / slotPacketBytes
	holdS := float64(max(p.DelayNs, 0)+max(p.JitterNs, 0)) / 1e9
	ackPkts := float64(rev.rateBps()) / 8 / slotPacketBytes * holdS
	need := slotMargin * (dataPkts + ackPkts)
	if need > MaxSlots {
		return 0, fmt.Errorf("needs %.0f packet slots, more than the emulator holds in one direction (%d, %d MiB): "+
			"its queue of %d KiB (every byte it holds, counted in %d-byte packets) and the ACKs of %.0f Mbit/s the other way over %.1f ms; "+
			"lower queue_kb, the rate or the delay",
			math.Ceil(need), MaxSlots, MaxSlots*slotBytes>>20, p.queueBytes()>>10, slotPacketBytes, float64(rev.rateBps())/1e6, holdS*1e3)
	}
	return max(int(math.Ceil(need)), MinSlots), nil
}

// queueBytes is the byte limit in force: QueueBytes or the default.
func (p *Params) queueBytes() int {
	if p.QueueBytes <= 0 {
		return DefaultQueueBytes
	}
	return p.QueueBytes
}

// rateBps is the line rate in force: RateBps or the default.
func (p *Params) rateBps() int64 {
	if p.RateBps <= 0 {
		return DefaultRateBps
	}
	return p.RateBps
}

// slot is a held packet. The sched engine keeps buf[:vnetHdrLen] for its
// virtio_net_hdr (written in place for a lone write) and the packet in
// buf[vnetHdrLen:][:n]; the thread engine has the packet in buf[:n].
type slot struct {
	due due
	n   int
	buf []byte
}

// slotPool is one direction's packet slots, owned by its packet loop. It
// starts with MinSlots and grows by growSlots whenever every slot is held,
// up to the direction's limit (which Link.Set may raise while it runs).
// The free list is LIFO, so a direction keeps reusing the slots it touched
// last and the pages of the others stay untouched.
type slotPool struct {
	free      [][]byte
	allocated int
}

func newSlotPool() *slotPool {
	p := &slotPool{}
	p.grow(MinSlots)
	return p
}

// grow adds n slots cut from one slab; its pages are touched only as
// packets fill them. It runs with every slot held (the free list empty),
// so the list is made anew, with room for every slot, without a copy:
// returning a slot never reallocates it.
func (p *slotPool) grow(n int) {
	p.free = make([][]byte, 0, p.allocated+n)
	slab := make([]byte, n*slotBytes)
	for i := range n {
		p.free = append(p.free, slab[i*slotBytes:(i+1)*slotBytes:(i+1)*slotBytes])
	}
	p.allocated += n
}

// ready says whether a slot is free, growing the pool when every slot is
// held and fewer than limit exist.
func (p *slotPool) ready(limit int) bool {
	if len(p.free) == 0 && p.allocated < min(limit, MaxSlots) {
		p.grow(min(growSlots, min(limit, MaxSlots)-p.allocated))
	}
	return len(p.free) > 0
}

// take returns a free slot; call ready first.
func (p *slotPool) take() []byte {
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b
}

// put returns a slot to the pool.
func (p *slotPool) put(b []byte) { p.free = append(p.free, b) }

// fitRing returns a ring with a place for each of slots packets, and its
// head: ring itself when it has them, else a larger one (twice the size,
// so that it is copied a few times at most) holding ring's held packets
// from its start.
func fitRing(ring []slot, head, held, slots int) ([]slot, int) {
	if slots <= len(ring) {
		return ring, head
	}
	r := make([]slot, min(max(2*len(ring), slots), MaxSlots))
	for i := range held {
		r[i] = ring[(head+i)%len(ring)]
	}
	return r, 0
}
