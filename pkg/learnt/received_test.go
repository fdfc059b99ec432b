package learnt

import (
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A tunnel's rate from its destination counts in intervals where the relay
// forwarded everything as it came (its onward socket app-limited) and
// data arrived; the best run of three stands, and only a tunnel that
// received a MiB is kept.
func TestReceivedRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	feed := func(mbs []float64, appLimited []bool) *Inflow {
		w := &Inflow{prevAt: t0}
		var recv uint64
		for i, mb := range mbs {
			recv += uint64(mb * 1e6)
			w.add(tunnel.SocketStats{Valid: true, ReceivedBytes: recv}, tunnel.SocketStats{Valid: true, AppLimited: appLimited[i]},
				t0.Add(time.Duration(i+1)*rateSampleEvery))
		}
		return w
	}
	yes := []bool{true, true, true, true}
	if w := feed([]float64{1, 1.1, 1.2, 0.1}, yes); w.bestBps != 16e6 {
		t.Errorf("forwarded as it came: best %v bits/s, want 16e6", w.bestBps)
	}
	if w := feed([]float64{1, 1, 1, 1}, []bool{true, false, true, true}); w.bestBps != 0 {
		t.Errorf("held onward in one interval of four: best %v bits/s, want none", w.bestBps)
	}
	if w := feed([]float64{1, 0, 1, 1}, yes); w.bestBps != 0 {
		t.Errorf("nothing arrived in one interval: best %v bits/s, want none", w.bestBps)
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
