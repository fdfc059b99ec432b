package learnt

import (
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A host's window is the largest it advertised in the last hour to a
// socket that sent at least WindowMinSentBytes, the larger of the
// socket's last reading and its watch's; sockets that sent less teach
// nothing, and the age is that of the newest tunnel that saw the largest.
func TestWindowLearnt(t *testing.T) {
	var r Record
	now := time.Unix(50000, 0)
	dst := netip.MustParseAddr("192.0.2.9")
	st := func(sentBytes uint64, windowBytes uint32) tunnel.SocketStats {
		return tunnel.SocketStats{Valid: true, SentBytes: sentBytes, PeerWindowBytes: windowBytes}
	}
	r.AddWindow(dst, now, st(WindowMinSentBytes-1, 8<<20), nil)
	if got := r.SentTo(dst, now); got.WindowBytes != 0 {
		t.Fatalf("a window from a socket that sent too little: %+v", got)
	}
	r.AddWindow(dst, now.Add(-windowKeep-time.Second), st(64<<20, 6<<20), nil) // too old by now
	r.AddWindow(dst, now.Add(-3*time.Minute), st(16<<20, 1<<20), nil)
	r.AddWindow(netip.MustParseAddr("::ffff:192.0.2.9"), now.Add(-2*time.Minute), st(16<<20, 2<<20), nil)
	r.AddWindow(dst, now.Add(-time.Minute), st(5<<20, 256<<10), nil) // a smaller one later: the largest stands
	if got := r.SentTo(dst, now); got.WindowBytes != 2<<20 || got.WindowAge != 2*time.Minute {
		t.Fatalf("window %d, %v ago; want %d, 2m0s ago", got.WindowBytes, got.WindowAge, 2<<20)
	}
	// The watch saw a larger window than the last reading.
	w := &Socket{peerWindowBytes: 3 << 20}
	r.AddWindow(dst, now, st(16<<20, 1<<20), w)
	if got := r.SentTo(dst, now); got.WindowBytes != 3<<20 || got.WindowAge != 0 {
		t.Fatalf("window %d, %v ago; want the watch's %d, just now", got.WindowBytes, got.WindowAge, 3<<20)
	}
	if got := r.SentTo(netip.MustParseAddr("192.0.2.10"), now); got.WindowBytes != 0 {
		t.Fatalf("a window for a host nothing was sent to: %+v", got)
	}
}

func TestWindowHostsBounded(t *testing.T) {
	var r Record
	now := time.Unix(50000, 0)
	st := tunnel.SocketStats{Valid: true, SentBytes: WindowMinSentBytes, PeerWindowBytes: 1 << 20}
	for i := range windowHostsKept + 10 {
		r.AddWindow(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), now.Add(time.Duration(i)*time.Millisecond), st, nil)
	}
	if n := r.windows.s.len(); n > windowHostsKept {
		t.Fatalf("%d hosts kept, want at most %d", n, windowHostsKept)
	}
	if r.SentTo(netip.AddrFrom4([4]byte{10, 2, 0, 0}), now).WindowBytes != 0 {
		t.Fatal("the stalest host was kept over newer ones")
	}
}
