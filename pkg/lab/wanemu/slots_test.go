package wanemu

import (
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

func TestSlotsFor(t *testing.T) {
	const ms = int64(1e6)
	mtuPkts := func(bytes float64) float64 { return bytes / slotPacketBytes }
	for _, tc := range []struct {
		name    string
		p, rev  Params
		want    int    // 0: the error below
		wantErr string // a part of the error
	}{
		// A short link with a small queue needs few: the floor.
		{"floor", Params{DelayNs: 2 * ms, RateBps: 100e6, QueueBytes: 256 << 10}, Params{DelayNs: 2 * ms, RateBps: 100e6}, MinSlots, ""},
		// The stripe crossing: its 14,649 KiB queue, and an ACK per
		// full-sized packet of 400 Mbit/s held 100 ms.
		{"stripe crossing", Params{DelayNs: 100 * ms, RateBps: 400e6, QueueBytes: 14649 << 10}, Params{DelayNs: 100 * ms, RateBps: 400e6, QueueBytes: 14649 << 10},
			int(math.Ceil(slotMargin * (mtuPkts(14649<<10) + mtuPkts(400e6/8*0.1)))), ""},
		// Defaults: the 16 MiB queue, and the other way's 1 Gbit/s.
		{"defaults", Params{DelayNs: 25 * ms}, Params{DelayNs: 25 * ms},
			int(math.Ceil(slotMargin * (mtuPkts(DefaultQueueBytes) + mtuPkts(1e9/8*0.025)))), ""},
		// ACKs answer the other direction's data: its rate counts, and
		// jitter holds them longer.
		{"acks at the reverse rate", Params{DelayNs: 90 * ms, JitterNs: 10 * ms, RateBps: 10e6, QueueBytes: 1 << 20}, Params{RateBps: 800e6},
			int(math.Ceil(slotMargin * (mtuPkts(1<<20) + mtuPkts(800e6/8*0.1)))), ""},
		// 10 Gbit/s over 300 ms: far more than MaxSlots.
		{"over the cap", Params{DelayNs: 300 * ms, RateBps: 10e9}, Params{DelayNs: 300 * ms, RateBps: 10e9}, 0, "more than the emulator holds in one direction (65536, 128 MiB)"},
		{"queue alone over the cap", Params{DelayNs: ms, QueueBytes: 100 << 20}, Params{RateBps: 1e6}, 0, "its queue of 102400 KiB"},
	} {
		got, err := SlotsFor(tc.p, tc.rev)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "lower queue_kb") {
				t.Errorf("%s: got %d, %v; want an error with %q", tc.name, got, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("%s: got %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// Whatever the link, the slots hold its one-way delay line in full-sized
// packets when its queue lets it run at its rate, and never fewer than
// MinSlots.
func TestSlotsForHoldsTheDelayLine(t *testing.T) {
	for _, rate := range []int64{1e6, 50e6, 400e6, 1e9} {
		for _, delayMs := range []int64{0, 1, 25, 100, 200} {
			p := Params{DelayNs: delayMs * 1e6, RateBps: rate}
			line := rate / 8 * delayMs / 1000
			p.QueueBytes = int(max(line, 64<<10))
			n, err := SlotsFor(p, p)
			if err != nil {
				t.Fatalf("%d bit/s, %d ms: %v", rate, delayMs, err)
			}
			if n < MinSlots || float64(n) < float64(line)/slotPacketBytes*slotMargin {
				t.Errorf("%d bit/s, %d ms: %d slots for a delay line of %d bytes", rate, delayMs, n, line)
			}
		}
	}
}

func TestSlotPoolGrowsToItsLimit(t *testing.T) {
	p := newSlotPool()
	if p.allocated != MinSlots || len(p.free) != MinSlots {
		t.Fatalf("a new pool has %d slots, %d free; want %d", p.allocated, len(p.free), MinSlots)
	}
	limit := MinSlots + growSlots + 10
	var held [][]byte
	for p.ready(limit) {
		b := p.take()
		if len(b) != slotBytes || cap(b) != slotBytes {
			t.Fatalf("slot of len %d cap %d, want %d", len(b), cap(b), slotBytes)
		}
		held = append(held, b)
	}
	if len(held) != limit || p.allocated != limit {
		t.Fatalf("held %d, allocated %d; want the limit %d", len(held), p.allocated, limit)
	}
	// A lower limit (Link.Set) stops growth but keeps what was made.
	for _, b := range held {
		p.put(b)
	}
	if cap(p.free) != limit {
		t.Fatalf("free list capacity %d, want %d: a put would have reallocated it", cap(p.free), limit)
	}
	if !p.ready(MinSlots) || p.allocated != limit {
		t.Fatalf("after a lower limit: ready %v, allocated %d; want true, %d", p.ready(MinSlots), p.allocated, limit)
	}
}

func TestFitRingKeepsOrder(t *testing.T) {
	ring := make([]slot, 4)
	// Held packets 0..2 wrapped round the end: head at 3.
	for i, at := range []int{3, 0, 1} {
		ring[at] = slot{n: i}
	}
	if r, head := fitRing(ring, 3, 3, 4); &r[0] != &ring[0] || head != 3 {
		t.Fatalf("a ring with room was replaced")
	}
	r, head := fitRing(ring, 3, 3, 5)
	if len(r) != 8 || head != 0 {
		t.Fatalf("grown ring: len %d head %d, want 8 and 0", len(r), head)
	}
	for i := range 3 {
		if r[i].n != i {
			t.Fatalf("grown ring: place %d holds packet %d", i, r[i].n)
		}
	}
}

// A long fast link holds more packets than MinSlots at once: each engine
// grows the direction's slots, up to SlotsFor, without a drop; Set moves
// the limit and refuses parameters over MaxSlots.
func TestSlotsGrowPastMinSlots(t *testing.T) {
	requireRoot(t)
	const datagrams, size = 12000, 1200
	p := Params{DelayNs: 300e6} // 1 Gbit/s, 16 MiB: ~14.7 MB held is within the queue
	for _, engine := range []string{EngineSched, EngineThread} {
		t.Run(engine, func(t *testing.T) {
			prev := CurrentConfig()
			c := prev
			c.Engine = engine
			Configure(c)
			t.Cleanup(func() { Configure(prev) })
			nsA, nsB, l := twoNodes(t, p, p)
			var pc net.PacketConn
			if err := InNetns(nsB, func() (err error) { pc, err = net.ListenPacket("udp", "10.233.0.2:0"); return }); err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			// 100 datagrams a ms: most are sent before the first is due,
			// and held at once.
			if err := InNetns(nsA, func() error {
				c, err := net.Dial("udp", pc.LocalAddr().String())
				if err != nil {
					return err
				}
				defer c.Close()
				msg := make([]byte, size)
				for i := range datagrams {
					if _, err := c.Write(msg); err != nil {
						return err
					}
					if i%100 == 99 {
						time.Sleep(time.Millisecond)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			want, _ := SlotsFor(p, p)
			var ab Stats
			for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if ab, _ = l.Stats(); ab.Packets+ab.DropsSlots+ab.DropsQueue >= datagrams {
					break
				}
			}
			t.Logf("ab %+v", ab)
			if ab.Packets != datagrams || ab.DropsSlots != 0 || ab.DropsQueue != 0 || ab.WriteErrors != 0 {
				t.Fatalf("%d of %d written, %d dropped for slots, %d by the queue, %d write errors", ab.Packets, datagrams, ab.DropsSlots, ab.DropsQueue, ab.WriteErrors)
			}
			if ab.HeldPeak <= MinSlots || ab.HeldPeak > ab.Slots || ab.Slots != want {
				t.Fatalf("held %d at most of %d slots; want more than %d, and %d slots", ab.HeldPeak, ab.Slots, MinSlots, want)
			}
			longer := p
			longer.DelayNs = 400e6
			if err := l.Set(longer, longer); err != nil {
				t.Fatal(err)
			}
			if ab, _ := l.Stats(); ab.Slots <= want {
				t.Fatalf("a longer delay left %d slots, want more than %d", ab.Slots, want)
			}
			huge := Params{DelayNs: 300e6, RateBps: 10e9}
			if err := l.Set(huge, huge); err == nil || !strings.Contains(err.Error(), "more than the emulator holds") {
				t.Fatalf("Set over MaxSlots: %v", err)
			}
			if got := *l.ab.params.Load(); got != longer {
				t.Fatalf("a refused Set changed the parameters to %+v", got)
			}
		})
	}
}
