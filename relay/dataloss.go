package relay

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A relay learns each relay link's loss from the data it sent on it: when
// a tunnel ends, its sockets' TCP_INFO say how many bytes went out and how
// many of them went again (retransmitted). Probes cannot tell: a lost SYN
// is sent again after a second and the handshake succeeds late, so random
// loss of a few percent barely shows in them, while the planner's Mathis
// bound needs it. The published pair's loss is this estimate once enough
// data went to the peer in the last lossWindow; until then the probes'.
const (
	// lossWindow is how far back the tunnels count.
	lossWindow = 10 * time.Minute
	// lossMinSentBytes is how much must have gone to a peer in the window
	// for an estimate: 1 MiB is ~720 full segments, so at 1 % loss about
	// 7 retransmissions (±40 %, or ±20 % on the Mathis bound, which goes
	// with √loss); more data, a closer estimate.
	lossMinSentBytes = 1 << 20
	// lossMinTunnelBytes: tunnels that sent less are left out (requests,
	// handshakes: their losses are tail losses, not the link's rate).
	lossMinTunnelBytes = 64 << 10
	// lossSamplesKept bounds the tunnels remembered per peer.
	lossSamplesKept = 256
)

type lossSample struct {
	at                 time.Time
	sentBytes, retrans uint64
}

// dataLoss is the per-peer record of what this relay sent and resent.
type dataLoss struct {
	mu    sync.Mutex
	peers map[string][]lossSample // by relay name, oldest first
}

func (d *dataLoss) add(peer string, at time.Time, st tunnel.SocketStats) {
	if !st.Valid || st.SentBytes < lossMinTunnelBytes {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers == nil {
		d.peers = map[string][]lossSample{}
	}
	s := d.peers[peer]
	for len(s) > 0 && (at.Sub(s[0].at) > lossWindow || len(s) >= lossSamplesKept) {
		s = s[1:]
	}
	d.peers[peer] = append(s, lossSample{at: at, sentBytes: st.SentBytes, retrans: st.RetransmittedBytes})
}

// estimate is the share of bytes sent to peer in the window before now
// that were sent again; ok false below lossMinSentBytes.
func (d *dataLoss) estimate(peer string, now time.Time) (loss float64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var sent, retrans uint64
	for _, s := range d.peers[peer] {
		if now.Sub(s.at) <= lossWindow {
			sent, retrans = sent+s.sentBytes, retrans+s.retrans
		}
	}
	if sent < lossMinSentBytes {
		return 0, false
	}
	return float64(retrans) / float64(sent+retrans), true
}

// withLoss sets each pair's loss to the learned estimate where there is
// one. pairs are this relay's own (From is self).
func (d *dataLoss) withLoss(pairs []registry.Pair, now time.Time) []registry.Pair {
	for i := range pairs {
		if loss, ok := d.estimate(pairs[i].To, now); ok && pairs[i].Loss < 1 {
			pairs[i].Loss, pairs[i].LossLearnt = loss, true
		}
	}
	return pairs
}

// peerOf names the relay at the other end of c: the relay whose relay
// address is c's remote address, or (a conn a peer opened, from an
// ephemeral port) the only relay on that host. "" when none or several.
func peerOf(c net.Conn, relays []registry.Relay) string {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	byHost, several := "", false
	for _, r := range relays {
		host, port, err := net.SplitHostPort(r.Relay)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); ip == nil || !ip.Equal(ra.IP) {
			continue
		}
		if port == strconv.Itoa(ra.Port) {
			return r.Name
		}
		several = several || byHost != ""
		byHost = r.Name
	}
	if several {
		return ""
	}
	return byHost
}

// learnLoss records what c's socket sent and resent, when c is a link to a
// peer relay of the fleet and the tunnel sent enough to count.
func (s *Server) learnLoss(c net.Conn, st tunnel.SocketStats) {
	if s.measure == nil || !st.Valid || st.SentBytes < lossMinTunnelBytes {
		return
	}
	relays, err := s.measure.reg.Relays(s.ctx)
	if err != nil {
		return
	}
	if peer := peerOf(c, relays); peer != "" && peer != s.cfg.Name {
		s.loss.add(peer, time.Now(), st)
	}
}
