package fleetsim

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/probesched"
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
	// udpLoss: asks over UDP are lost as the path's packets are
	// (Planning.UDPLoss).
	udpAsk, udpLoss bool
	// sched decides how each request travels and how long its answers
	// are waited for, as it does for the survey's prober; a plan's own,
	// made by its first round (nil till then).
	sched *probesched.Scheduler
	// learnt are this host's RTTs to relays the round has seen so far
	// (its own probes', then its acknowledgements'), in that order, for
	// sched once the round has ended: the survey's prober sets a wait
	// when it asks, which the model takes as the round's start, so a
	// round's waits stand on what the plan knew before it.
	learnt []learntRTT
	// probed counts the plan's probes of each pair (from, to) so far: a
	// pair probed again draws handshakes of its own, not its first
	// probe's over again.
	probed map[[2]string]int
}

// learntRTT is this host's RTT to a relay, ms.
type learntRTT struct {
	relay string
	rttMs float64
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
	p.sched = nil // a new plan's asks prove UDP again, and learn its waits afresh
	p.probed = nil
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
	// route is how a relay's request travels (sched.Route): over UDP, its
	// slot is free once its acknowledgement is in (one round trip), the
	// relay's probes going on without it.
	route probesched.Route
	// ackOf: this host's probe of that relay is answered by the
	// acknowledgement of its ask over UDP in the same round; it takes no
	// slot and no handshake of its own.
	ackOf string
	// lostAsk: the ask over UDP or its acknowledgement is lost
	// (Planning.UDPLoss); lostReply: its reply is; lostAgain: the ask
	// made again for either is lost too.
	lostAsk, lostReply, lostAgain bool
	// expectMs is the probes' longest RTT as the plan expects it
	// (shortlist.Probe.ExpectMs), 0: none; handshakes their handshakes'
	// count.
	expectMs   float64
	handshakes int
	// awaited: the round waits for it (shortlist.Request.Awaited).
	awaited bool
}

// Probe answers one round: its requests are made from the model
// (requests), run on the slots on the clock (roundClock.run), and the
// round ends once the quorum has answered (endRound).
func (p *prober) Probe(_ context.Context, probes []shortlist.Probe) ([]float64, error) {
	out := make([]float64, len(probes))
	if p.sched == nil {
		p.sched = probesched.New(p.udpAsk)
	}
	c := p.newRoundClock()
	reqs, round := p.requests(probes, out)
	if len(reqs) == 0 {
		return out, nil
	}
	if p.free == nil {
		p.free = make([]float64, max(p.inFlight, 1))
	}
	ends := c.run(reqs)
	p.endRound(round.Index(), probes, reqs, out, ends)
	p.learnRound(c)
	return out, nil
}

// learnRound tells sched what the round has learnt (see learnt): this
// host's RTTs, and its slowest reply after its acknowledgement.
func (p *prober) learnRound(c *roundClock) {
	for _, l := range p.learnt {
		p.sched.Measured(l.relay, duration(l.rttMs))
	}
	p.learnt = p.learnt[:0]
	p.sched.Replied(duration(c.slowestReplyMs))
}

// duration is ms milliseconds as a time.Duration (to the nanosecond
// below), as the survey's prober has its figures.
func duration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// ms is d in milliseconds, the model clock's unit.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// requests are the round's requests, each probe sampled from the model
// into out and each request's transport chosen (sched.Route for a
// relay's, fromHere for this host's probes), and the round that routed
// them.
func (p *prober) requests(probes []shortlist.Probe, out []float64) ([]*simRequest, *probesched.Round) {
	groups := shortlist.Requests(probes, "client", probe.MaxTargets, func(pr shortlist.Probe) bool {
		_, okA := p.point(pr.From)
		_, okB := p.point(pr.To)
		return okA && okB
	})
	round, routes := p.routes(groups)
	var reqs []*simRequest
	for i, g := range groups {
		r := &simRequest{at: g.At, from: g.From, handshakes: g.Handshakes, awaited: g.Awaited}
		p.sample(r, probes, out)
		if to := probes[g.At[0]].To; g.From == "client" {
			p.fromHere(round, r, to)
		} else {
			p.route(r, routes[i])
		}
		reqs = append(reqs, r)
	}
	return reqs, round
}

