package survey

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/relaymesh/relaymesh/pkg/learnt"
	"github.com/relaymesh/relaymesh/planner"
)

// OwnSends is what this host learnt of its own sends from the traffic it
// carried, by the remote host's address: a learnt.Record, relayctl
// connect's (its sockets to the first relay of its chains, and to the
// destinations it reaches directly). Relays tell this host what they
// learnt of their sends to it (/v1/info, applyLearnt); only this host
// sees its own: an upload's first segment, a direct upload, and the
// window a destination advertises to it.
type OwnSends interface {
	SentTo(host netip.Addr, now time.Time) learnt.Sent
}

// OwnWindow is the destination's window a survey took from this host's
// own sends to it (Survey.Own), bytes, and how old it was, seconds.
type OwnWindow struct {
	Bytes  int64
	AgeSec float64
}

// applyOwn puts what this host learnt of its own sends (s.Own) on res's
// matrix: on each pair between this host and a relay or the destination,
// this host's side gets the rate its sends sustained (with its age, from
// tunnels) where none newer is known, and the share of its bytes sent
// again, which the pair's loss (the higher of the two ways) then covers,
// marked learnt from tunnels; the destination's node, whose window the
// survey did not know, the largest window it advertised to this host's
// sends, with a note (res.OwnDstWindow).
func (s *Survey) applyOwn(ctx context.Context, res *Result) {
	if s.Own == nil {
		return
	}
	now := s.now()
	hosts := map[string][]netip.Addr{} // by host:port, resolved once
	sentTo := func(name string) (learnt.Sent, bool) {
		addr := res.Target.Addr
		if name != res.Target.Name {
			r, ok := res.Relays[name]
			if !ok {
				return learnt.Sent{}, false
			}
			addr = r.Relay // what a chain's first hop dials
		}
		if _, ok := hosts[addr]; !ok {
			hosts[addr] = s.resolve(ctx, addr)
		}
		for _, h := range hosts[addr] {
			if sent := s.Own.SentTo(h, now); sent.RateBps > 0 || sent.LossOK || sent.WindowBytes > 0 {
				return sent, true
			}
		}
		return learnt.Sent{}, false
	}
	m := res.Matrix
	for i := range m.Pairs {
		p := &m.Pairs[i]
		switch {
		case p.A == ClientNode:
			if sent, ok := sentTo(p.B); ok {
				applyOwnSend(p.Loss < 1, sent, &p.Loss, &p.ASendBps, &p.ASendAgeSec, &p.ASendSource, &p.ALossSource)
			}
		case p.B == ClientNode:
			if sent, ok := sentTo(p.A); ok {
				applyOwnSend(p.Loss < 1, sent, &p.Loss, &p.BSendBps, &p.BSendAgeSec, &p.BSendSource, &p.BLossSource)
			}
		}
	}
	sent, ok := sentTo(res.Target.Name)
	if !ok || sent.WindowBytes <= 0 {
		return
	}
	for i := range m.Nodes {
		if n := &m.Nodes[i]; n.Name == res.Target.Name && n.WindowBytes == 0 {
			n.WindowBytes = sent.WindowBytes
			res.OwnDstWindow = &OwnWindow{Bytes: sent.WindowBytes, AgeSec: sent.WindowAge.Seconds()}
			res.Notes = append(res.Notes, fmt.Sprintf("%s advertised a %d-byte window to this host's sends (learnt from relayctl connect's traffic, %s ago): the plan takes it as the destination's window",
				res.Target.Addr, sent.WindowBytes, sent.WindowAge.Round(time.Second)))
		}
	}
}

// applyOwnSend sets one side of a pair, this host's, to what its sends
// taught: the rate where the pair has none or an older one, and the loss,
// raising the pair's (usable: the pair is not unreachable), never
// lowering it.
func applyOwnSend(usable bool, sent learnt.Sent, loss, sendBps, sendAgeSec *float64, sendSource, lossSource *string) {
	if age := sent.RateAge.Seconds(); sent.RateBps > 0 && (*sendBps <= 0 || age < *sendAgeSec) {
		*sendBps, *sendAgeSec, *sendSource = sent.RateBps, age, planner.LearntFromTunnels
	}
	if sent.LossOK && usable {
		*loss, *lossSource = max(*loss, sent.Loss), planner.LearntFromTunnels
	}
}

// resolve is the addresses of hostport's host: the literal, or what the
// resolver answers within the survey's timeout (none on failure).
func (s *Survey) resolve(ctx context.Context, hostport string) []netip.Addr {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs
}
