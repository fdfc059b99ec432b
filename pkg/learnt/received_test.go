package learnt

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A tunnel's rate from its destination counts in intervals where the relay
// kept up (it read what arrived and passed it on) and data arrived; the
// best run of three stands, and only a tunnel that received a MiB is kept.
func TestReceivedRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// feed: intervals of mbs MB received, in each of which the relay kept
	// up (nothing unread, its window open) or not (a window's worth
	// unread).
	feed := func(mbs []float64, kept []bool) *Inflow {
		w := &Inflow{prevAt: t0}
		var recv uint64
		for i, mb := range mbs {
			recv += uint64(mb * 1e6)
			from := tunnel.SocketStats{Valid: true, ReceivedBytes: recv, WindowBytes: 1 << 20}
			if !kept[i] {
				from.UnreadBytes = 1 << 20
			}
			w.add(from, tunnel.SocketStats{Valid: true}, t0.Add(time.Duration(i+1)*rateSampleEvery))
		}
		return w
	}
	yes := []bool{true, true, true, true}
	if w := feed([]float64{1, 1.1, 1.2, 0.1}, yes); w.bestBps != 16e6 {
		t.Errorf("forwarded as it came: best %v bits/s, want 16e6", w.bestBps)
	}
	if w := feed([]float64{1, 1, 1, 1}, []bool{true, false, true, true}); w.bestBps != 0 {
		t.Errorf("held back in one interval of four: best %v bits/s, want none", w.bestBps)
	}
	// The onward socket window-limited in every interval, its send buffer
	// taking the bursts (a little unsent): the relay read all that came,
	// its window open.
	w := &Inflow{prevAt: t0}
	for i := 1; i <= 3; i++ {
		w.add(tunnel.SocketStats{Valid: true, ReceivedBytes: uint64(i) * 1e6, UnreadBytes: 1448, WindowBytes: 1 << 20}, tunnel.SocketStats{Valid: true, NotsentBytes: 32 << 10},
			t0.Add(time.Duration(i)*rateSampleEvery))
	}
	if w.bestBps != 16e6 {
		t.Errorf("read all that came, onward window-limited: best %v bits/s, want 16e6", w.bestBps)
	}
	// Its onward socket held it: the relay read what came (its small
	// buffer's window open), but 2 MB sat unsent onward.
	w = &Inflow{prevAt: t0}
	for i := 1; i <= 4; i++ {
		w.add(tunnel.SocketStats{Valid: true, ReceivedBytes: uint64(i) * 1e6, UnreadBytes: 1448, WindowBytes: 64 << 10},
			tunnel.SocketStats{Valid: true, NotsentBytes: 2e6}, t0.Add(time.Duration(i)*rateSampleEvery))
	}
	if w.bestBps != 0 {
		t.Errorf("2 MB unsent onward at every reading: best %v bits/s, want none", w.bestBps)
	}
	if w := feed([]float64{1, 0, 1, 1}, yes); w.bestBps != 0 {
		t.Errorf("nothing arrived in one interval: best %v bits/s, want none", w.bestBps)
	}
	// The onward socket "app-limited" (its send buffer all in flight, so
	// nothing unsent) while what arrived piled up unread: held back.
	w = &Inflow{prevAt: t0}
	for i := 1; i <= 4; i++ {
		w.add(tunnel.SocketStats{Valid: true, ReceivedBytes: uint64(i) * 1e6, UnreadBytes: 5 << 20, WindowBytes: 1 << 20},
			tunnel.SocketStats{Valid: true, AppLimited: true}, t0.Add(time.Duration(i)*rateSampleEvery))
	}
	if w.bestBps != 0 {
		t.Errorf("5 MiB unread at every reading, onward app-limited: best %v bits/s, want none", w.bestBps)
	}
	var r Received
	host := netip.MustParseAddr("10.0.0.9")
	small := feed([]float64{0.2, 0.2, 0.2}, yes)
	small.host = host
	r.Done(small, t0.Add(2*time.Second))
	if _, _, ok := r.Learnt(host, t0.Add(2*time.Second)); ok {
		t.Error("a rate kept from a tunnel that received 600 KB")
	}
	big := feed([]float64{1, 1, 1}, yes)
	big.host = host
	r.Done(big, t0.Add(2*time.Second))
	if bps, age, ok := r.Learnt(netip.MustParseAddr("::ffff:10.0.0.9"), t0.Add(12*time.Second)); !ok || bps != 16e6 || age != 10*time.Second {
		t.Errorf("learnt %v %v %v, want 16e6 from 10 s ago", bps, age, ok)
	}
}

// keptUp on real sockets: a receiver that stops reading while its sender
// keeps writing holds the sender back (its buffer fills and its window
// closes), with nothing unsent onward; once it has read what arrived it
// keeps up again.
func TestKeptUpOnRealSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sender, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	from, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	go func() { _, _ = sender.Write(make([]byte, 64<<20)) }() // ends with the test's close
	stats := tunnel.NewStatsReader(from)
	idle := tunnel.SocketStats{Valid: true} // an onward socket with nothing unsent
	deadline := time.Now().Add(10 * time.Second)
	st := stats.Read()
	for ; keptUp(st, idle); st = stats.Read() {
		if time.Now().After(deadline) {
			t.Fatalf("a receiver that reads nothing still keeps up after 10 s: %d bytes unread, window %d", st.UnreadBytes, st.WindowBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.UnreadBytes == 0 {
		t.Fatalf("held back with nothing unread: %+v", st)
	}
	// The sender stops (what its buffer holds still comes); the receiver
	// reads as data arrives and keeps up again.
	_ = sender.SetWriteDeadline(time.Now())
	go func() { _, _ = io.Copy(io.Discard, from) }()
	for st = stats.Read(); !keptUp(st, idle); st = stats.Read() {
		if time.Now().After(deadline) {
			t.Fatalf("a receiver that read what arrived does not keep up: %d bytes unread, window %d", st.UnreadBytes, st.WindowBytes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
