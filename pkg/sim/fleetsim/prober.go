package fleetsim

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/netsim"
	"github.com/relaymesh/relaymesh/pkg/survey"
)

// prober answers shortlist's probes from the model: the median of each
// probe's Handshakes samples, as relayd's /v1/probe and the survey take
// them, on the plan's clock (wallMs). A batch's requests (this host's
// probes one each, a relay's probes of the batch one together) start in
// order, each in the first of inFlight slots to be free (as the survey's
// prober makes them), and the batch ends once a quorum share of them has
// answered: the rest are pending (NaN) and Late hands them over once the
// clock has passed their answer. They keep their slots till then.
type prober struct {
	world       *netsim.World
	relays      []*relay
	index       map[string]int
	client, dst netsim.Point
	seed        uint64 // of each probe's noise, with its pair
	inFlight    int
	shortlist   shortlist.Config // its RoundNeedsAt: how many of a batch's requests end it
	wallMs      float64          // the plan's clock, ms
	// roundEndsMs are when each of the plan's rounds ended, on the clock.
	roundEndsMs []float64
	free        []float64 // when each slot is free again, on the clock
	late        []lateAnswer
	// readyMs are the relays whose admin API this plan has a connection
	// to, opened or opening, and when it is up on the clock: it is kept,
	// and asking again costs one round trip from then.
	readyMs map[string]float64
	// setupRTTs is what a new admin connection costs before its
	// request's round trip (AdminSetupRTTs, or AdminSetupRTTsFastOpen).
	setupRTTs float64
	// udpAsk: relays are asked in one datagram (Planning.UDPAsk);
	// proven once an ask of the plan has been (after its first round
	// with one). Until then each ask opens the HTTPS connection beside
	// it; after, none is opened.
	udpAsk, proven bool
	// udpLoss: asks over UDP are lost as the path's packets are
	// (Planning.UDPLoss); maxAckMs is the plan's slowest acknowledgement
	// so far, ms, which sets how long an ask alone waits for its own.
	udpLoss  bool
	maxAckMs float64
	// maxReplyMs is the plan's slowest reply after its acknowledgement
	// so far, ms: how long a reply may take before it is overdue, when
	// the plan expects nothing of its probes.
	maxReplyMs float64
	// knownMs is this host's RTT to each relay as the plan has seen it
	// (an acknowledgement, or this host's probe), ms: how long an ask to
	// it alone waits for its acknowledgement.
	knownMs map[string]float64
}

// lateAnswer is a pending probe's value and when it answers, on the clock.
type lateAnswer struct {
	shortlist.Answer
	atMs float64
}

// restart sets the clock to 0 for another plan, nothing in flight; the
// connections stay, up.
func (p *prober) restart() {
	p.wallMs, p.free, p.late, p.roundEndsMs = 0, nil, nil, nil
	p.proven = false // a new plan's asks prove UDP again
	p.maxAckMs, p.maxReplyMs = 0, 0
	p.knownMs = nil
	for name := range p.readyMs {
		p.readyMs[name] = 0
	}
}

// AdminSetupRTTs is what this host's first request to a relay's admin API
// in a plan costs before the request's own round trip: a TCP handshake and
// a TLS 1.3 handshake (relays' admin APIs are HTTPS on a TLS fleet, the
// default), in round trips between this host and the relay.
const AdminSetupRTTs = 2

// AdminSetupRTTsFastOpen is AdminSetupRTTs with TCP Fast Open
// (Config.FastOpen): the ClientHello rides in the SYN, and the server's
// handshake answer comes with the SYN-ACK.
const AdminSetupRTTsFastOpen = 1

// Waited is the plan's time on the model's clock (shortlist.Clock).
func (p *prober) Waited() time.Duration {
	return time.Duration(p.wallMs * float64(time.Millisecond))
}

func (p *prober) point(name string) (netsim.Point, bool) {
	switch name {
	case "client":
		return p.client, true
	case "destination":
		return p.dst, true
	}
	i, ok := p.index[name]
	if !ok || !p.relays[i].alive {
		return netsim.Point{}, false
	}
	return p.world.Relay(i), true
}