// routes routes the relays' requests of groups as the round does, and
// returns how each travels, by index (this host's are left at the zero
// Route). The model's links change as the requests run, not as they are
// routed, so all of them are routed first: this host's probes' routes
// then see the whole round's (Round.ByAck).
func (p *prober) routes(groups []shortlist.Request) (*probesched.Round, []probesched.Route) {
	var asked []string
	for _, g := range groups {
		if g.From != "client" {
			asked = append(asked, g.From)
		}
	}
	round := p.sched.Round(asked, len(groups))
	routes := make([]probesched.Route, len(groups))
	for i, g := range groups {
		if g.From != "client" {
			routes[i] = round.Route(g.From, p.link(g.From))
		}
	}
	return round, routes
}

// link is the plan's HTTPS link to relay for sched: up (or opening)
// once a request has opened it. The model opens a connection at once, so
// no relay is ever probesched.LinkReading in it.
func (p *prober) link(relay string) probesched.Link {
	if _, ok := p.readyMs[relay]; ok {
		return probesched.LinkUp
	}
	return probesched.LinkNone
}

// fromHere sets how this host's probe r of relay to travels, as round
// says: answered by the acknowledgement of the round's ask to it
// (ByAck), and opening the connection to it beside it (OpensBeside), over
// which it reads the relay's windows.
func (p *prober) fromHere(round *probesched.Round, r *simRequest, to string) {
	toDst := to == "destination"
	if round.ByAck(to, r.handshakes, toDst) {
		r.ackOf = to
	}
	if round.OpensBeside(to, p.link(to), toDst) {
		b, _ := p.point(to)
		r.opens = to
		r.setupMs = p.setupRTTs * p.world.RTTMs(p.client, b)
		r.readMs = p.world.RTTMs(p.client, b)
	}
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
		// samples. A pair probed again (a re-probe of verify, say) draws
		// afresh, as a real probe's new handshakes would.
		h := fnv.New64a()
		h.Write([]byte(pr.From + "\x00" + pr.To))
		if p.probed == nil {
			p.probed = map[[2]string]int{}
		}
		if n := p.probed[[2]string{pr.From, pr.To}]; n > 0 {
			fmt.Fprintf(h, "\x00%d", n)
		}
		p.probed[[2]string{pr.From, pr.To}]++
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
				p.learnt = append(p.learnt, learntRTT{pr.To, out[k]})
			}
		}
		r.probeMs = max(r.probeMs, probeMs)
		r.expectMs = max(r.expectMs, pr.ExpectMs)
	}
}

// route sets how the request r to relay r.from travels, as sched routed
// it: over UDP (alone once proven, else beside the HTTPS connection it
// opens), over a second connection beside the round's first request to
// it, over the connection kept, or over a new one.
func (p *prober) route(r *simRequest, route probesched.Route) {
	a, _ := p.point(r.from)
	r.askMs = p.world.RTTMs(p.client, a)
	r.route = route
	switch route {
	case probesched.UDPAlone:
		r.lostAsk, r.lostReply, r.lostAgain = p.udpLost(r.from, a)
	case probesched.UDPOpening:
		// The connection opens beside the ask and the windows are read
		// over it.
		r.opens, r.setupMs, r.readMs = r.from, p.setupRTTs*r.askMs, r.askMs
		r.lostAsk, r.lostReply, r.lostAgain = p.udpLost(r.from, a)
	case probesched.HTTPSSecond:
		r.connectMs = p.setupRTTs * r.askMs
	case probesched.HTTPSKept:
		r.via = r.from
	case probesched.HTTPSNew:
		r.opens, r.setupMs = r.from, p.setupRTTs*r.askMs
		r.connectMs = r.setupMs
	default:
		panic(fmt.Sprintf("fleetsim: route %d for a relay the model never has a read in flight to", route))
	}
}

