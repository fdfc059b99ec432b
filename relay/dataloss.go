package relay

import (
	"net"
	"strconv"
	"time"

	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A relay learns each relay link's loss from the data it sent on it
// (pkg/learnt: bytes resent over bytes sent, once enough went). The
// published pair's loss is that estimate, by peer relay name, once there
// is one; until then the probes'. The same is kept for every other host
// the relay sends to, by address (learnt.Record): its clients (what a
// download's segment to the client loses, which only this relay, its
// sender, can see) and destinations (an upload's last segment). /v1/info
// tells an asker what was learnt of its own host.

// withLoss sets each pair's loss to the estimate peers (by relay name)
// hold where there is one. pairs are this relay's own (From is self).
func withLoss(pairs []registry.Pair, peers *learnt.Loss[string], now time.Time) []registry.Pair {
	for i := range pairs {
		if loss, _, ok := peers.Estimate(pairs[i].To, now); ok && pairs[i].Loss < 1 {
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

// learnWindows records the window c's remote host advertised to c's
// socket, by host, once its tunnel ended (st, its last reading; w, its
// watch, nil when not watched; links, for a striped stream, its links'
// last readings, st then none: each link is a TCP connection to that host
// with a window of its own, so each counts as one).
func (s *Server) learnWindows(c net.Conn, w *learnt.Socket, st tunnel.SocketStats, links []tunnel.SocketStats) {
	host, ok := learnt.HostOf(c)
	if !ok {
		return
	}
	if links == nil {
		links = []tunnel.SocketStats{st}
	}
	for _, l := range links {
		s.learnt.AddWindow(host, time.Now(), l, w)
	}
}

// learnLoss records what c's socket sent and resent (st; links, for a
// striped stream, its links', which together are what it sent), when it
// sent enough to count: by relay name when c is a link to a peer relay of
// the fleet, else by c's remote host (a client, a destination; relayctl
// connect: the first relay of a chain too). A tunnel teaches what it sent
// since its last lesson that counted (lessons.go), and the rest when it
// ends. It reports whether st counted.
func (s *Server) learnLoss(c net.Conn, st tunnel.SocketStats, links []tunnel.SocketStats) (counted bool) {
	if links != nil {
		st = sentOver(links)
	}
	if !learnt.Counts(st) {
		return false
	}
	if s.measure != nil {
		if relays, err := s.measure.reg.Relays(s.ctx); err == nil {
			// peerOf names this relay for a client on its own host.
			if peer := peerOf(c, relays); peer != "" && peer != s.cfg.Name {
				s.peerLoss.Add(peer, time.Now(), st)
				return true
			}
		}
	}
	if host, ok := learnt.HostOf(c); ok {
		s.learnt.AddLoss(host, time.Now(), st)
	}
	return true
}

// Learnt is what this server's sockets taught of the hosts they sent to:
// relayctl connect's surveys read its own sends from it (survey.Survey.Own).
func (s *Server) Learnt() *learnt.Record { return &s.learnt }

// sentOver is what links sent and resent together, as one socket's
// reading for the loss learnt; not Valid unless every link's reading is.
func sentOver(links []tunnel.SocketStats) tunnel.SocketStats {
	sum := tunnel.SocketStats{Valid: len(links) > 0}
	for _, l := range links {
		sum.Valid = sum.Valid && l.Valid
		sum.SentBytes += l.SentBytes
		sum.RetransmittedBytes += l.RetransmittedBytes
	}
	return sum
}
