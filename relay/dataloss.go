package relay

import (
	"net"
	"net/netip"
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
// The same is kept for every other host the relay sends to, by address:
// its clients (what a download's segment to the client loses, which only
// this relay, its sender, can see) and destinations (an upload's last
// segment). /v1/info tells an asker what was learnt of its own host.
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
	// lossHostsKept bounds the hosts other than relays remembered.
	lossHostsKept = 4096
)

type lossSample struct {
	at                 time.Time
	sentBytes, retrans uint64
}

// dataLoss is the record of what this relay sent and resent: to each peer
// relay by name, to other hosts by address.
type dataLoss struct {
	mu    sync.Mutex
	peers map[string][]lossSample     // by relay name, oldest first
	hosts map[netip.Addr][]lossSample // at most lossHostsKept, oldest first
}

// add records a tunnel's sends to the peer relay.
func (d *dataLoss) add(peer string, at time.Time, st tunnel.SocketStats) {
	if !st.Valid || st.SentBytes < lossMinTunnelBytes {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peers == nil {
		d.peers = map[string][]lossSample{}
	}
	d.peers[peer] = appendLoss(d.peers[peer], at, st)
}

// addHost records a tunnel's sends to host, not a relay of the fleet.
func (d *dataLoss) addHost(host netip.Addr, at time.Time, st tunnel.SocketStats) {
	if !st.Valid || st.SentBytes < lossMinTunnelBytes {
		return
	}
	host = host.Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = map[netip.Addr][]lossSample{}
	}
	if _, known := d.hosts[host]; !known && len(d.hosts) >= lossHostsKept {
		d.evictHost(at)
	}
	d.hosts[host] = appendLoss(d.hosts[host], at, st)
}

// appendLoss adds a tunnel's sample to s, dropping what is out of the
// window or over lossSamplesKept.
func appendLoss(s []lossSample, at time.Time, st tunnel.SocketStats) []lossSample {
	for len(s) > 0 && (at.Sub(s[0].at) > lossWindow || len(s) >= lossSamplesKept) {
		s = s[1:]
	}
	return append(s, lossSample{at: at, sentBytes: st.SentBytes, retrans: st.RetransmittedBytes})
}

// evictHost drops the hosts whose newest sample is out of the window, or,
// when none is, the one whose newest sample is the oldest. d.mu is held.
func (d *dataLoss) evictHost(now time.Time) {
	var oldest netip.Addr
	var oldestAt time.Time
	for h, s := range d.hosts {
		at := s[len(s)-1].at
		if now.Sub(at) > lossWindow {
			delete(d.hosts, h)
			continue
		}
		if oldestAt.IsZero() || at.Before(oldestAt) {
			oldest, oldestAt = h, at
		}
	}
	if len(d.hosts) >= lossHostsKept {
		delete(d.hosts, oldest)
	}
}

// estimate is the share of bytes sent to peer in the window before now
// that were sent again; ok false below lossMinSentBytes.
func (d *dataLoss) estimate(peer string, now time.Time) (loss float64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	loss, _, ok = lossOf(d.peers[peer], now)
	return loss, ok
}

// hostEstimate is estimate for a host other than a relay, and how long
// ago the newest tunnel that counts ended.
func (d *dataLoss) hostEstimate(host netip.Addr, now time.Time) (loss float64, age time.Duration, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return lossOf(d.hosts[host.Unmap()], now)
}

// lossOf is the share resent of what samples in the window before now
// sent, and the newest one's age; ok false below lossMinSentBytes.
func lossOf(samples []lossSample, now time.Time) (loss float64, age time.Duration, ok bool) {
	var sent, retrans uint64
	for _, s := range samples {
		if a := now.Sub(s.at); a <= lossWindow {
			sent, retrans = sent+s.sentBytes, retrans+s.retrans
			age = a // samples are oldest first
		}
	}
	if sent < lossMinSentBytes {
		return 0, 0, false
	}
	return float64(retrans) / float64(sent+retrans), age, true
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

// learnLoss records what c's socket sent and resent, when the tunnel sent
// enough to count: by relay name when c is a link to a peer relay of the
// fleet, else by c's remote host (a client, a destination).
func (s *Server) learnLoss(c net.Conn, st tunnel.SocketStats) {
	if !st.Valid || st.SentBytes < lossMinTunnelBytes {
		return
	}
	if s.measure != nil {
		if relays, err := s.measure.reg.Relays(s.ctx); err == nil {
			// peerOf names this relay for a client on its own host.
			if peer := peerOf(c, relays); peer != "" && peer != s.cfg.Name {
				s.loss.add(peer, time.Now(), st)
				return
			}
		}
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		s.loss.addHost(ap.Addr(), time.Now(), st)
	}
}