// roundClock runs one round's requests on the prober's slots, on the
// clock, as the survey's prober waits for them.
type roundClock struct {
	p *prober
	// startMs: when each relay's ask over UDP started; failMs: when it
	// was given up for want of an acknowledgement.
	startMs, failMs map[string]float64
	// slowestReplyMs is the round's slowest reply after its
	// acknowledgement (for sched, once the round has ended).
	slowestReplyMs float64
}

func (p *prober) newRoundClock() *roundClock {
	return &roundClock{
		p:       p,
		startMs: map[string]float64{}, failMs: map[string]float64{},
	}
}

// ackWaitMs is how long an ask to relay alone waits for its
// acknowledgement (sched.AckWait, within the survey's timeout), by what
// the plan knew before this round, but for its slowest acknowledgement
// so far, as the survey's prober has them when it asks.
func (c *roundClock) ackWaitMs(relay string) float64 {
	return ms(c.p.sched.AckWait(relay, survey.DefaultTimeout))
}

// replyWaitMs is how long after its acknowledgement r's reply is overdue
// (sched.ReplyWait), bounded as the survey's prober bounds it: the ask and
// each of r's handshakes up to the survey's timeout.
func (c *roundClock) replyWaitMs(r *simRequest) float64 {
	handshakes := cmp.Or(r.handshakes, c.p.shortlist.Handshakes)
	bound := probesched.ProbesTimeout(survey.DefaultTimeout, handshakes, 0)
	return ms(c.p.sched.ReplyWait(len(r.at), probesched.Expected(r.expectMs, r.handshakes), bound))
}

// askedAgainAtMs is when a request given up at fail is answered: asked
// over HTTPS (setupMs first, for a new connection) and, when again, over
// UDP in a new datagram (one round trip, unless lost too) at once.
func askedAgainAtMs(r *simRequest, fail, setupMs float64, again bool) float64 {
	at := fail + setupMs + r.askMs + r.probeMs
	if again && !r.lostAgain {
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
	if r.route.UDP() {
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
		// that connection, up), or after the wait (then asked again as
		// the route says), the slot held throughout.
		var fail, setup float64
		if r.route.AckAwaitsRead() {
			fail = start + r.setupMs + r.readMs
		} else {
			fail = start + c.ackWaitMs(r.from)
			setup = p.setupRTTs * r.askMs
			p.readyMs[r.from] = fail + setup
		}
		r.atMs = askedAgainAtMs(r, fail, setup, r.route.AgainOverUDP(false))
		if _, first := c.failMs[r.from]; !first {
			c.failMs[r.from] = fail
		}
		p.free[slot] = r.atMs
	case r.lostReply:
		// Acknowledged; the reply waited for till it is overdue, then
		// asked again as the route says.
		c.ackedBy(r)
		overdue := start + r.askMs + c.replyWaitMs(r)
		setup := p.setupRTTs * r.askMs
		if r.opens != "" {
			setup = 0 // the connection opened beside the ask is up
		} else {
			p.readyMs[r.from] = overdue + setup
		}
		r.atMs = askedAgainAtMs(r, overdue, setup, r.route.AgainOverUDP(true))
	case r.route.UDP():
		c.ackedBy(r)
		c.slowestReplyMs = max(c.slowestReplyMs, r.probeMs)
	}
}

// ackedBy records the acknowledgement of r's ask: one round trip, which
// proves UDP and may be the plan's slowest acknowledgement at once (the
// next round's routes are made after this one's), and this host's RTT to
// the relay once the round has ended (learnt).
func (c *roundClock) ackedBy(r *simRequest) {
	c.p.sched.Acked(duration(r.askMs))
	c.p.learnt = append(c.p.learnt, learntRTT{r.from, r.askMs})
}

// endRound ends the plan's round-th round once the quorum (RoundNeedsAt) and every
// awaited request (shortlist.Request.Awaited) have answered, moves the
// clock there, and keeps the requests answered after as late answers
// (NaN in out).
func (p *prober) endRound(round int, probes []shortlist.Probe, reqs []*simRequest, out, ends []float64) {
	slices.Sort(ends)
	end := ends[p.shortlist.RoundNeedsAt(round, len(ends))-1]
	for _, r := range reqs {
		if r.awaited {
			end = max(end, r.atMs)
		}
	}
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
