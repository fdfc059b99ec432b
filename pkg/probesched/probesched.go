// Package probesched decides how a shortlist plan's probe requests
// travel, round by round: over UDP (one datagram, pkg/udpask) or over
// HTTPS (the relay's admin API), on which connection, which of this
// host's probes an ask's acknowledgement answers, and when an answer over
// UDP is overdue and what is asked again then. The survey's prober (real
// sockets) and the simulator's (a modelled clock) both drive a
// Scheduler, so that each of these decisions is made in one place; each
// keeps its own I/O or model, and tells the Scheduler what the plan has
// learnt (acknowledgements, RTTs, replies).
//
// It is pure: no I/O, no clock. Times are given to it as durations, and
// it is not safe for concurrent use (its caller serialises, as the
// survey's prober does under its lock).
package probesched

import "time"

// Link is what a plan has of an HTTPS connection to a relay's admin
// API, as its prober knows it when it routes a request.
type Link int

const (
	// LinkNone: no HTTPS connection to the relay is up or opening (none
	// of the plan's requests has gone to it, or it has only been asked
	// over UDP, once UDP was proven).
	LinkNone Link = iota
	// LinkReading: a read of the relay's windows is opening the
	// connection now (the survey's background read; the simulator opens
	// a connection at once, so it never has a relay in this state).
	LinkReading
	// LinkUp: a connection is up or opening, and a request to the relay
	// goes over it (or over a second one beside a request in flight).
	LinkUp
)

// Route is how one request to a relay travels.
type Route int

const (
	// HTTPSNew: over HTTPS, on a connection this request opens (two round
	// trips over TLS before the request's own, one with TCP Fast Open).
	HTTPSNew Route = iota
	// HTTPSKept: over the HTTPS connection the plan has to the relay.
	HTTPSKept
	// HTTPSSecond: over a second HTTPS connection, beside the round's
	// first request to the relay, which holds the first.
	HTTPSSecond
	// UDPOpening: in one datagram, while the HTTPS connection opens beside
	// it and the relay's windows are read over that (UDP is not proven
	// yet: a relay whose acknowledgement has not come once the read has
	// answered is asked over the connection).
	UDPOpening
	// UDPBesideRead: in one datagram, beside a read of the relay's
	// windows that is opening the connection already (LinkReading); as
	// UDPOpening otherwise.
	UDPBesideRead
	// UDPAlone: in one datagram alone (UDP is proven); the relay's
	// windows come with its first reply.
	UDPAlone
)

// UDP says whether r is an ask over UDP. Such an ask holds its slot
// until it is acknowledged (and the read beside it, if any, has
// answered), not while the relay makes its handshakes.
func (r Route) UDP() bool {
	return r == UDPOpening || r == UDPBesideRead || r == UDPAlone
}

// Opens says whether a request routed r opens an HTTPS connection to its
// relay, beside it (UDPOpening) or for it (HTTPSNew).
func (r Route) Opens() bool {
	return r == UDPOpening || r == HTTPSNew
}

// AckAwaitsRead says whether an ask routed r waits for its
// acknowledgement until the read beside it has answered (the connection
// it opens takes three round trips, the acknowledgement one), rather than
// for AckWait.
func (r Route) AckAwaitsRead() bool {
	return r == UDPOpening || r == UDPBesideRead
}

// AgainOverUDP says whether an ask routed r that went unanswered is
// asked again over UDP (in a new datagram) beside its request over
// HTTPS, the first answer of them counting: acked, its reply is overdue
// (ReplyWait); not, its acknowledgement is. An ask beside a read is asked
// over the connection the read opened alone: its datagrams are not
// getting through (a filtered port, say).
func (r Route) AgainOverUDP(acked bool) bool {
	return acked || r == UDPAlone
}

