package wanemu

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

func TestMain(m *testing.M) {
	QuietGC(2 << 30) // as relayctl lab does: no GC pauses in the packet loops
	os.Exit(m.Run())
}

func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		testenv.Need(t, "needs root for network namespaces and TUN devices: run it as root (sudo make test)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.Need(t, "no /dev/net/tun (%v): load the tun module (modprobe tun); in a container, pass the device (docker run --device /dev/net/tun --cap-add NET_ADMIN)", err)
	}
}

// twoNodes makes namespaces a and b joined by one link.
func twoNodes(t testing.TB, ab, ba Params) (nsA, nsB string, l *Link) {
	return twoNodesNamed(t, "", ab, ba)
}

// twoNodesNamed is twoNodes with a suffix in the namespaces' names, for a
// test that needs more than one pair.
func twoNodesNamed(t testing.TB, suffix string, ab, ba Params) (nsA, nsB string, l *Link) {
	requireRoot(t)
	nsA = fmt.Sprintf("wt%d%s-a", os.Getpid(), suffix)
	nsB = fmt.Sprintf("wt%d%s-b", os.Getpid(), suffix)
	for _, n := range []string{nsA, nsB} {
		_ = DelNetns(n)
		if err := AddNetns(n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = DelNetns(n) })
	}
	l, err := NewLink(Endpoint{Netns: nsA, Ifname: "wan0", Addr: "10.233.0.1"}, Endpoint{Netns: nsB, Ifname: "wan0", Addr: "10.233.0.2"}, ab, ba)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return nsA, nsB, l
}

// untilValid runs measure, which asserts what it measured, on a run the
// emulator's self-check accepts. This machine is a VM whose threads now and
// then stall for milliseconds (docs/lab.md); the self-check then rightly
// calls the run invalid, and the answer is to measure again, as a benchmark
// would; a run is never asserted on when it was invalid. Each retry is
// logged with "LAB RETRY". Three invalid runs in a row fail the test in CI
// (CI=true) and skip it elsewhere, saying why.
func untilValid(t *testing.T, l *Link, measure func() (assert func())) {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l.ResetStats()
		ResetEngineStats()
		assert := measure()
		err := l.SelfCheck()
		if err == nil {
			assert()
			return
		}
		if attempt == attempts {
			msg := fmt.Sprintf("self-check failed on %d runs in a row (machine too busy?): %v; engine %+v", attempt, err, EngineStats())
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Logf("LAB RETRY %s: run %d invalid, measuring again in 5 s: %v; engine %+v", t.Name(), attempt, err, EngineStats())
		time.Sleep(5 * time.Second) // whatever held the machine up may pass
	}
}

// handshakeRTT is the round trip of c's handshake as the kernel timed it
// (TCP_INFO's RTT, in microseconds, right after the handshake: its one
// sample). A wall clock around the dial measured this test process too:
// the goroutine's wake-up after the SYN-ACK, which on this 2-CPU VM now
// and then ran a whole set of handshakes ~1.3 ms slow, unseen by the
// emulator's lateness. The kernel's timestamps are the link's alone.
func handshakeRTT(c net.Conn) (time.Duration, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var rttUs uint32
	var infoErr error
	if err := rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, infoErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); infoErr == nil {
			rttUs = info.Rtt
		}
	}); err != nil {
		return 0, err
	}
	if infoErr != nil || rttUs == 0 {
		return 0, fmt.Errorf("no handshake RTT in TCP_INFO (%v)", infoErr)
	}
	return time.Duration(rttUs) * time.Microsecond, nil
}

