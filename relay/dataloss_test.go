package relay

import (
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// The estimate is resent over sent bytes across the window's tunnels; none
// below 1 MiB sent, tunnels below 64 KiB do not count, old ones drop out;
// a pair's published loss is the estimate where there is one.
func TestDataLossEstimate(t *testing.T) {
	var d dataLoss
	now := time.Now()
	sent := func(n, re uint64) tunnel.SocketStats {
		return tunnel.SocketStats{Valid: true, SentBytes: n, RetransmittedBytes: re}
	}
	d.add("r2", now.Add(-lossWindow-time.Second), sent(8<<20, 8<<20)) // too old by now
	d.add("r2", now, sent(32<<10, 32<<10))                            // too small to count
	d.add("r2", now, sent(512<<10, 5000))
	if _, ok := d.estimate("r2", now); ok {
		t.Fatal("an estimate from 512 KiB")
	}
	d.add("r2", now, sent(512<<10, 5000))
	loss, ok := d.estimate("r2", now)
	if want := 10000.0 / (1<<20 + 10000); !ok || math.Abs(loss-want) > 1e-12 {
		t.Fatalf("estimate %v %v, want %v", loss, ok, want)
	}
	if _, ok := d.estimate("r3", now); ok {
		t.Fatal("an estimate for a peer nothing was sent to")
	}
	pairs := d.withLoss([]registry.Pair{{From: "r1", To: "r2", Loss: 0}, {From: "r1", To: "r3", Loss: 0.2}, {From: "r1", To: "r4", Loss: 1}}, now)
	if pairs[0].Loss != loss || pairs[1].Loss != 0.2 || pairs[2].Loss != 1 {
		t.Fatalf("published %+v", pairs)
	}
	if !pairs[0].LossLearnt || pairs[1].LossLearnt || pairs[2].LossLearnt {
		t.Fatalf("published %+v: want only r2's loss marked learnt", pairs)
	}
	if _, ok := d.estimate("r2", now.Add(lossWindow+time.Second)); ok {
		t.Fatal("an estimate from tunnels older than the window")
	}
}

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

// A link names its peer relay by relay address, or (a conn the peer
// opened) by host when only one relay of the fleet is there.
func TestPeerOf(t *testing.T) {
	relays := []registry.Relay{{Name: "r1", Relay: "10.0.0.1:7000"}, {Name: "r2", Relay: "10.0.0.2:7000"}, {Name: "r3", Relay: "10.0.0.2:7001"}, {Name: "r4"}}
	for _, tc := range []struct {
		remote string
		want   string
	}{
		{"10.0.0.1:7000", "r1"}, {"10.0.0.1:41234", "r1"}, {"10.0.0.2:7001", "r3"},
		{"10.0.0.2:41234", ""}, // r2 or r3
		{"10.0.0.9:7000", ""},
	} {
		c := addrConn{remote: net.TCPAddrFromAddrPort(mustAddrPort(t, tc.remote))}
		if got := peerOf(c, relays); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.remote, got, tc.want)
		}
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// Hosts other than relays (clients, destinations) are kept by address:
// an estimate each, the newest tunnel's age, at most lossHostsKept of
// them, the stalest evicted first.
func TestDataLossPerHost(t *testing.T) {
	var d dataLoss
	now := time.Now()
	client := netip.MustParseAddr("10.0.0.7")
	sent := tunnel.SocketStats{Valid: true, SentBytes: 1 << 20, RetransmittedBytes: 1 << 14}
	d.addHost(netip.MustParseAddr("::ffff:10.0.0.7"), now.Add(-time.Minute), sent)
	loss, age, ok := d.hostEstimate(client, now)
	if want := float64(1<<14) / float64(1<<20+1<<14); !ok || math.Abs(loss-want) > 1e-12 || age != time.Minute {
		t.Fatalf("client: %v %v %v, want %v a minute old", loss, age, ok, want)
	}
	if _, _, ok := d.hostEstimate(netip.MustParseAddr("10.0.0.8"), now); ok {
		t.Fatal("an estimate for a host nothing was sent to")
	}
	if _, ok := d.estimate("10.0.0.7", now); ok {
		t.Fatal("a host's sends counted for a relay")
	}
	for i := range lossHostsKept + 10 {
		d.addHost(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), now.Add(time.Duration(i)*time.Millisecond), sent)
	}
	if len(d.hosts) > lossHostsKept {
		t.Fatalf("%d hosts kept, want at most %d", len(d.hosts), lossHostsKept)
	}
	if _, _, ok := d.hostEstimate(client, now); ok {
		t.Fatal("the stalest host was kept over newer ones")
	}
}