// Scheduler holds what one plan has learnt that sets how its requests
// travel and how long their answers are waited for. A plan has one;
// another plan (a replan too) starts with a new one.
type Scheduler struct {
	udp bool // relays may be asked over UDP (relayctl plan --udp-ask)
	// proven: an ask of the plan has been acknowledged, so UDP gets
	// through from here. Until then every ask opens the HTTPS connection
	// beside it.
	proven bool
	// maxAck is the plan's slowest acknowledgement, a round trip;
	// maxReply its slowest reply after its acknowledgement.
	maxAck, maxReply time.Duration
	// rtt is this host's RTT to each relay as the plan has seen it: an
	// acknowledgement's round trip, or this host's probe of it.
	rtt map[string]time.Duration
	// rounds counts the plan's rounds with a request (Round.Index).
	rounds int
}

// New is a plan's Scheduler; udp: relays may be asked over UDP.
func New(udp bool) *Scheduler {
	return &Scheduler{udp: udp, rtt: map[string]time.Duration{}}
}

// UDP says whether the plan asks relays over UDP at all.
func (s *Scheduler) UDP() bool { return s.udp }

// Proven says whether an ask of the plan has been acknowledged.
func (s *Scheduler) Proven() bool { return s.proven }

// Round routes one round's requests, in their order
// (shortlist.Requests'): asked are the relays with a request of their own
// in it, requests how many requests it has (this host's too). It keeps
// which relays it has routed a request to, and whether each one's first
// went over UDP. A round of no request is not one of the plan's rounds
// (Index): nothing was asked, nothing is waited for.
func (s *Scheduler) Round(asked []string, requests int) *Round {
	r := &Round{s: s, index: s.rounds, asked: map[string]bool{}, firstUDP: map[string]bool{}}
	for _, relay := range asked {
		r.asked[relay] = true
	}
	if requests > 0 {
		s.rounds++
	}
	return r
}

// Index is the round's place among the plan's rounds that made requests,
// from 0 (the landmarks'): what sets the share of its requests it waits
// for (shortlist.Config.RoundNeedsAt).
func (r *Round) Index() int { return r.index }

// Round is one round's routing (Scheduler.Round).
type Round struct {
	s     *Scheduler
	index int             // Index
	asked map[string]bool // relays with a request of their own in the round
	// firstUDP: whether each relay routed so far had its first request of
	// the round go over UDP (absent: none routed yet).
	firstUDP map[string]bool
}

// Route is how the round's next request to relay travels, given the
// plan's link to it (as its prober knows it now: a request routed before
// may have changed it). Before UDP is proven a relay's first ask opens
// the HTTPS connection beside it; after, asks go alone to every relay the
// plan has no HTTPS connection to. A relay with a connection is asked
// over it: a second request of the round, in flight beside the first,
// opens another.
func (r *Round) Route(relay string, link Link) Route {
	udp, second := r.firstUDP[relay]
	route := r.s.route(link, second)
	if !second {
		udp = route.UDP()
	}
	r.firstUDP[relay] = udp
	return route
}

// route is Round.Route's rule; second: a request to the relay was routed
// before in the round.
func (s *Scheduler) route(link Link, second bool) Route {
	switch {
	case s.udp && !s.proven && link == LinkNone && !second:
		return UDPOpening
	case s.udp && !s.proven && link == LinkReading:
		return UDPBesideRead
	case s.udp && s.proven && link == LinkNone:
		return UDPAlone
	case second:
		return HTTPSSecond
	case link != LinkNone:
		return HTTPSKept
	}
	return HTTPSNew
}

// OpensBeside says whether this host's probe of relay opens the HTTPS
// connection to it beside the probe (and reads its windows over it): the
// plan has no link to it, the relay has no request of its own in the
// round, and asks over UDP are not proven (once they are, the relay's
// later requests go that way, not over a connection). Its later requests
// then go over a connection up since, two round trips fewer over TLS.
// toDst: the probe is of the destination, which has no admin API.
func (r *Round) OpensBeside(relay string, link Link, toDst bool) bool {
	s := r.s
	return !toDst && !r.asked[relay] && link == LinkNone && !(s.udp && s.proven)
}