// connectRTTs measures TCP handshake times (one RTT each, handshakeRTT)
// from a to b.
func connectRTTs(t *testing.T, nsA, nsB string, n int) []time.Duration {
	var ln net.Listener
	if err := InNetns(nsB, func() (err error) { ln, err = net.Listen("tcp", "10.233.0.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var out []time.Duration
	err := InNetns(nsA, func() error {
		for i := 0; i < n; i++ {
			c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
			if err != nil {
				return err
			}
			rtt, err := handshakeRTT(c)
			c.Close()
			if err != nil {
				return err
			}
			out = append(out, rtt)
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConfiguredRTT(t *testing.T) {
	for _, rttMs := range []int64{25, 50} {
		t.Run(fmt.Sprintf("%dms", rttMs), func(t *testing.T) {
			half := Params{DelayNs: rttMs * 1e6 / 2}
			nsA, nsB, l := twoNodes(t, half, half)
			want := time.Duration(rttMs) * time.Millisecond
			rtts := connectRTTs(t, nsA, nsB, 11)
			slices.Sort(rtts)
			med := rtts[len(rtts)/2]
			t.Logf("median handshake RTT %v (configured %v), all %v", med, want, rtts)
			if d := med - want; d < 0 || d > time.Millisecond {
				t.Fatalf("median RTT %v, want %v within 1 ms", med, want)
			}
			ab, ba := l.Stats()
			// ~40 packets: too few for a p99 (it is the max); the lateness
			// self-check is asserted in TestRateLimit over ~17,000.
			t.Logf("ab %+v ba %+v", ab, ba)
		})
	}
}

// TestFirstHandshake: the very first TCP handshake over a fresh link takes
// the configured RTT within 1.5 ms (a fresh lab's first connection once
// took 51.7 ms on a 50 ms link, timed by the wall clock; handshakeRTT
// times it by the kernel's clock now, and it is measured once).
func TestFirstHandshake(t *testing.T) {
	const rttMs = 50
	want := time.Duration(rttMs) * time.Millisecond
	half := Params{DelayNs: rttMs * 1e6 / 2}
	nsA, nsB, l := twoNodesNamed(t, "f1", half, half)
	first := connectRTTs(t, nsA, nsB, 1)[0]
	ab, ba := l.Stats()
	t.Logf("first handshake %v on a fresh %v link; lateness max %v / %v", first, want,
		time.Duration(ab.LatenessMaxNs), time.Duration(ba.LatenessMaxNs))
	if d := first - want; d < 0 || d > 1500*time.Microsecond {
		t.Fatalf("first handshake over a fresh link took %v, want %v within 1.5 ms", first, want)
	}
}

// TestRateLimit: a 100 Mbit/s link carries one TCP flow at 100 Mbit/s less
// header overhead (1448 payload bytes per 1500-byte packet: 96.5 Mbit/s),
// within 5 %, with no TUN ring drops.
func TestRateLimit(t *testing.T) {
	p := Params{DelayNs: 2e6, RateBps: 100e6, QueueBytes: 256 << 10}
	nsA, nsB, l := twoNodes(t, p, Params{DelayNs: 2e6})
	const sizeBytes = 24 << 20
	var ln net.Listener
	if err := InNetns(nsB, func() (err error) { ln, err = net.Listen("tcp", "10.233.0.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Time the receiver over the bytes after the first 4 MiB, so connection
	// setup and slow start do not count.
	const warmupBytes = 4 << 20
	untilValid(t, l, func() func() {
		sp := timedTransfer(t, nsA, ln, warmupBytes, sizeBytes-warmupBytes, nil)
		gotMbit := float64(sizeBytes-warmupBytes) * 8 / sp.end.Sub(sp.start).Seconds() / 1e6
		wantMbit := 100 * 1448.0 / 1500.0
		ab, _ := l.Stats()
		t.Logf("goodput %.1f Mbit/s (expected %.1f), ab %+v", gotMbit, wantMbit, ab)
		return func() {
			if gotMbit < wantMbit*0.95 || gotMbit > wantMbit*1.05 {
				t.Fatalf("goodput %.1f Mbit/s, want %.1f within 5 %%", gotMbit, wantMbit)
			}
		}
	})
}

type span struct{ start, end time.Time }

// timedTransfer sends warmupBytes+measureBytes from nsA to ln and returns
// when the receiver read the measured bytes, timed by the receiver. With
// onConn, the sender's connection is handed over before sending.
func timedTransfer(t *testing.T, nsA string, ln net.Listener, warmupBytes, measureBytes int64, onConn func(*net.TCPConn)) span {
	t.Helper()
	done := make(chan span, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- span{}
			return
		}
		defer c.Close()
		_, _ = io.CopyN(io.Discard, c, warmupBytes)
		start := time.Now()
		_, _ = io.CopyN(io.Discard, c, measureBytes)
		done <- span{start, time.Now()}
	}()
	err := InNetns(nsA, func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		if onConn != nil {
			onConn(c.(*net.TCPConn))
		}
		_, err = c.Write(make([]byte, warmupBytes+measureBytes))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sp := <-done
	if sp.start.IsZero() {
		t.Fatal("receiver failed")
	}
	return sp
}

// TestWindowLimited: a single flow whose receiver caps its buffer moves one
// window per round trip. The window is the one the sender actually sees
// (TCP_INFO snd_wnd), not the sysctl: the kernel advertises only part of
// tcp_rmem (docs/lab.md, pitfalls). Within 8 % of snd_wnd / RTT, and the
// emulator's self-check passes.
func TestWindowLimited(t *testing.T) {
	const rttMs = 50
	half := Params{DelayNs: rttMs * 1e6 / 2}
	nsA, nsB, l := twoNodes(t, half, half)
	if err := SetSysctl(nsB, "net.ipv4.tcp_rmem", "4096 262144 262144"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{nsA, nsB} {
		if err := SetSysctl(ns, "net.ipv4.tcp_congestion_control", "cubic"); err != nil {
			t.Fatal(err)
		}
	}
	var ln net.Listener
	if err := InNetns(nsB, func() (err error) { ln, err = net.Listen("tcp", "10.233.0.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const warmupBytes, measureBytes = 2 << 20, 8 << 20
	untilValid(t, l, func() func() {
		// Sample the window the sender sees while the flow runs; keep the
		// samples taken while the receiver measured (autotuning grows the
		// window during warm-up).
		type sample struct {
			at  time.Time
			wnd uint32
		}
		var samples []sample
		stop := make(chan struct{})
		sampled := make(chan struct{})
		sp := timedTransfer(t, nsA, ln, warmupBytes, measureBytes, func(conn *net.TCPConn) {
			raw, _ := conn.SyscallConn()
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					_ = raw.Control(func(fd uintptr) {
						if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && info.Snd_wnd > 0 {
							samples = append(samples, sample{time.Now(), info.Snd_wnd})
						}
					})
				}
			}()
		})
		close(stop)
		<-sampled
		var wnds []uint32
		for _, s := range samples {
			if s.at.After(sp.start) && s.at.Before(sp.end) {
				wnds = append(wnds, s.wnd)
			}
		}
		if len(wnds) < 10 {
			t.Fatalf("only %d TCP_INFO samples", len(wnds))
		}
		slices.Sort(wnds)
		wndBytes := float64(wnds[len(wnds)/2])
		gotBps := float64(measureBytes) * 8 / sp.end.Sub(sp.start).Seconds()
		wantBps := wndBytes * 8 / (rttMs / 1000.0)
		ab, ba := l.Stats()
		t.Logf("goodput %.2f Mbit/s, snd_wnd median %.0f B (min %d max %d) -> expected %.2f Mbit/s (ratio %.3f); ab %+v ba %+v",
			gotBps/1e6, wndBytes, wnds[0], wnds[len(wnds)-1], wantBps/1e6, gotBps/wantBps, ab, ba)
		return func() {
			if gotBps < wantBps*0.92 || gotBps > wantBps*1.08 {
				t.Fatalf("goodput %.2f Mbit/s, want %.2f within 8 %%", gotBps/1e6, wantBps/1e6)
			}
		}
	})
}

// TestJitterKeepsOrder: with 4 ms of jitter, far more than the spacing of
// packets in a flow, a stream still arrives in order: the sender sees no
// reordering and retransmits nothing (the emulator raises a packet's due
// time to its predecessor's). Handshake RTTs stay within delay + jitter.
func TestJitterKeepsOrder(t *testing.T) {
	p := Params{DelayNs: 5e6, JitterNs: 4e6}
	nsA, nsB, l := twoNodes(t, p, p)
	rtts := connectRTTs(t, nsA, nsB, 11)
	slices.Sort(rtts)
	if med := rtts[len(rtts)/2]; med < 10*time.Millisecond || med > 19*time.Millisecond {
		t.Fatalf("median RTT %v (all %v), want 10-18 ms (+1 ms)", med, rtts)
	}
	var ln net.Listener
	if err := InNetns(nsB, func() (err error) { ln, err = net.Listen("tcp", "10.233.0.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const sizeBytes = 8 << 20
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	var info *unix.TCPInfo
	if err := InNetns(nsA, func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		if _, err := c.Write(make([]byte, sizeBytes)); err != nil {
			return err
		}
		_ = c.(*net.TCPConn).CloseWrite()
		if n := <-got; n != sizeBytes {
			return fmt.Errorf("received %d bytes, want %d", n, sizeBytes)
		}
		raw, _ := c.(*net.TCPConn).SyscallConn()
		_ = raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		c.Close()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("sender: reord_seen %d total_retrans %d; RTTs %v", info.Reord_seen, info.Total_retrans, rtts)
	if info.Reord_seen != 0 || info.Total_retrans != 0 {
		t.Fatalf("reordering seen %d, retransmits %d: want 0 and 0", info.Reord_seen, info.Total_retrans)
	}
	// No self-check assertion: order does not depend on timing (a late
	// write is still written in FIFO order), and the RTT bound above
	// already fails when the emulator is far behind.
	ab, ba := l.Stats()
	t.Logf("ab %+v ba %+v", ab, ba)
}

// The late-packet test's thresholds against the binomial tail computed
// independently (Python, exact sums): the smallest late count that fails.
func TestLateTooOftenThresholds(t *testing.T) {
	for _, tc := range []struct{ n, firstInvalid int }{{60, 4}, {100, 5}, {200, 7}, {300, 9}, {1000, 19}, {65536, 716}} {
		if lateTooOften(tc.firstInvalid-1, tc.n) || !lateTooOften(tc.firstInvalid, tc.n) {
			t.Errorf("n=%d: want the first invalid late count %d; %d -> %v, %d -> %v", tc.n, tc.firstInvalid,
				tc.firstInvalid-1, lateTooOften(tc.firstInvalid-1, tc.n), tc.firstInvalid, lateTooOften(tc.firstInvalid, tc.n))
		}
	}
}

// The self-check's rules, on hand-made statistics (no root needed).
func TestStatsCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    Stats
		valid bool
	}{
		{"quiet", Stats{LatenessSamples: 5000, LateSamples: 20, LatenessP99Ns: 200e3, LatenessMaxNs: 2e6}, true},
		{"p99 over bound", Stats{LatenessSamples: 5000, LateSamples: 80, LatenessP99Ns: 600e3, LatenessMaxNs: 2e6}, false},
		{"busy direction just over 1 %", Stats{LatenessSamples: 65536, LateSamples: 716, LatenessP99Ns: 510e3, LatenessMaxNs: 2e6}, false},
		{"busy direction within chance of 1 %", Stats{LatenessSamples: 65536, LateSamples: 700, LatenessP99Ns: 505e3, LatenessMaxNs: 2e6}, true},
		{"probes: 3 of 300 late is what 1 % predicts", Stats{LatenessSamples: 300, LateSamples: 3, LatenessP99Ns: 1.1e6, LatenessMaxNs: 3e6}, true},
		{"probes: 9 of 300 late is too many", Stats{LatenessSamples: 300, LateSamples: 9, LatenessP99Ns: 2e6, LatenessMaxNs: 3e6}, false},
		{"few packets, most late", Stats{LatenessSamples: 60, LateSamples: 4, LatenessP99Ns: 3e6, LatenessMaxNs: 3e6}, false},
		{"one long stall", Stats{LatenessSamples: 5000, LatenessP99Ns: 100e3, LatenessMaxNs: 70e6}, false},
		{"slots exhausted", Stats{LatenessSamples: 5000, DropsSlots: 1}, false},
		{"queue and loss drops are emulated, not faults", Stats{LatenessSamples: 5000, DropsQueue: 10, DropsLoss: 10}, true},
	} {
		if err := tc.st.Check(); (err == nil) != tc.valid {
			t.Errorf("%s: Check() = %v, want valid %v", tc.name, err, tc.valid)
		}
	}
}

// TestLoss: a link configured with 1 % loss drops 1 % of 200,000 UDP
// datagrams within ±10 % relative (2,000 expected, one standard deviation
// 44.5 = 2.2 %: the bound is 4.5 σ), counted by the emulator: every
// datagram sent reached it and was either written on or dropped as
// emulated loss. (What the receiving socket then gets is the receiver's
// business: a burst can overflow its buffer, capped by net.core.rmem_max.)
func TestLoss(t *testing.T) {
	const lossRate, datagrams = 0.01, 200000
	nsA, nsB, l := twoNodes(t, Params{DelayNs: 1e6, Loss: lossRate}, Params{DelayNs: 1e6})
	var pc net.PacketConn
	if err := InNetns(nsB, func() (err error) { pc, err = net.ListenPacket("udp", "10.233.0.2:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_ = pc.(*net.UDPConn).SetReadBuffer(8 << 20)
	got := make(chan int, 1)
	go func() {
		n := 0
		buf := make([]byte, 2048)
		for {
			_ = pc.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := pc.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	if err := InNetns(nsA, func() error {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		msg := make([]byte, 200)
		for i := range datagrams {
			if _, err := c.Write(msg); err != nil {
				return err
			}
			if i%100 == 99 {
				time.Sleep(time.Millisecond) // 100 kpackets/s at most
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	received := <-got
	ab, _ := l.Stats()
	lost := float64(ab.DropsLoss) / datagrams
	t.Logf("emulated loss %.4f (configured %.4f); the receiver got %d of %d; ab %+v", lost, lossRate, received, datagrams, ab)
	if ab.DropsQueue != 0 || ab.DropsSlots != 0 || ab.WriteErrors != 0 || ab.Packets+ab.DropsLoss != datagrams {
		t.Fatalf("%d written + %d dropped by the emulated loss != %d sent: %+v", ab.Packets, ab.DropsLoss, datagrams, ab)
	}
	if lost < lossRate*0.9 || lost > lossRate*1.1 {
		t.Fatalf("loss %.4f, want %.4f within ±10 %% relative", lost, lossRate)
	}
}
