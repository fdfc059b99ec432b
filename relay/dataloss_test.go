package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A pair's published loss is the estimate by the peer's name where there
// is one (a learnt 0 too), marked learnt; a pair the probes found
// unreachable stays so.
func TestWithLoss(t *testing.T) {
	var peers learnt.Loss[string]
	now := time.Now()
	peers.Add("r2", now, tunnel.SocketStats{Valid: true, SentBytes: 1 << 20, RetransmittedBytes: 10000})
	peers.Add("r4", now, tunnel.SocketStats{Valid: true, SentBytes: 1 << 20})
	loss, _, ok := peers.Estimate("r2", now)
	if !ok || loss <= 0 {
		t.Fatalf("estimate %v %v", loss, ok)
	}
	pairs := withLoss([]registry.Pair{{From: "r1", To: "r2", Loss: 0}, {From: "r1", To: "r3", Loss: 0.2}, {From: "r1", To: "r4", Loss: 1}}, &peers, now)
	if pairs[0].Loss != loss || pairs[1].Loss != 0.2 || pairs[2].Loss != 1 {
		t.Fatalf("published %+v", pairs)
	}
	if !pairs[0].LossLearnt || pairs[1].LossLearnt || pairs[2].LossLearnt {
		t.Fatalf("published %+v: want only r2's loss marked learnt", pairs)
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