// simRequest is one request of a round as relayctl makes them
// (shortlist.Requests): each of this host's own probes is one (its
// handshakes one after another); a relay's probes of the round are one
// request to it (the relay makes them at once), lasting the round trip of
// asking it and its longest probe. A relay's first request of the plan
// opens a connection to it, and so does a second request in flight beside
// another in the same round. This host's probe of a relay it has no
// connection to, and that has no request of its own in the round, opens
// one beside it and reads the relay's windows over it, in the probe's
// slot: the probe answers after its handshakes, the slot is free once the
// read has answered, and the connection is up for a later round's request
// after its own handshakes.
type simRequest struct {
	askMs, probeMs, atMs float64
	at                   []int  // the probes' indices
	from                 string // who makes the probes
	// connectMs are the handshakes of a new connection to the relay
	// asked, before its request; over a kept one the request starts once
	// that is up (via).
	connectMs float64
	via       string
	// opens is the relay whose connection this request opens (a relay
	// asked, or one this host probes), up setupMs after the request
	// starts; this host's probe that opens one reads the relay's windows
	// over it, readMs more, in its slot.
	opens           string
	setupMs, readMs float64
	// udp: the request is an ask over UDP, whose slot is free once its
	// acknowledgement is in (one round trip), the relay's probes going on
	// without it.
	udp bool
	// ackOf: this host's probe of that relay is answered by the
	// acknowledgement of its ask over UDP in the same round; it takes no
	// slot and no handshake of its own.
	ackOf string
	// lostAsk: the ask over UDP or its acknowledgement is lost
	// (Planning.UDPLoss); lostReply: its reply is; lostAgain: the ask
	// made again for either is lost too.
	lostAsk, lostReply, lostAgain bool
	// expectMs is the probes' longest RTT as the plan expects it
	// (shortlist.Probe.ExpectMs) times their handshakes, 0: none.
	expectMs float64
}

// Probe answers one round: its requests are made from the model
// (requests), run on the slots on the clock (roundClock.run), and the
// round ends once the quorum has answered (endRound).
func (p *prober) Probe(_ context.Context, probes []shortlist.Probe) ([]float64, error) {
	out := make([]float64, len(probes))
	if p.knownMs == nil {
		p.knownMs = map[string]float64{}
	}
	// What the plan knew before this round sets its waits (the round's
	// own answers come in as it goes, after its asks start).
	c := p.newRoundClock(maps.Clone(p.knownMs))
	reqs := p.requests(probes, out)
	if len(reqs) == 0 {
		return out, nil
	}
	if p.free == nil {
		p.free = make([]float64, max(p.inFlight, 1))
	}
	ends := c.run(reqs)
	p.endRound(probes, reqs, out, ends)
	p.proven = p.proven || c.acked
	p.maxReplyMs = c.slowestReplyMs
	return out, nil
}

