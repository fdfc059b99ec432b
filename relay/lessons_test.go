package relay

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A tunnel's lessons teach what it sent since the last one that counted:
// a lesson too small to count goes with the next, a reading of a socket
// closed under a lesson changes nothing, and the lessons and the end
// together teach what the tunnel sent in all, once.
func TestLessonsTeachEachByteOnce(t *testing.T) {
	client := netip.MustParseAddr("10.0.0.1")
	run := &tunnelRun{s: &Server{},
		client: addrConn{remote: &net.TCPAddr{IP: client.AsSlice(), Port: 1234}},
		up:     addrConn{remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 80}}}
	sent := func(sentBytes, resentBytes uint64) tunnel.SocketStats {
		return tunnel.SocketStats{Valid: true, SentBytes: sentBytes, RetransmittedBytes: resentBytes}
	}
	loss := func() (float64, bool) {
		s := run.s.learnt.SentTo(client, time.Now())
		return s.Loss, s.LossOK
	}
	const kib, mib = 1 << 10, 1 << 20
	steps := []struct {
		what    string
		reading tunnel.SocketStats
		// what the tunnel sent in all so far, if the record has it
		sentBytes, resentBytes uint64
		ok                     bool
	}{
		{"32 KiB: too little to count", sent(32*kib, 0), 0, 0, false},
		{"2 MiB: counts, with the 32 KiB before", sent(2*mib, 20*kib), 2 * mib, 20 * kib, true},
		{"a socket closed under the lesson", tunnel.SocketStats{}, 2 * mib, 20 * kib, true},
		{"3 MiB: the third MiB added", sent(3*mib, 30*kib), 3 * mib, 30 * kib, true},
		{"the end, at 4 MiB", sent(4*mib, 40*kib), 4 * mib, 40 * kib, true},
	}
	for _, st := range steps {
		run.teachLocked(st.reading, nil, tunnel.SocketStats{}, nil)
		got, ok := loss()
		want := float64(st.resentBytes) / float64(st.sentBytes+st.resentBytes)
		if ok != st.ok || (ok && got != want) {
			t.Fatalf("%s: learnt loss %v (ok %v), want %v (ok %v)", st.what, got, ok, want, st.ok)
		}
	}

	// A striped stream's links: each link's bytes since the last lesson.
	striped := &tunnelRun{s: &Server{}, client: run.client, up: run.up}
	striped.teachLocked(tunnel.SocketStats{}, []tunnel.SocketStats{sent(mib, 10*kib), sent(mib, 0)}, tunnel.SocketStats{}, nil)
	striped.teachLocked(tunnel.SocketStats{}, []tunnel.SocketStats{sent(2*mib, 10*kib), sent(3*mib, 30*kib)}, tunnel.SocketStats{}, nil)
	s := striped.s.learnt.SentTo(client, time.Now())
	if want := float64(40*kib) / float64(5*mib+40*kib); !s.LossOK || s.Loss != want {
		t.Fatalf("striped: learnt loss %v (ok %v), want %v", s.Loss, s.LossOK, want)
	}
}