// ByAck says whether this host's probe of relay, of handshakes
// handshakes, is answered by the acknowledgement of the round's ask over
// UDP to that relay (its round trip stands for the handshake's, and takes
// no slot of its own): a probe of one handshake, of a relay (not the
// destination) whose first request of the round is such an ask. Asked
// once the round's relays' requests are routed.
func (r *Round) ByAck(relay string, handshakes int, toDst bool) bool {
	return handshakes <= 1 && !toDst && r.firstUDP[relay]
}

// Acked records an acknowledgement of an ask of the plan, its round trip
// rtt: UDP is proven, and rtt may be the plan's slowest acknowledgement.
func (s *Scheduler) Acked(rtt time.Duration) {
	s.proven = true
	s.maxAck = max(s.maxAck, rtt)
}

// Measured records this host's RTT to relay as the plan has seen it (an
// acknowledgement's round trip, or this host's probe of it).
func (s *Scheduler) Measured(relay string, rtt time.Duration) {
	s.rtt[relay] = rtt
}

// Replied records a reply that came d after its acknowledgement.
func (s *Scheduler) Replied(d time.Duration) {
	s.maxReply = max(s.maxReply, d)
}

// AckWait is how long an ask to relay alone waits for its
// acknowledgement before it is asked again (AgainOverUDP): OverdueAfter
// this host's RTT to it, or for a relay the plan has no RTT to yet, the
// plan's slowest acknowledgement (the first asks are the landmarks',
// spread over the world). The plan's slowest alone would hold an ask to a
// near relay whose datagram was lost for the round trip of the farthest,
// twice. bound is the survey's timeout.
func (s *Scheduler) AckWait(relay string, bound time.Duration) time.Duration {
	rtt, ok := s.rtt[relay]
	if !ok {
		rtt = s.maxAck
	}
	return OverdueAfter(rtt, bound)
}

// ReplyWait is how long after its acknowledgement an ask's reply may take
// before the same probes are asked again (AgainOverUDP): OverdueAfter
// their expected time (Expected; 0 for an ask of windows alone, targets
// 0); without an expectation, after the plan's slowest reply; bound (the
// relay's probes') until a reply of the plan has come.
func (s *Scheduler) ReplyWait(targets int, expect, bound time.Duration) time.Duration {
	switch {
	case targets == 0:
		expect = 0
	case expect > 0:
	case s.maxReply == 0:
		return bound
	default:
		expect = s.maxReply
	}
	return OverdueAfter(expect, bound)
}

// Expected is how long a relay's probes are expected to take: their
// longest RTT by the best figure the plan knows (expectMs, ms;
// shortlist.Probe.ExpectMs, 0: none) times their handshakes.
func Expected(expectMs float64, handshakes int) time.Duration {
	return time.Duration(expectMs * float64(max(handshakes, 1)) * float64(time.Millisecond))
}

// ProbesTimeout bounds a relay's answer to a request of handshakes
// handshakes a target (at least one), gap apart: the ask (timeout), then
// the handshakes, each up to timeout (a handshake lost after timeout, as
// the relay is asked to time it). It is the bound on an ask's reply
// (ReplyWait) as well as on a request over HTTPS.
func ProbesTimeout(timeout time.Duration, handshakes int, gap time.Duration) time.Duration {
	handshakes = max(handshakes, 1)
	return timeout + time.Duration(handshakes)*timeout + time.Duration(handshakes-1)*gap
}

// OverdueAfter is how long an answer over UDP expected in expect is
// waited for before it counts as lost: twice expect and 50 ms, within
// 100 ms and bound.
func OverdueAfter(expect, bound time.Duration) time.Duration {
	return min(max(2*expect+50*time.Millisecond, 100*time.Millisecond), bound)
}
