package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/udpask"
)

// maxUDPAsks bounds the asks over UDP being answered at once: each makes up
// to probe.MaxTargets handshakes at a time, as a /v1/probe request does. An
// ask beyond is dropped unanswered (the asker falls back to HTTPS).
const maxUDPAsks = 64

// maxUDPNonces bounds the nonces remembered against replays: a planner
// asking a few hundred relays a plan sends each one or two asks, so this is
// hundreds of plans within udpask.Window.
const maxUDPNonces = 1 << 16

// udpAsks answers probe asks on the admin port's number over UDP
// (pkg/udpask; docs/security.md, "Probe asks over UDP").
type udpAsks struct {
	s       *Server
	conn    net.PacketConn
	key     udpask.Key
	replays *udpask.Replays
	sem     chan struct{}
	wg      sync.WaitGroup
}

// listenUDPAsks opens the UDP socket beside the admin listener, when
// admin_udp allows it and the relay has what its key needs; nil otherwise
// (logged when the socket could not be opened: the relay runs on, and its
// askers use HTTPS).
func (s *Server) listenUDPAsks() *udpAsks {
	key := s.askKey()
	if s.adminLn == nil || key == nil || (s.cfg.AdminUDP != nil && !*s.cfg.AdminUDP) {
		return nil
	}
	conn, err := net.ListenPacket("udp", s.adminLn.Addr().String())
	if err != nil {
		s.log.Warn("admin_udp: cannot listen; planners ask this relay over HTTPS only", zap.String("addr", s.adminLn.Addr().String()), zap.Error(err))
		return nil
	}
	return &udpAsks{s: s, conn: conn, key: *key, replays: udpask.NewReplays(maxUDPNonces), sem: make(chan struct{}, maxUDPAsks)}
}

// askKey is the fleet's key for probe asks over UDP: with transport tls,
// from the fleet secret and the admin token; nil without them.
func (s *Server) askKey() *udpask.Key {
	if s.link == nil || s.cfg.AdminToken == "" {
		return nil
	}
	key, err := udpask.DeriveKey(string(s.secret), s.cfg.AdminToken)
	if err != nil {
		return nil
	}
	return &key
}

// serve reads asks until the socket is closed, then waits for the asks in
// flight.
func (u *udpAsks) serve() {
	defer u.wg.Wait()
	buf := make([]byte, udpask.MaxDatagram+1)
	for {
		n, from, err := u.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		u.handle(buf[:n], from)
	}
}

// info is the relay's /v1/info for an ask with udpask.FlagInfo, as it
// would answer the ask's sender (nil without the flag); the reply carries
// its planner's fields.
func (u *udpAsks) info(a udpask.Ask, from net.Addr) *adminapi.Info {
	if a.Flags&udpask.FlagInfo == 0 {
		return nil
	}
	var host netip.Addr
	if ua, ok := from.(*net.UDPAddr); ok {
		if h, ok := netip.AddrFromSlice(ua.IP); ok {
			host = h.Unmap()
		}
	}
	return new(u.s.info(host))
}

// refuse counts an ask dropped unanswered and logs it, sampled.
func (u *udpAsks) refuse(result string, from net.Addr, err error) {
	u.s.metrics.udpAsks.WithLabelValues(result).Inc()
	if n, ok := u.s.refusals.allow("udp_ask_" + result); ok {
		u.s.log.Named("admin").Warn("probe ask over UDP dropped", zap.String("result", result), zap.String("from", from.String()),
			zap.Error(err), zap.Int("not_logged_since_last", n))
	}
}

// handle answers one datagram: nothing unless it is a valid ask for this
// relay, fresh, within /v1/probe's limits and a free slot; then an
// acknowledgement at once and the reply once the handshakes are done.
// Together, with the second datagram's headers, they are no larger than
// the ask (udpask.AnswerBytes).
func (u *udpAsks) handle(b []byte, from net.Addr) {
	a, err := u.key.OpenAsk(b)
	if err != nil {
		u.refuse("bad", from, err)
		return
	}
	// Before its nonce is recorded: every relay keeps its own nonces, so
	// an ask answered by whichever relay it reached would be answered by
	// each one of them once, replayed by anyone on its path.
	if a.Relay != u.s.cfg.Name {
		u.refuse("misdirected", from, fmt.Errorf("an ask for relay %q, this is %q", a.Relay, u.s.cfg.Name))
		return
	}
	if err := u.replays.Admit(a, time.Now()); err != nil {
		result := "stale"
		switch {
		case errors.Is(err, udpask.ErrReplay):
			result = "replay"
		case errors.Is(err, udpask.ErrBusy):
			result = "busy"
		}
		u.refuse(result, from, err)
		return
	}
	if len(a.Targets) > probe.MaxTargets || a.Handshakes > maxProbeCount || a.TimeoutMs > maxProbeTimeoutMs {
		u.refuse("limits", from, errors.New("over /v1/probe's limits"))
		return
	}
	// budget is what this relay may send back, payload bytes: the ask's
	// size, less the headers of the one datagram more than it was sent.
	// OpenAsk refuses an ask too short for its answers; this check holds
	// whatever the codec does.
	budget := len(b) - udpask.DatagramHeaderBytes
	ack := u.key.SealAck(a.Nonce)
	if udpask.AnswerBytes(len(a.Targets), a.Flags)-udpask.DatagramHeaderBytes > budget {
		u.refuse("bad", from, errors.New("an ask smaller than its answers"))
		return
	}
	select {
	case u.sem <- struct{}{}:
	default:
		u.refuse("busy", from, errors.New("too many asks at once"))
		return
	}
	_, _ = u.conn.WriteTo(ack, from)
	budget -= len(ack)
	u.wg.Go(func() {
		defer func() { <-u.sem }()
		rtts := make([]time.Duration, len(a.Targets))
		recv := make([]udpask.Learnt, len(a.Targets))
		timeout := time.Duration(a.TimeoutMs) * time.Millisecond
		var wg sync.WaitGroup
		for i, t := range a.Targets {
			wg.Go(func() {
				rtts[i] = -1
				res, _ := u.s.probeTarget(u.s.ctx, t, a.Handshakes, 0, timeout)
				if res.Summary != nil && res.Summary.Reachable() {
					rtts[i] = time.Duration(res.Summary.MedianMs * float64(time.Millisecond))
					recv[i] = udpask.Learnt{Bps: res.Summary.LearntRecvBps, AgeSec: res.Summary.LearntRecvAgeSec}
				}
			})
		}
		wg.Wait()
		reply := u.key.SealReply(udpask.Reply{Nonce: a.Nonce, RTTs: rtts, Recv: recv, Info: u.info(a, from)})
		if len(reply) > budget {
			return // never: the ask was checked for this reply's size above
		}
		u.s.metrics.udpAsks.WithLabelValues("answered").Inc()
		_, _ = u.conn.WriteTo(reply, from)
	})
}
