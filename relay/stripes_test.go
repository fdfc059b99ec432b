package relay

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/route"
)

// stubLink is a link of a group: stripeGroups only holds it.
type stubLink struct {
	net.Conn
	remote net.Addr
}

func (l *stubLink) RemoteAddr() net.Addr { return l.remote }

// groupID is a distinct group id for each i.
func groupID(i int) (id [route.NonceBytes]byte) {
	id[0], id[1], id[2] = 0xa5, byte(i>>8), byte(i)
	return id
}

// A join for a group that has filled is refused while the group is
// remembered, rather than starting a pending group of its own that would
// hold a slot until the handshake timeout.
func TestStripeJoinForAssembledGroup(t *testing.T) {
	var gs stripeGroups
	peer := netip.MustParsePrefix("192.0.2.1/32")
	id := groupID(1)
	if _, err := gs.add(id, 0, 2, &stubLink{}, peer, time.Minute); err != nil {
		t.Fatal(err)
	}
	g, err := gs.add(id, 1, 2, &stubLink{}, peer, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.full:
	default:
		t.Fatal("the group did not fill with both its links")
	}
	for _, index := range []int{1, 0} { // a join, and the header's link
		if _, err := gs.add(id, index, 2, &stubLink{}, peer, time.Minute); !errors.Is(err, errStripesAssembled) {
			t.Fatalf("link %d for the assembled group: error %v, want %v", index, err, errStripesAssembled)
		}
	}
	if len(gs.groups) != 0 || len(gs.perPeer) != 0 {
		t.Fatalf("%d groups pending (%v by peer), want none", len(gs.groups), gs.perPeer)
	}
}

// Assembled groups are remembered for the handshake timeout after they
// filled, and at most maxAssembledStripes of them, the oldest forgotten
// first.
func TestStripeAssembledGroupsForgotten(t *testing.T) {
	var gs stripeGroups
	peer := netip.MustParsePrefix("192.0.2.1/32")
	fill := func(id [route.NonceBytes]byte, timeout time.Duration) {
		t.Helper()
		for index := range 2 {
			if _, err := gs.add(id, index, 2, &stubLink{}, peer, timeout); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Forgotten once its time is up: a join for it is a new group.
	fill(groupID(0), time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if _, err := gs.add(groupID(0), 1, 2, &stubLink{}, peer, time.Minute); err != nil {
		t.Fatalf("join after the group's time: %v, want a pending group", err)
	}
	if len(gs.assembled) != 0 || len(gs.assembledOrder) != 0 {
		t.Fatalf("%d groups remembered past their time", len(gs.assembled))
	}
	// At most maxAssembledStripes, the oldest forgotten first.
	for i := 1; i <= maxAssembledStripes+1; i++ {
		fill(groupID(i), time.Minute)
	}
	if len(gs.assembled) != maxAssembledStripes || len(gs.assembledOrder) != maxAssembledStripes {
		t.Fatalf("%d (%d) groups remembered, want %d", len(gs.assembled), len(gs.assembledOrder), maxAssembledStripes)
	}
	if _, err := gs.add(groupID(1), 1, 2, &stubLink{}, peer, time.Minute); err != nil {
		t.Fatalf("join for the oldest, forgotten: %v, want a pending group", err)
	}
	if _, err := gs.add(groupID(2), 1, 2, &stubLink{}, peer, time.Minute); !errors.Is(err, errStripesAssembled) {
		t.Fatalf("join for the oldest remembered: %v, want %v", err, errStripesAssembled)
	}
}

// One peer can hold at most maxPendingStripesPerPeer pending groups with
// lone joins; others still start theirs, and a group that fills or is
// given up frees its peer's place.
func TestStripePendingGroupsPerPeer(t *testing.T) {
	var gs stripeGroups
	a, b := netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::/64")
	var held []*stripeGroup
	for i := range maxPendingStripesPerPeer {
		g, err := gs.add(groupID(i), 1, 2, &stubLink{}, a, time.Minute)
		if err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		held = append(held, g)
	}
	next := groupID(maxPendingStripesPerPeer)
	if _, err := gs.add(next, 1, 2, &stubLink{}, a, time.Minute); !errors.Is(err, errStripesPeerFull) {
		t.Fatalf("one group over the peer's cap: error %v, want %v", err, errStripesPeerFull)
	}
	if _, err := gs.add(groupID(1000), 1, 2, &stubLink{}, b, time.Minute); err != nil {
		t.Fatalf("another peer's group: %v", err)
	}
	// One of a's groups fills: its place is free.
	if _, err := gs.add(groupID(0), 0, 2, &stubLink{}, b, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.add(next, 1, 2, &stubLink{}, a, time.Minute); err != nil {
		t.Fatalf("after one of the peer's groups filled: %v", err)
	}
	// One of a's groups is given up: its place is free.
	if _, ok := gs.wait(groupID(1), held[1], time.Millisecond); ok {
		t.Fatal("a lone join's group filled")
	}
	if _, err := gs.add(groupID(maxPendingStripesPerPeer+1), 1, 2, &stubLink{}, a, time.Minute); err != nil {
		t.Fatalf("after one of the peer's groups was given up: %v", err)
	}
	if got := gs.perPeer[a]; got != maxPendingStripesPerPeer {
		t.Fatalf("peer has %d pending groups, want %d", got, maxPendingStripesPerPeer)
	}
}

// A peer is its link's remote address: an IPv4 address, or an IPv6 /64.
func TestStripePeer(t *testing.T) {
	peer := func(addr string) netip.Prefix {
		return stripePeer(&stubLink{remote: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
	}
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:4000", "192.0.2.7/32"},
		{"[::ffff:192.0.2.7]:4000", "192.0.2.7/32"},
		{"[2001:db8:1:2:aaaa::1]:4000", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:4000", "fe80::/64"},
	} {
		if got := peer(tc.addr); got != netip.MustParsePrefix(tc.want) {
			t.Errorf("%s: peer %v, want %s", tc.addr, got, tc.want)
		}
	}
}
