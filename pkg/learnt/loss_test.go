package learnt

import (
	"math"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

func sent(n, re uint64) tunnel.SocketStats {
	return tunnel.SocketStats{Valid: true, SentBytes: n, RetransmittedBytes: re}
}

// The estimate is resent over sent bytes across the window's tunnels; none
// below 1 MiB sent, tunnels below 64 KiB do not count, old ones drop out.
func TestLossEstimate(t *testing.T) {
	var d Loss[string]
	now := time.Now()
	d.Add("r2", now.Add(-lossWindow-time.Second), sent(8<<20, 8<<20)) // too old by now
	d.Add("r2", now, sent(32<<10, 32<<10))                            // too small to count
	d.Add("r2", now, sent(512<<10, 5000))
	if _, _, ok := d.Estimate("r2", now); ok {
		t.Fatal("an estimate from 512 KiB")
	}
	d.Add("r2", now, sent(512<<10, 5000))
	loss, age, ok := d.Estimate("r2", now)
	if want := 10000.0 / (1<<20 + 10000); !ok || math.Abs(loss-want) > 1e-12 || age != 0 {
		t.Fatalf("estimate %v %v %v, want %v just now", loss, age, ok, want)
	}
	if _, _, ok := d.Estimate("r3", now); ok {
		t.Fatal("an estimate for a peer nothing was sent to")
	}
	if _, _, ok := d.Estimate("r2", now.Add(lossWindow+time.Second)); ok {
		t.Fatal("an estimate from tunnels older than the window")
	}
}

// A Record keeps hosts by address: an estimate each, the newest tunnel's
// age, at most lossHostsKept of them, the stalest evicted first.
func TestLossPerHost(t *testing.T) {
	var r Record
	now := time.Now()
	client := netip.MustParseAddr("10.0.0.7")
	st := sent(1<<20, 1<<14)
	r.AddLoss(netip.MustParseAddr("::ffff:10.0.0.7"), now.Add(-time.Minute), st)
	got := r.SentTo(client, now)
	if want := float64(1<<14) / float64(1<<20+1<<14); !got.LossOK || math.Abs(got.Loss-want) > 1e-12 || got.LossAge != time.Minute {
		t.Fatalf("client: %+v, want loss %v a minute old", got, want)
	}
	if r.SentTo(netip.MustParseAddr("10.0.0.8"), now).LossOK {
		t.Fatal("an estimate for a host nothing was sent to")
	}
	for i := range lossHostsKept + 10 {
		r.AddLoss(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), now.Add(time.Duration(i)*time.Millisecond), st)
	}
	if n := r.loss.keys(); n > lossHostsKept {
		t.Fatalf("%d hosts kept, want at most %d", n, lossHostsKept)
	}
	if r.SentTo(client, now).LossOK {
		t.Fatal("the stalest host was kept over newer ones")
	}
	// Loss by name (relayd's peers) keeps any number of keys.
	var peers Loss[string]
	for i := range lossHostsKept + 10 {
		peers.Add(strconv.Itoa(i), now, st)
	}
	if n := peers.keys(); n != lossHostsKept+10 {
		t.Fatalf("%d peers kept, want all %d", n, lossHostsKept+10)
	}
}
