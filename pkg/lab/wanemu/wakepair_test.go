package wanemu

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkWakePairUnderLoad: how often two real-time threads on the two
// CPUs wake over 0.3 ms late after the same deadline, alone and together,
// while a 100 Mbit/s TCP transfer runs through an emulated link. It says
// how much a second, redundant scheduler thread could hide: only the
// periods where one CPU is late and the other is not. Needs root.
//
//	go test -run '^$' -bench WakePairUnderLoad -benchtime 1x ./pkg/lab/wanemu/
func BenchmarkWakePairUnderLoad(b *testing.B) {
	nsA, nsB, _ := twoNodes(b, Params{DelayNs: 2e6, RateBps: 100e6, QueueBytes: 256 << 10}, Params{DelayNs: 2e6})
	var ln net.Listener
	if err := InNetns(nsB, func() (err error) { ln, err = net.Listen("tcp", "10.233.0.2:0"); return }); err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	for range b.N {
		stop := make(chan struct{})
		go func() {
			_ = InNetns(nsA, func() error {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					return err
				}
				defer c.Close()
				buf := make([]byte, 1<<20)
				for {
					select {
					case <-stop:
						return nil
					default:
					}
					if _, err := c.Write(buf); err != nil {
						return err
					}
				}
			})
		}()
		time.Sleep(500 * time.Millisecond) // past slow start
		st := MeasureWakePair(10*time.Second, 200_000, 300_000)
		close(stop)
		pct := func(n int) float64 { return 100 * float64(n) / float64(max(st.Periods, 1)) }
		b.ReportMetric(pct(st.LateA), "%late-cpu0")
		b.ReportMetric(pct(st.LateB), "%late-cpu1")
		b.ReportMetric(pct(st.Both), "%late-both")
		b.ReportMetric(float64(st.Periods), "periods")
	}
}