// requests are the round's requests, each probe sampled from the model
// into out and each request's transport chosen.
func (p *prober) requests(probes []shortlist.Probe, out []float64) []*simRequest {
	groups := shortlist.Requests(probes, "client", probe.MaxTargets, func(pr shortlist.Probe) bool {
		_, okA := p.point(pr.From)
		_, okB := p.point(pr.To)
		return okA && okB
	})
	asking := map[string]bool{} // relays with a request of their own in this round
	for _, g := range groups {
		asking[g.From] = true
	}
	// udpAsked: relays of this round whose first request of it goes over
	// UDP (no HTTPS connection to them up or opening).
	udpAsked := map[string]bool{}
	for _, g := range groups {
		if _, kept := p.readyMs[g.From]; g.From != "client" && p.udpAsk && !kept {
			udpAsked[g.From] = true
		}
	}
	var reqs []*simRequest
	asked := map[string]bool{} // relays whose request of this round has started
	for _, g := range groups {
		r := &simRequest{at: g.At, from: g.From}
		p.sample(r, probes, out)
		to := probes[g.At[0]].To
		if g.From == "client" && udpAsked[to] && g.Handshakes <= 1 {
			r.ackOf = to
		}
		if g.From == "client" && to != "destination" && !asking[to] && !(p.udpAsk && p.proven) {
			if _, ok := p.readyMs[to]; !ok {
				b, _ := p.point(to)
				r.opens = to
				r.setupMs = p.setupRTTs * p.world.RTTMs(p.client, b)
				r.readMs = p.world.RTTMs(p.client, b)
			}
		}
		if g.From != "client" {
			p.route(r, asked[g.From])
			asked[g.From] = true
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// synRetransmitMs is Linux's initial retransmission timeout of a SYN
// (TCP_TIMEOUT_INIT): what a probe whose SYN or SYN-ACK was lost waits
// before its handshake is tried again. handshakeTimeoutMs is the survey's
// bound on one handshake, which a second loss runs into.
const (
	synRetransmitMs    = 1000
	handshakeTimeoutMs = float64(survey.DefaultTimeout / time.Millisecond)
)

// sample draws r's probes' handshakes from the model, their medians into
// out, and sets how long the probes take (probeMs) and are expected to
// (expectMs).
func (p *prober) sample(r *simRequest, probes []shortlist.Probe, out []float64) {
	a, _ := p.point(r.from)
	for _, k := range r.at {
		pr := probes[k]
		b, _ := p.point(pr.To)
		count := max(pr.Handshakes, 1)
		var samples []float64
		// A probe's noise comes from its pair, not its place in the batch:
		// plans that order or batch their probes differently see the same
		// samples.
		h := fnv.New64a()
		h.Write([]byte(pr.From + "\x00" + pr.To))
		rnd := rand.New(rand.NewPCG(p.seed, h.Sum64()))
		rttMs, probeMs := p.world.RTTMs(a, b), 0.0
		for range count {
			ms, lost := p.world.Sample(a, b, rnd)
			tookMs := rttMs
			if lost {
				// The kernel sends the SYN again after its initial
				// retransmission timeout, as relayd's probe waits for;
				// lost again, the handshake runs into the probe's
				// timeout.
				if ms, lost = p.world.Sample(a, b, rnd); lost {
					tookMs = handshakeTimeoutMs
				} else {
					tookMs = synRetransmitMs + rttMs
				}
			}
			if !lost {
				samples = append(samples, ms)
			}
			probeMs += tookMs
		}
		if len(samples) > 0 {
			out[k] = quantile(samples, 0.5)
			if r.from == "client" && pr.To != "destination" {
				p.knownMs[pr.To] = out[k]
			}
		}
		r.probeMs = max(r.probeMs, probeMs)
		r.expectMs = max(r.expectMs, float64(count)*pr.ExpectMs)
	}
}

// route chooses how the request to relay r.from travels: over UDP (alone
// once proven, else beside the HTTPS connection it opens), over a second
// connection beside the round's first request to it (second), over the
// connection kept, or over a new one.
func (p *prober) route(r *simRequest, second bool) {
	a, _ := p.point(r.from)
	r.askMs = p.world.RTTMs(p.client, a)
	_, kept := p.readyMs[r.from]
	switch {
	case p.udpAsk && !kept && p.proven:
		// Asked in one datagram, alone.
		r.udp = true
		r.lostAsk, r.lostReply, r.lostAgain = p.udpLost(r.from, a)
	case p.udpAsk && !kept && !second:
		// Asked in one datagram; the connection opens beside it and the
		// windows are read over it.
		r.udp = true
		r.opens, r.setupMs, r.readMs = r.from, p.setupRTTs*r.askMs, r.askMs
		r.lostAsk, r.lostReply, r.lostAgain = p.udpLost(r.from, a)
	case second: // a second connection beside the first
		r.connectMs = p.setupRTTs * r.askMs
	case kept:
		r.via = r.from
	default:
		r.opens, r.setupMs = r.from, p.setupRTTs*r.askMs
		r.connectMs = r.setupMs
	}
}

// roundClock runs one round's requests on the prober's slots, on the
// clock, as the survey's prober waits for them.
type roundClock struct {
	p *prober
	// knownBefore is this host's RTT to each relay as the plan knew it
	// before the round (prober.knownMs).
	knownBefore map[string]float64
	// bound is the longest a reply may take after its acknowledgement
	// (the survey's timeout for each of the probes' handshakes and the
	// ask).
	bound time.Duration
	// startMs: when each relay's ask over UDP started; failMs: when it
	// was given up for want of an acknowledgement.
	startMs, failMs map[string]float64
	// slowestReplyMs is the plan's slowest reply after its
	// acknowledgement, this round's included; acked: an ask of this
	// round was acknowledged, so UDP is proven.
	slowestReplyMs float64
	acked          bool
}

func (p *prober) newRoundClock(knownBefore map[string]float64) *roundClock {
	return &roundClock{
		p: p, knownBefore: knownBefore,
		bound:   survey.DefaultTimeout * time.Duration(1+max(1, p.shortlist.Handshakes)),
		startMs: map[string]float64{}, failMs: map[string]float64{},
		slowestReplyMs: p.maxReplyMs,
	}
}

// overdueMs is survey.OverdueAfter in ms.
func overdueMs(expectMs float64, bound time.Duration) float64 {
	d := survey.OverdueAfter(time.Duration(expectMs*float64(time.Millisecond)), bound)
	return float64(d) / float64(time.Millisecond)
}

// ackWaitMs is how long an ask to relay alone waits for its
// acknowledgement: twice this host's RTT to the relay and 50 ms, or for a
// relay not measured the slowest acknowledgement before this round's, as
// the survey's prober has them when it asks.
func (c *roundClock) ackWaitMs(relay string) float64 {
	rtt, ok := c.knownBefore[relay]
	if !ok {
		rtt = c.p.maxAckMs
	}
	return overdueMs(rtt, survey.DefaultTimeout)
}

// replyWaitMs is how long after its acknowledgement r's reply is overdue:
// twice its probes' expected time and 50 ms, or without one, twice the
// slowest reply before this round's.
func (c *roundClock) replyWaitMs(r *simRequest) float64 {
	switch {
	case r.expectMs > 0:
		return overdueMs(r.expectMs, c.bound)
	case c.p.maxReplyMs > 0:
		return overdueMs(c.p.maxReplyMs, c.bound)
	}
	return float64(c.bound) / float64(time.Millisecond)
}

// askedAgainAtMs is when a request given up at fail is answered: asked again over
// UDP (one round trip, unless lost too) and over HTTPS (setupMs first,
// for a new connection) at once.
func askedAgainAtMs(r *simRequest, fail, setupMs float64) float64 {
	at := fail + setupMs + r.askMs + r.probeMs
	if !r.lostAgain {
		at = min(at, fail+r.askMs+r.probeMs)
	}
	return at
}

// run starts the requests in order, each in the first slot to be free,
// and returns when each answers, in order of the requests; those
// answered by an ask's acknowledgement (ackOf) come last, once their
// asks have started.
func (c *roundClock) run(reqs []*simRequest) []float64 {
	var ends []float64
	for _, r := range reqs {
		if r.ackOf == "" {
			c.start(r)
			ends = append(ends, r.atMs)
		}
	}
	for _, r := range reqs {
		if r.ackOf != "" {
			r.atMs = c.startMs[r.ackOf] + r.probeMs
			if fail, lost := c.failMs[r.ackOf]; lost {
				r.atMs = fail + r.probeMs // this host's own handshake, then
			}
			ends = append(ends, r.atMs)
		}
	}
	return ends
}

// start takes the first slot to be free for r and sets when r answers
// (r.atMs) and when the slot is free again.
func (c *roundClock) start(r *simRequest) {
	p := c.p
	slot := 0
	for i, t := range p.free {
		if t < p.free[slot] {
			slot = i
		}
	}
	start := max(p.free[slot], p.wallMs)
	if r.via != "" {
		start = max(start, p.readyMs[r.via])
	}
	r.atMs = start + r.connectMs + r.askMs + r.probeMs
	p.free[slot] = r.atMs
	if r.udp {
		p.free[slot] = start + r.askMs
		if _, first := c.startMs[r.from]; !first {
			c.startMs[r.from] = start
		}
	}
	if r.opens != "" {
		p.readyMs[r.opens] = start + r.setupMs
		p.free[slot] = max(p.free[slot], start+r.setupMs+r.readMs)
	}
	switch {
	case r.lostAsk:
		// Given up when the read beside it has answered (then asked over
		// that connection), or after the wait (then asked again over UDP
		// and over HTTPS), the slot held throughout.
		var fail float64
		if r.opens != "" {
			fail = start + r.setupMs + r.readMs
			r.atMs = fail + r.askMs + r.probeMs
		} else {
			fail = start + c.ackWaitMs(r.from)
			p.readyMs[r.from] = fail + p.setupRTTs*r.askMs
			r.atMs = askedAgainAtMs(r, fail, p.setupRTTs*r.askMs)
		}
		if _, first := c.failMs[r.from]; !first {
			c.failMs[r.from] = fail
		}
		p.free[slot] = r.atMs
	case r.lostReply:
		// Acknowledged; the reply waited for till it is overdue, then
		// asked again over UDP and over HTTPS.
		c.ackedBy(r)
		overdue := start + r.askMs + c.replyWaitMs(r)
		setup := p.setupRTTs * r.askMs
		if r.opens != "" {
			setup = 0 // the connection opened beside the ask is up
		} else {
			p.readyMs[r.from] = overdue + setup
		}
		r.atMs = askedAgainAtMs(r, overdue, setup)
	case r.udp:
		c.ackedBy(r)
		c.slowestReplyMs = max(c.slowestReplyMs, r.probeMs)
	}
}

// ackedBy records the acknowledgement of r's ask: one round trip.
func (c *roundClock) ackedBy(r *simRequest) {
	c.acked = true
	c.p.maxAckMs = max(c.p.maxAckMs, r.askMs)
	c.p.knownMs[r.from] = r.askMs
}

// endRound ends the round once the quorum (RoundNeedsAt) has answered,
// moves the clock there, and keeps the requests answered after as late
// answers (NaN in out).
func (p *prober) endRound(probes []shortlist.Probe, reqs []*simRequest, out, ends []float64) {
	slices.Sort(ends)
	end := ends[p.shortlist.RoundNeedsAt(len(p.roundEndsMs), len(ends))-1]
	for _, r := range reqs {
		if r.atMs <= end {
			continue
		}
		for _, k := range r.at {
			p.late = append(p.late, lateAnswer{shortlist.Answer{Probe: probes[k], RTTMs: out[k]}, r.atMs})
			out[k] = math.NaN()
		}
	}
	p.wallMs = max(p.wallMs, end)
	p.roundEndsMs = append(p.roundEndsMs, p.wallMs)
}

// udpLost draws whether an ask over UDP to relay (at a) is lost, or its
// acknowledgement (lostAsk), else its reply (lostReply), at the path's
// loss rate each way (Planning.UDPLoss), and whether the ask made again
// for either is lost too, or its reply (lostAgain); its own source, from
// the relay and the round, so that plans that differ elsewhere lose
// alike.
func (p *prober) udpLost(relay string, a netsim.Point) (lostAsk, lostReply, lostAgain bool) {
	if !p.udpLoss {
		return false, false, false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "udp\x00%s\x00%d", relay, len(p.roundEndsMs))
	rnd := rand.New(rand.NewPCG(p.seed, h.Sum64()))
	loss := p.world.Path(p.client, a).LossRate
	lostAsk = rnd.Float64() < 1-(1-loss)*(1-loss)
	lostReply = !lostAsk && rnd.Float64() < loss
	return lostAsk, lostReply, rnd.Float64() < 1-(1-loss)*(1-loss)
}

// Late hands over the pending probes answered by now; with wait, the
// clock first moves on to the last of them.
func (p *prober) Late(_ context.Context, wait bool) ([]shortlist.Answer, error) {
	if wait {
		for _, l := range p.late {
			p.wallMs = max(p.wallMs, l.atMs)
		}
	}
	var out []shortlist.Answer
	p.late = slices.DeleteFunc(p.late, func(l lateAnswer) bool {
		if l.atMs <= p.wallMs {
			out = append(out, l.Answer)
			return true
		}
		return false
	})
	return out, nil
}
