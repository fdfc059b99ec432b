package survey

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/probesched"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/udpask"
	"github.com/relaymesh/relaymesh/planner"
)

// Mode says how a survey measures.
type Mode string

// Survey modes.
const (
	// ModeAuto shortlists when most usable relays publish a coordinate
	// (relayd probe.mode: coordinates, where relays measure only a few
	// peers each, so most relay pairs are estimates a shortlist measures),
	// and measures every relay otherwise. The default.
	ModeAuto Mode = "auto"
	// ModeFull measures every relay: this host's RTT to each, each one's
	// to the destination, and reads each one's window.
	ModeFull Mode = "full"
	// ModeShortlist plans from the relays' coordinates and measures only
	// the landmarks and the shortlist (pkg/shortlist): a few dozen probes
	// whatever the fleet's size. Relays without a coordinate are left out.
	ModeShortlist Mode = "shortlist"
)

// ParseMode reads a --survey value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeFull, ModeShortlist:
		return m, nil
	}
	return "", fmt.Errorf("survey mode %q: want auto, full or shortlist", s)
}

// CoordinatesOf reads reg's relays' own published coordinates, for
// Survey.Coordinates; nil when reg carries none.
func CoordinatesOf(reg registry.Store) func(context.Context) (map[string]registry.Coordinate, error) {
	cs, ok := reg.(registry.Coordinates)
	if !ok {
		return nil
	}
	return func(ctx context.Context) (map[string]registry.Coordinate, error) {
		list, err := cs.Coordinates(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]registry.Coordinate, len(list))
		for _, c := range list {
			if c.Coord != nil {
				out[c.Relay] = c
			}
		}
		return out, nil
	}
}

// shortlisting says whether to shortlist, and with which coordinates.
func (s *Survey) shortlisting(ctx context.Context, usable []registry.Relay) (map[string]registry.Coordinate, bool, error) {
	mode, err := ParseMode(string(s.Mode))
	if err != nil || mode == ModeFull {
		return nil, false, err
	}
	var coords map[string]registry.Coordinate
	if s.Coordinates != nil {
		if coords, err = s.Coordinates(ctx); err != nil && mode == ModeShortlist {
			return nil, false, fmt.Errorf("reading the relays' coordinates: %w", err)
		}
	}
	placed := 0
	for _, r := range usable {
		if coords[r.Name].Coord != nil {
			placed++
		}
	}
	switch {
	case mode == ModeShortlist && placed == 0:
		return nil, false, fmt.Errorf("--survey shortlist: none of the %d usable relays has published a coordinate (relayd probe.mode: coordinates publishes them)", len(usable))
	case mode == ModeShortlist:
		return coords, true, nil
	}
	return coords, 2*placed > len(usable), nil
}

// runShortlist fills res the shortlist way: the matrix is the candidates
// shortlist.Plan planned over, with every pair it measured, and their
// windows read.
// runShortlist fills res the shortlist way: the matrix is the candidates
// shortlist.Plan planned over, with every pair it measured, and their
// windows read.
func (s *Survey) runShortlist(ctx context.Context, res *Result, usable []registry.Relay, coords map[string]registry.Coordinate, pairs func() ([]registry.Pair, error), clientNode, dstNode planner.Node) error {
	in, byName, err := s.shortlistInput(res, usable, coords, pairs, clientNode, dstNode)
	if err != nil {
		return err
	}
	pr := newSurveyProber(s, byName, res.Target, dstNode.Name)
	defer pr.close()
	checked := &recordingProber{surveyProber: pr} // its answers are checked once the plan is made (claims.go)
	// A region's relay probes for its host: the first cut's ends are its
	// probes of the first cut, a request to it for every probe.MaxTargets
	// of them, where each relay of the first cut would be asked over a new
	// connection of its own.
	if i := slices.IndexFunc(usable, func(r registry.Relay) bool { return r.Name == res.Target.Relay }); i >= 0 && usable[i].Admin != "" {
		pr.dstRelay = &usable[i]
		in.DestinationProbes = true
	}
	book := &windowBook{pr: pr, byName: byName, dstRelay: res.Target.Relay, dstNode: dstNode, learnt: map[string]windows{}}
	in.Describe = book.describe
	c := &in.Request.Constraints
	if len(c.Include) > 0 && len(byName) == 0 {
		return fmt.Errorf("none of the --include relays (%s) has published a coordinate; try --survey full", strings.Join(c.Include, ", "))
	}
	c.Include, c.Exclude = nil, nil // applied: the candidates are only those allowed
	// The probes still in flight when the plan is made are abandoned.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var freshAt time.Time
	in.Prior, freshAt = s.Replans.get(res.Target.Name, s.now())
	_, m, st, err := shortlist.Plan(pctx, s.Shortlist, in, checked)
	if err != nil {
		return err
	}
	published, _ := pairs() // read by the plan: its error would have ended it
	res.Notes = append(res.Notes, dropDoubtedClaims(m, st.Prior, checked.recorded(), published, clientNode.Name)...)
	s.Replans.put(res.Target.Name, st.Prior, freshAt, s.now())
	if in.Prior != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("shortlist: started from this destination's plans since %s ago (the endpoints' coordinates, the RTTs measured, the chains ranked)",
			s.now().Sub(freshAt).Round(time.Second)))
	}
	res.Notes = append(res.Notes, book.complete(ctx, m, st.Unreachable, time.Now().Add(s.timeout()))...)
	for name := range res.Relays {
		if !containsNode(m, name) {
			delete(res.Relays, name)
		}
	}
	res.Matrix, res.Shortlisted = m, true
	res.Notes = append(res.Notes, s.shortlistNotes(st, pr, len(usable), len(in.Relays))...)
	return nil
}

// shortlistInput is the shortlist's input: the usable relays with a
// coordinate that --include and --exclude allow (byName), and the pairs
// the fleet measured between them, read when the plan asks (pairs).
func (s *Survey) shortlistInput(res *Result, usable []registry.Relay, coords map[string]registry.Coordinate, pairs func() ([]registry.Pair, error), clientNode, dstNode planner.Node) (shortlist.Input, map[string]registry.Relay, error) {
	in := shortlist.Input{Client: clientNode, Destination: dstNode, Request: s.Plan}
	// A region's relay hosts the destination: its own coordinate places
	// it, and no landmark is asked to probe it.
	if res.Target.Relay != "" {
		in.DestinationCoord = coords[res.Target.Relay].Coord
	}
	c := &in.Request.Constraints
	known := map[string]bool{}
	for _, r := range res.Relays {
		known[r.Name] = true
	}
	for _, name := range slices.Concat(c.Include, c.Exclude) {
		if !known[name] {
			return in, nil, fmt.Errorf("relay %q (--include/--exclude): not a usable relay of the fleet", name)
		}
	}
	byName := map[string]registry.Relay{}
	for _, r := range usable {
		if coords[r.Name].Coord == nil || slices.Contains(c.Exclude, r.Name) || len(c.Include) > 0 && !slices.Contains(c.Include, r.Name) {
			continue
		}
		// A name the registry lists twice is one relay to the plan (the
		// shortlist refuses two of one name): the first listing.
		if _, twice := byName[r.Name]; twice {
			continue
		}
		byName[r.Name] = r
		in.Relays = append(in.Relays, shortlist.Relay{
			Node: planner.Node{Name: r.Name, Relay: true, Region: r.Region}, Coord: coords[r.Name].Coord,
			MeasuredFor: coords[r.Name].MeasuredFor(s.now())})
	}
	in.Published = func(context.Context) ([]planner.Pair, error) {
		ps, err := pairs()
		if err != nil {
			return nil, err
		}
		rp, notes := relayPairs(ps, byName, ownRTTs(ps), s.now())
		res.Notes = append(res.Notes, notes...)
		return slices.DeleteFunc(rp, func(p planner.Pair) bool { return p.Estimated }), nil
	}
	return in, byName, nil
}

// windowBook is the candidates' windows (and the destination's, when it
// is a relay's host), read once they are few. A relay asked to probe
// brings its windows with its first answer (surveyProber.info), and one
// this host probes without asking it is read beside that probe; one whose
// answer or read is still in flight is left to it (its windows join the
// matrix once the plan is made: complete), one whose request failed is
// not asked again; the others (never asked to probe, or a relayd from
// before /v1/probe?info=1) are read, each in one of the prober's slots,
// in the background: a round does not wait for them (a relay that
// vanished would hold it up to the read's timeout).
type windowBook struct {
	pr       *surveyProber
	byName   map[string]registry.Relay
	dstRelay string // the relay that hosts the destination, if any
	dstNode  planner.Node

	mu        sync.Mutex
	learnt    map[string]windows
	dstWindow *planner.Node // the destination's relay's, once known
}

// describe is the shortlist's Describe: the windows known of names (and
// of the destination's relay), a background read of those not asked yet.
func (b *windowBook) describe(ctx context.Context, names []string) (map[string]planner.Node, error) {
	out := map[string]planner.Node{}
	for _, name := range append(slices.Clip(names), b.dstRelay) {
		r, ok := b.byName[name]
		if !ok {
			continue
		}
		b.mu.Lock()
		w, known := b.learnt[name]
		b.mu.Unlock()
		state := infoAnswered
		if !known {
			w, state = b.pr.info(name)
		}
		switch state {
		case infoAnswered:
			b.mu.Lock()
			b.described(r, w, out)
			b.mu.Unlock()
		case infoUnasked, infoMissing:
			b.pr.readLater(ctx, r)
		}
	}
	return out, nil
}

// described records r's windows w, as a node of out (and the
// destination's node, when r hosts it). b.mu held.
func (b *windowBook) described(r registry.Relay, w windows, out map[string]planner.Node) {
	n := planner.Node{Name: r.Name, Relay: true, Region: r.Region}
	w.apply(&n)
	out[r.Name] = n
	b.learnt[r.Name] = w
	if r.Name == b.dstRelay {
		b.dstWindow = &n
		// The destination is this relay's host: its windows.
		d := planner.Node{Name: b.dstNode.Name, Region: b.dstNode.Region}
		w.apply(&d)
		out[b.dstNode.Name] = d
	}
}

// complete puts into m the windows that came after the plan had described
// its relays: those of a read still in flight are waited for (each read
// is bounded by the survey's timeout), and a first answer (which carries
// the windows) still in flight until pendingUntil (on a loaded host a
// relay's reply can come just after the plan), but for the relays the
// plan left out (unreachable). It returns notes on the windows still
// unknown.
func (b *windowBook) complete(ctx context.Context, m *planner.Matrix, unreachable []string, pendingUntil time.Time) []string {
	var notes []string
	late := map[string]planner.Node{}
	names := []string{b.dstRelay}
	for _, n := range m.Nodes {
		if n.Relay {
			names = append(names, n.Name)
		}
	}
	for _, name := range names {
		r, ok := b.byName[name]
		b.mu.Lock()
		_, known := b.learnt[name]
		b.mu.Unlock()
		if !ok || known || slices.Contains(unreachable, name) {
			continue
		}
		b.pr.awaitRead(name)
		b.pr.awaitAnswer(ctx, name, pendingUntil)
		switch w, state, err := b.pr.infoErr(name); state {
		case infoAnswered:
			b.mu.Lock()
			b.described(r, w, late)
			b.mu.Unlock()
		case infoPending:
			notes = append(notes, fmt.Sprintf("relay %s: window unknown (its first answer, which carries it, had not come when the plan was made)", name))
		case infoFailed:
			notes = append(notes, fmt.Sprintf("relay %s: window unknown (%v)", name, err))
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range m.Nodes {
		n := &m.Nodes[i]
		if l, ok := late[n.Name]; ok && n.Relay {
			*n = l
		}
		if n.Name == b.dstNode.Name && b.dstWindow != nil {
			n.WindowBytes, n.SendWindowBytes, n.LimitBps = b.dstWindow.WindowBytes, b.dstWindow.SendWindowBytes, b.dstWindow.LimitBps
		}
	}
	applyLearnt(m, b.learnt)
	return notes
}

// shortlistNotes say how the plan's rounds went and ended, and what they
// left out.
func (s *Survey) shortlistNotes(st shortlist.Stats, pr *surveyProber, usable, placed int) []string {
	notes := []string{fmt.Sprintf(
		"shortlist: planned over %d of %d relays, chosen from their coordinates; %d probes in %d rounds; the best plan stands on %d measured and %d estimated segments",
		st.Candidates, placed, st.Probes, st.Rounds, st.Measured, st.Estimated)}
	if st.Settled {
		notes = append(notes, fmt.Sprintf("shortlist: ended its rounds with a chain measured throughout within %g %% of the best plan on estimates (--shortlist-settle)",
			100*s.Shortlist.Settle))
	}
	if st.Deadlined {
		notes = append(notes, fmt.Sprintf("shortlist: stopped its rounds at the deadline (%s): the plan is the best of the chains measured by then",
			s.Shortlist.Deadline))
	}
	if st.OutOfBudget {
		notes = append(notes, fmt.Sprintf("shortlist: stopped its rounds of targeted probes at their budget (%s, --shortlist-search-budget): the plan is the best of the chains measured by then",
			s.Shortlist.PlanSearchBudget()))
	}
	pr.mu.Lock()
	fellBack, asked, unacked := pr.fellBack, len(pr.asked), len(pr.unacked)
	pr.mu.Unlock()
	if unacked > 0 {
		notes = append(notes, fmt.Sprintf("shortlist: %d of %d relays asked over UDP did not acknowledge in time and were asked over HTTPS: is UDP to their admin port filtered? (relayd admin_udp; --udp-ask=false asks over HTTPS only)",
			unacked, asked))
	}
	if fellBack > 0 {
		notes = append(notes, fmt.Sprintf("shortlist: the destination's relay %s did not answer %d request(s) for its probes of the first cut; each of those relays probed the destination instead",
			pr.dstRelay.Name, fellBack))
	}
	if len(st.Unreachable) > 0 {
		notes = append(notes, fmt.Sprintf("shortlist: left out %s: this host's probe could not reach it (vanished, or its admin port is filtered from here)",
			strings.Join(st.Unreachable, ", ")))
	}
	if dropped := usable - placed; dropped > 0 {
		notes = append(notes, fmt.Sprintf("shortlist: %d usable relays have no coordinate yet; left out", dropped))
	}
	return notes
}

func containsNode(m *planner.Matrix, name string) bool {
	for _, n := range m.Nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}

// surveyProber makes shortlist's probes: this host's own handshakes for
// the client's, the relays' /v1/probe for theirs (to the destination, or
// to a peer's admin address), as many as the probe asks. Each probe's
// handshakes follow each other without a gap. A relay's probes of a round
// go in one request (up to probe.MaxTargets): a second request in flight
// to it would open a new connection, two round trips more over TLS, and
// the neighbourhood searches ask one relay for a dozen.
//
// A round ends once Shortlist.RoundNeedsAt of its requests have answered
// (a round would otherwise wait for its slowest: a far relay asked over
// a new connection, or one down, until its timeout); the others stay in
// flight, holding their slots, and Late hands their answers over. It is a
// shortlist.LateProber.
//
// A relay's first request of the plan asks for its /v1/info too
// (/v1/probe?info=1): its windows, which the plan reads of every relay it
// describes, come with its answer instead of over a second connection
// beside it (info).
type surveyProber struct {
	s      *Survey
	relays map[string]registry.Relay
	target Target
	dst    string
	// dstRelay, when set, is the destination's relay (a region's), which
	// makes the probes whose From is the destination (dst).
	dstRelay *registry.Relay
	// fellBack counts the destination's relay's requests that failed and
	// whose probes each relay then made (see Probe).
	fellBack int
	// ask asks relays for their probes over UDP (Survey.AskKey); nil:
	// none. sched decides how each request travels (over UDP, or over
	// HTTPS on which connection) and how long its answers are waited
	// for, from what the plan has learnt (its acknowledgements, RTTs and
	// replies), under mu. https are the relays with an HTTPS connection
	// up or opening (a read of its windows, or a request over HTTPS): a
	// relay is asked over UDP until it has one. asked are the relays
	// asked over UDP, unacked those of them then asked over HTTPS,
	// successfully: their acknowledgement had not come.
	ask     *udpask.Client
	sched   *probesched.Scheduler
	https   map[string]bool
	asked   map[string]bool
	unacked map[string]bool

	sem     chan struct{} // the slots, InFlightProbes of them, across rounds
	mu      sync.Mutex
	late    []shortlist.Answer // answered after their round ended
	flying  int                // requests of ended rounds still in flight
	changed chan struct{}      // closed (and replaced) when a request answers
	// infos are what became of each relay's first request, which asked
	// for its windows, or of the read of them.
	infos map[string]knownInfo
	// reads are the reads of relays' windows beside this host's probes of
	// them, and readLater's: each closed once its read has ended.
	reads map[string]chan struct{}
}

// knownInfo is a relay's windows as a prober knows them: w when state is
// infoAnswered.
type knownInfo struct {
	state infoState
	w     windows
	err   error // infoFailed's
}

// infoState is what a prober knows of a relay's windows.
type infoState int

const (
	infoUnasked  infoState = iota // no request of the plan has gone to it
	infoPending                   // its first request is in flight
	infoAnswered                  // its windows came with the answer
	infoMissing                   // the answer came without them: a relayd from before info=1
	infoFailed                    // the request failed: the relay's admin API is out of reach
)

func newSurveyProber(s *Survey, relays map[string]registry.Relay, target Target, dst string) *surveyProber {
	p := &surveyProber{s: s, relays: relays, target: target, dst: dst,
		sem:   make(chan struct{}, s.Shortlist.InFlightProbes()),
		infos: map[string]knownInfo{}, reads: map[string]chan struct{}{},
		https: map[string]bool{}, asked: map[string]bool{}, unacked: map[string]bool{}}
	if s.AskKey != nil {
		// No socket: every request goes over HTTPS, as without a key.
		p.ask, _ = udpask.NewClient(*s.AskKey)
	}
	p.sched = probesched.New(p.ask != nil)
	return p
}

// close closes the asks' socket: answers still in flight are dropped.
func (p *surveyProber) close() {
	if p.ask != nil {
		p.ask.Close()
	}
}

// info is what p knows of relay's windows: w when state is infoAnswered.
func (p *surveyProber) info(relay string) (w windows, state infoState) {
	w, state, _ = p.infoErr(relay)
	return w, state
}

// infoErr is info, with the error of a relay whose state is infoFailed.
// awaitAnswer waits, until deadline or ctx ends, while relay's first
// request (which carries its windows) is in flight.
func (p *surveyProber) awaitAnswer(ctx context.Context, relay string, deadline time.Time) {
	for {
		if _, st, _ := p.infoErr(relay); st != infoPending || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (p *surveyProber) infoErr(relay string) (windows, infoState, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.infos[relay]
	return i.w, i.state, i.err
}

// learnLocked records what became of a request for relay's windows or a
// read of them (w nil: the answer came without them); p.mu held.
func (p *surveyProber) learnLocked(relay string, w *windows, err error) {
	switch {
	case err != nil:
		p.infos[relay] = knownInfo{state: infoFailed, err: err}
	case w == nil:
		p.infos[relay] = knownInfo{state: infoMissing}
	default:
		p.infos[relay] = knownInfo{state: infoAnswered, w: *w}
	}
}

// startReadLocked marks relay's windows pending on a read, and returns the
// channel to close once the read has ended (awaitRead); p.mu held.
func (p *surveyProber) startReadLocked(relay string) chan struct{} {
	p.infos[relay] = knownInfo{state: infoPending}
	done := make(chan struct{})
	p.reads[relay] = done
	return done
}

// readLater reads r's windows in the background, in one of p's slots,
// unless a request or a read of them is in flight or has answered.
func (p *surveyProber) readLater(ctx context.Context, r registry.Relay) {
	p.mu.Lock()
	if s := p.infos[r.Name].state; s != infoUnasked && s != infoMissing {
		p.mu.Unlock()
		return
	}
	// A read alone goes as a request would: over UDP once that is
	// proven, to a relay with no HTTPS connection.
	udp := p.sched.Round(nil, 0).Route(r.Name, p.linkLocked(r.Name)) == probesched.UDPAlone
	done := p.startReadLocked(r.Name)
	p.https[r.Name] = p.https[r.Name] || !udp
	p.mu.Unlock()
	go func() {
		w, err := p.read(ctx, r, udp)
		p.endRead(r.Name, done, &w, err)
	}()
}

// endRead records a read of relay's windows (learnLocked) and closes its
// done channel (startReadLocked's).
func (p *surveyProber) endRead(relay string, done chan struct{}, w *windows, err error) {
	p.mu.Lock()
	p.learnLocked(relay, w, err)
	p.mu.Unlock()
	close(done)
}

// readingLocked is the done channel of relay's read in flight, nil when
// there is none; p.mu held.
func (p *surveyProber) readingLocked(relay string) chan struct{} {
	done := p.reads[relay]
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
		return done
	}
}

// awaitRead waits for the read of relay's windows in flight, if any (a
// request's answer that carries them is not waited for).
func (p *surveyProber) awaitRead(relay string) {
	p.mu.Lock()
	done := p.reads[relay]
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

// read reads r's windows from its /v1/info, in one of p's slots; with
// udp in an ask over UDP for them alone (askUDP), and over HTTPS if it
// is not acknowledged.
func (p *surveyProber) read(ctx context.Context, r registry.Relay, udp bool) (windows, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return windows{}, ctx.Err()
	}
	defer func() { <-p.sem }()
	if udp {
		_, info, err := p.askUDP(ctx, r, nil, 1, true, 0, nil, nil)
		switch {
		case err == nil && info != nil:
			return windowsOf(*info, false), nil
		case errors.Is(err, errAskedBoth):
			return windows{}, err
		}
	}
	return p.readHeld(ctx, r)
}

// readHeld is read in a slot its caller holds.
func (p *surveyProber) readHeld(ctx context.Context, r registry.Relay) (windows, error) {
	cctx, cancel := context.WithTimeout(ctx, p.s.timeout())
	defer cancel()
	return p.s.relayWindow(cctx, adminPath{first: r})
}

// relayOf is the relay that makes the probes from `from`: a relay, or the
// destination's (dstRelay).
func (p *surveyProber) relayOf(from string) (registry.Relay, bool) {
	if from == p.dst && p.dstRelay != nil {
		return *p.dstRelay, true
	}
	r, ok := p.relays[from]
	return r, ok
}

// signal wakes whoever waits on p.changed; p.mu held.
func (p *surveyProber) signal() {
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// wait waits, p.mu held, for the next answer or ctx's end; p.mu is held
// again on return.
func (p *surveyProber) wait(ctx context.Context) error {
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	ch := p.changed
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proberRound is one Probe call: its probes and requests, and what has
// come back (out, done), under the prober's mu.
type proberRound struct {
	p      *surveyProber
	probes []shortlist.Probe
	reqs   []*surveyRequest
	out    []float64
	done   int  // requests answered
	closed bool // Probe returned: later answers are late
	// awaiting are the awaited requests (shortlist.Request.Awaited) not
	// answered yet: the round does not end before they are.
	awaiting int
}

// surveyRequest is one request of a round (shortlist.Requests): its
// addresses, in the order of its probes, and how it travels.
type surveyRequest struct {
	shortlist.Request
	relay    registry.Relay // asked, unless From is this host
	addrs    []string
	expectMs float64 // its probes' longest ExpectMs (see replyWait)
	toDst    bool    // this host's probe of the destination
	withInfo bool    // the relay's first request: it asks for its windows
	// route is how a relay's request travels (p.sched.Route). Asked
	// over UDP before UDP is proven, the connection opens beside the ask
	// (opens, or a read of the relay's windows in flight already):
	// readDone is closed once that read has ended; nil: the ask waits
	// ackWait.
	route    probesched.Route
	readDone chan struct{}
	// acked is closed once the ask over UDP has been acknowledged (ackRTT
	// its round trip) or has failed (ackRTT negative).
	acked  chan struct{}
	ackRTT time.Duration
	// ackOf: this host's probe of a relay asked over UDP in this round,
	// answered by that ask's acknowledgement (its round trip) instead of
	// a handshake and a slot of its own.
	ackOf *surveyRequest
	// opens is the relay this host's probe of opens a connection to beside
	// it, over which it reads the relay's windows: no request of the plan
	// has gone to it, and none of this round does.
	opens string
	read  chan struct{} // closed once opens' read has ended
	done  bool          // answered (under p.mu)
}

// Probe makes one round's requests (roundRequests, each's transport
// chosen by route), starts them in order as slots free up (start), and
// returns once the round's quorum and its awaited requests have answered
// (await); the rest answer late.
func (p *surveyProber) Probe(ctx context.Context, probes []shortlist.Probe) ([]float64, error) {
	probes = slices.Clone(probes) // late answers name them after Probe returns; the caller reuses its slice
	rd := &proberRound{p: p, probes: probes, out: make([]float64, len(probes))}
	asked := rd.requests()
	// Marked before Probe returns: the plan describes the round's relays
	// once it has ended, and one whose request has not started yet is
	// pending, not unasked.
	p.mu.Lock()
	round := p.sched.Round(asked, len(rd.reqs))
	need := p.s.Shortlist.RoundNeedsAt(round.Index(), len(rd.reqs))
	for _, rq := range rd.reqs {
		p.routeLocked(round, rq, probes[rq.At[0]].To)
	}
	p.mu.Unlock()
	rd.pairAcks(round)
	go rd.start(ctx)
	return rd.await(ctx, need)
}

// requests are the round's requests, and the relays asked in it.
func (rd *proberRound) requests() (asked []string) {
	p := rd.p
	addrOf := func(to string) (string, bool) {
		if to == p.dst {
			return p.target.Addr, true
		}
		r, ok := p.relays[to]
		return r.Admin, ok
	}
	for _, g := range shortlist.Requests(rd.probes, ClientNode, probe.MaxTargets, func(pr shortlist.Probe) bool {
		_, okTo := addrOf(pr.To)
		_, okFrom := p.relayOf(pr.From)
		return okTo && (okFrom || pr.From == ClientNode)
	}) {
		rq := &surveyRequest{Request: g, toDst: g.From == ClientNode && rd.probes[g.At[0]].To == p.dst}
		if g.From != ClientNode {
			rq.relay, _ = p.relayOf(g.From)
			asked = append(asked, rq.relay.Name)
		}
		for _, k := range g.At {
			addr, _ := addrOf(rd.probes[k].To)
			rq.addrs = append(rq.addrs, addr)
			rq.expectMs = max(rq.expectMs, rd.probes[k].ExpectMs)
		}
		rd.reqs = append(rd.reqs, rq)
		if g.Awaited {
			rd.awaiting++
		}
	}
	return asked
}

// routeLocked chooses how rq travels, as round routes it: a relay's
// request over UDP (beside the HTTPS connection it opens, or a read
// opening it, until UDP is proven; alone after) or over HTTPS, with the
// relay's windows on its first; this host's probe of a relay (to) opens
// the connection beside it when round.OpensBeside says so. p.mu held.
func (p *surveyProber) routeLocked(round *probesched.Round, rq *surveyRequest, to string) {
	if rq.From == ClientNode {
		if round.OpensBeside(to, p.linkLocked(to), rq.toDst) {
			rq.opens, rq.read = to, p.startReadLocked(to)
			p.https[to] = true
		}
		return
	}
	name := rq.relay.Name
	reading := p.readingLocked(name)
	rq.route = round.Route(name, p.linkLocked(name))
	switch rq.route {
	case probesched.UDPOpening:
		rq.opens, rq.read = name, p.startReadLocked(name)
		rq.readDone = rq.read
		p.https[name] = true
	case probesched.UDPBesideRead:
		rq.readDone = reading
	case probesched.UDPAlone:
		if p.infos[name].state == infoUnasked {
			// The windows come with the reply.
			rq.withInfo = true
			p.infos[name] = knownInfo{state: infoPending}
		}
	case probesched.HTTPSNew:
		rq.withInfo = true
		p.infos[name] = knownInfo{state: infoPending}
		p.https[name] = true
	default:
		p.https[name] = true
	}
}

// linkLocked is the plan's HTTPS link to relay, for p.sched: none until
// a request or a read over HTTPS has gone to it, reading while a read of
// its windows opening it is in flight. p.mu held.
func (p *surveyProber) linkLocked(relay string) probesched.Link {
	switch {
	case !p.https[relay]:
		return probesched.LinkNone
	case p.readingLocked(relay) != nil:
		return probesched.LinkReading
	}
	return probesched.LinkUp
}

// pairAcks answers this host's probe of a relay asked over UDP in this
// round by that ask's acknowledgement, when round.ByAck says so: one
// round trip to the relay, as its handshake would be (and the relay's
// reading the ask, under a millisecond), without a connection of its
// own.
func (rd *proberRound) pairAcks(round *probesched.Round) {
	udpOf := map[string]*surveyRequest{}
	for _, rq := range rd.reqs {
		if rq.route.UDP() {
			if _, ok := udpOf[rq.relay.Name]; !ok {
				udpOf[rq.relay.Name] = rq
				rq.acked = make(chan struct{})
			}
		}
	}
	for _, rq := range rd.reqs {
		if rq.From != ClientNode {
			continue
		}
		// The relay's first request of the round is the ask, when it went
		// over UDP.
		to := rd.probes[rq.At[0]].To
		if ask := udpOf[to]; ask != nil && round.ByAck(to, rq.Handshakes, rq.toDst) {
			rq.ackOf = ask
		}
	}
}

// answer records rq's summaries (and the relay's windows when it asked
// for them, info): in the round while it is open, else as late answers.
func (rd *proberRound) answer(rq *surveyRequest, sums []probe.Summary, info *adminapi.Info, err error) {
	p := rd.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if rq.withInfo {
		var w *windows
		if info != nil {
			w = new(windowsOf(*info, false))
		}
		p.learnLocked(rq.relay.Name, w, err)
	}
	for j, k := range rq.At {
		ms := 0.0
		if j < len(sums) && sums[j].Reachable() {
			ms = sums[j].MedianMs
		}
		if to := rd.probes[k].To; rq.From == ClientNode && ms > 0 && to != p.dst {
			p.sched.Measured(to, time.Duration(ms*float64(time.Millisecond)))
		}
		if rd.closed {
			p.late = append(p.late, shortlist.Answer{Probe: rd.probes[k], RTTMs: ms})
		} else {
			rd.out[k] = ms
		}
	}
	rq.done = true
	if rd.closed {
		p.flying--
	} else {
		rd.done++
		if rq.Awaited {
			rd.awaiting--
		}
	}
	p.signal()
}

// start starts the requests in order, each when a slot is free (slots
// still held by earlier rounds' stragglers included); the round may end
// before the last has started.
func (rd *proberRound) start(ctx context.Context) {
	p := rd.p
	for _, rq := range rd.reqs {
		if rq.ackOf != nil {
			go p.byAck(ctx, rq.ackOf.acked, &rq.ackOf.ackRTT, rq.addrs[0], rq.Handshakes, func(sums []probe.Summary, err error) { rd.answer(rq, sums, nil, err) })
			continue
		}
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			rd.answer(rq, nil, nil, ctx.Err())
			if rq.opens != "" {
				p.endRead(rq.opens, rq.read, nil, ctx.Err())
			}
			if rq.acked != nil {
				rq.ackRTT = -1
				close(rq.acked)
			}
			continue
		}
		go rd.run(ctx, rq)
	}
}

// run makes rq in the slot start took for it.
func (rd *proberRound) run(ctx context.Context, rq *surveyRequest) {
	p := rd.p
	release := sync.OnceFunc(func() { <-p.sem })
	defer release()
	if rq.From == ClientNode {
		rd.probeFromHere(ctx, rq)
		return
	}
	var sums []probe.Summary
	var info *adminapi.Info
	var err error
	if rq.route.UDP() {
		var read sync.WaitGroup
		defer read.Wait()
		sums, info, err = rd.askOverUDP(ctx, rq, &read, release)
	}
	// Over HTTPS: a relay not asked over UDP, and one whose ask was not
	// acknowledged or could not be sent (not one asked over HTTPS
	// already, beside a reply overdue).
	if !rq.route.UDP() || err != nil && !errors.Is(err, errAskedBoth) {
		sums, info, err = rd.askOverHTTPS(ctx, rq, errors.Is(err, errNoAck))
	}
	if err != nil && rq.From == p.dst {
		sums = p.relaysProbeDst(ctx, rd.probes, rq.At, rq.Handshakes)
	}
	rd.answer(rq, sums, info, err)
}

// probeFromHere is this host's own probe; its slot is held until the
// read beside it (opens) has answered too.
func (rd *proberRound) probeFromHere(ctx context.Context, rq *surveyRequest) {
	p := rd.p
	measure := p.s.Measure
	if rq.toDst && p.s.MeasureDst != nil {
		measure = p.s.MeasureDst
	}
	var read sync.WaitGroup
	if rq.opens != "" {
		read.Go(func() {
			w, err := p.readHeld(ctx, p.relays[rq.opens])
			p.endRead(rq.opens, rq.read, &w, err)
		})
	}
	sums := []probe.Summary{p.s.sample(ctx, rq.addrs[0], rq.Handshakes, 0, measure)}
	rd.answer(rq, sums, nil, nil)
	read.Wait()
}

// askOverUDP asks rq's relay over UDP. The slot is released once the ask
// is acknowledged (the relay's handshakes go on without it) and the read
// beside it, if any (in read), has answered.
func (rd *proberRound) askOverUDP(ctx context.Context, rq *surveyRequest, read *sync.WaitGroup, release func()) ([]probe.Summary, *adminapi.Info, error) {
	p := rd.p
	if rq.opens != "" {
		read.Go(func() {
			w, err := p.readHeld(ctx, rq.relay)
			p.endRead(rq.opens, rq.read, &w, err)
		})
	}
	var ackOnce sync.Once
	ackEnds := func(rtt time.Duration) {
		ackOnce.Do(func() {
			if rq.acked != nil {
				rq.ackRTT = rtt
				close(rq.acked)
			}
		})
	}
	onAck := func(rtt time.Duration) {
		ackEnds(rtt)
		go func() {
			read.Wait()
			release()
		}()
	}
	sums, info, err := p.askUDP(ctx, rq.relay, rq.addrs, rq.Handshakes, rq.withInfo, rq.expectMs, rq.readDone, onAck)
	if err != nil {
		ackEnds(-1) // no acknowledgement: a probe answered by it is made as ever
	}
	return sums, info, err
}

// askOverHTTPS asks rq's relay over HTTPS. One asked over UDP whose ask
// or acknowledgement was lost (noAck: or UDP to it is filtered) is asked
// again over UDP beside the request over HTTPS when its route says so
// (an ask alone: the request over HTTPS costs two round trips more); a
// relay not acknowledged that answers is counted so.
func (rd *proberRound) askOverHTTPS(ctx context.Context, rq *surveyRequest, noAck bool) ([]probe.Summary, *adminapi.Info, error) {
	p := rd.p
	overHTTPS := func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
		return p.relayProbes(ctx, rq.relay, rq.addrs, rq.Handshakes, rq.withInfo)
	}
	var sums []probe.Summary
	var info *adminapi.Info
	var err error
	if noAck && rq.route.AgainOverUDP(false) {
		sums, info, err = p.firstOf(ctx, overHTTPS, func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
			return p.askAgain(ctx, rq.relay, rq.addrs, rq.Handshakes, rq.withInfo)
		})
	} else {
		sums, info, err = overHTTPS(ctx)
	}
	if noAck && err == nil {
		p.mu.Lock()
		p.unacked[rq.relay.Name] = true
		p.mu.Unlock()
	}
	return sums, info, err
}

// await waits until need of the round's requests have answered (or ctx
// ends), closes the round and returns its answers, NaN for those still
// pending.
func (rd *proberRound) await(ctx context.Context, need int) ([]float64, error) {
	p := rd.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	for (rd.done < need || rd.awaiting > 0) && err == nil {
		err = p.wait(ctx)
	}
	rd.closed = true
	p.flying += len(rd.reqs) - rd.done
	if err != nil {
		return rd.out, err
	}
	for _, rq := range rd.reqs {
		if !rq.done {
			for _, k := range rq.At {
				rd.out[k] = math.NaN()
			}
		}
	}
	return rd.out, nil
}

// errNoAck is an ask over UDP not acknowledged in time: by the end of the
// read beside it, or within ackWait.
var errNoAck = errors.New("no acknowledgement of the ask over UDP")

// ackWaitLocked is how long an ask to relay alone waits for its
// acknowledgement (p.sched.AckWait), within the survey's timeout. p.mu
// held.
func (p *surveyProber) ackWaitLocked(relay string) time.Duration {
	return p.sched.AckWait(relay, p.s.timeout())
}

// askUDP asks relay for its probes of addrs in one datagram (p.ask), and
// for its windows withInfo (returned as info). With readDone (the read
// of its windows beside it, which opens a connection in three round
// trips, where the ask is acknowledged in one), an ask not acknowledged
// once the read has ended is not getting through (the relay's UDP port is
// filtered, say); without, one not acknowledged within ackWait. Either
// fails with errNoAck at once, for the caller to ask over HTTPS, and the
// relay is asked over HTTPS from then on. expectMs is the probes'
// expected time, which tells a reply lost from one slow (replyWait).
func (p *surveyProber) askUDP(ctx context.Context, relay registry.Relay, addrs []string, handshakes int, withInfo bool, expectMs float64, readDone <-chan struct{}, onAck func(time.Duration)) ([]probe.Summary, *adminapi.Info, error) {
	p.mu.Lock()
	p.asked[relay.Name] = true
	wait := p.ackWaitLocked(relay.Name)
	p.mu.Unlock()
	pend, err := p.ask.Ask(ctx, relay.Name, relay.Admin, handshakes, p.s.timeout(), addrs, withInfo)
	if err != nil {
		return nil, nil, err
	}
	defer pend.Cancel()
	var deadline <-chan time.Time
	if readDone == nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	noAck := func() ([]probe.Summary, *adminapi.Info, error) {
		p.mu.Lock()
		p.https[relay.Name] = true
		p.mu.Unlock()
		return nil, nil, errNoAck
	}
	select {
	case <-pend.Acked():
	case <-readDone:
		select {
		case <-pend.Acked():
		default:
			return noAck()
		}
	case <-deadline:
		return noAck()
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	p.mu.Lock()
	p.sched.Acked(pend.AckRTT())
	p.sched.Measured(relay.Name, pend.AckRTT())
	p.mu.Unlock()
	if onAck != nil {
		onAck(pend.AckRTT())
	}
	return p.reply(ctx, pend, relay, addrs, handshakes, withInfo, expectMs)
}

// replyWaitLocked is how long after its acknowledgement an ask's reply
// may take before the same probes are asked again (p.sched.ReplyWait):
// expectMs is its probes' longest expected RTT (none for an ask for
// windows alone, targets 0), the bound the relay's probes'. p.mu held.
func (p *surveyProber) replyWaitLocked(handshakes int, expectMs float64, targets int) time.Duration {
	return p.sched.ReplyWait(targets, probesched.Expected(expectMs, handshakes), p.s.relayProbesTimeout(handshakes, 0))
}

// errAskedBoth is a relay's probes asked over UDP and over HTTPS, and
// neither answered: its caller does not ask a third time.
var errAskedBoth = errors.New("asked over UDP and over HTTPS")

// reply waits for the reply to an acknowledged ask. A reply lost on the
// way would be waited for till the relay's probes' bound (seconds, and
// the plan with it when its best chain rests on them): once it is later
// than replyWait, the same probes are asked again, over UDP (one round
// trip) and over HTTPS (three, on a new connection) at once, and the
// first answer of the three counts.
func (p *surveyProber) reply(ctx context.Context, pend *udpask.Pending, relay registry.Relay, addrs []string, handshakes int, withInfo bool, expectMs float64) ([]probe.Summary, *adminapi.Info, error) {
	acked := time.Now()
	p.mu.Lock()
	wait := p.replyWaitLocked(handshakes, expectMs, len(addrs))
	p.mu.Unlock()
	sums, info, err := p.firstOf(ctx,
		func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
			wctx, cancel := context.WithTimeout(ctx, p.s.relayProbesTimeout(handshakes, 0))
			defer cancel()
			rtts, recv, got, err := pend.Wait(wctx)
			if err != nil {
				return nil, nil, err
			}
			p.mu.Lock()
			p.sched.Replied(time.Since(acked))
			p.mu.Unlock()
			return p.udpSums(rtts, recv, handshakes), got, nil
		},
		func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
			overdue := time.NewTimer(wait)
			defer overdue.Stop()
			select {
			case <-overdue.C:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return p.firstOf(ctx,
				func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
					return p.relayProbes(ctx, relay, addrs, handshakes, withInfo)
				},
				func(ctx context.Context) ([]probe.Summary, *adminapi.Info, error) {
					return p.askAgain(ctx, relay, addrs, handshakes, withInfo)
				})
		})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errAskedBoth, err)
	}
	return sums, info, nil
}

// asker is one way of asking a relay for its probes.
type asker func(context.Context) ([]probe.Summary, *adminapi.Info, error)

// firstOf asks every way at once and returns the first answer without
// an error, the others cancelled; when all fail, the last error.
func (p *surveyProber) firstOf(ctx context.Context, ways ...asker) ([]probe.Summary, *adminapi.Info, error) {
	type answer struct {
		sums []probe.Summary
		info *adminapi.Info
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others, once one has answered
	answers := make(chan answer, len(ways))
	for _, ask := range ways {
		go func() {
			sums, info, err := ask(ctx)
			answers <- answer{sums, info, err}
		}()
	}
	var err error
	for range ways {
		a := <-answers
		if a.err == nil {
			return a.sums, a.info, nil
		}
		err = a.err
	}
	return nil, nil, err
}

// askAgain asks relay over UDP once more for the probes of an ask whose
// acknowledgement or reply was lost, in a new datagram (a new nonce: a
// relay refuses one it has seen), and waits for its reply within the
// relay's probes' bound.
func (p *surveyProber) askAgain(ctx context.Context, relay registry.Relay, addrs []string, handshakes int, withInfo bool) ([]probe.Summary, *adminapi.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, p.s.relayProbesTimeout(handshakes, 0))
	defer cancel()
	pend, err := p.ask.Ask(ctx, relay.Name, relay.Admin, handshakes, p.s.timeout(), addrs, withInfo)
	if err != nil {
		return nil, nil, err
	}
	defer pend.Cancel()
	rtts, recv, got, err := pend.Wait(ctx)
	if err != nil {
		return nil, nil, err
	}
	return p.udpSums(rtts, recv, handshakes), got, nil
}

// udpSums are an ask's reply as the survey's summaries.
func (p *surveyProber) udpSums(rtts []time.Duration, recv []udpask.Learnt, handshakes int) []probe.Summary {
	now := p.s.now()
	sums := make([]probe.Summary, len(rtts))
	for i, d := range rtts {
		sums[i] = probe.Summary{Samples: handshakes, LastAt: now, LearntRecvBps: recv[i].Bps, LearntRecvAgeSec: recv[i].AgeSec}
		if d < 0 {
			sums[i].Lost, sums[i].Loss, sums[i].LastErr = handshakes, 1, "no answer (asked over UDP)"
			continue
		}
		ms := float64(d) / float64(time.Millisecond)
		sums[i].MinMs, sums[i].MedianMs, sums[i].P90Ms = ms, ms, ms
	}
	return sums
}

// byAck answers this host's probe of addr (a relay's admin address) by
// the acknowledgement of an ask over UDP to that relay: acked is closed
// once it came (*rtt its round trip) or failed (*rtt negative); then the
// probe is made as ever, in one of p's slots.
func (p *surveyProber) byAck(ctx context.Context, acked <-chan struct{}, rtt *time.Duration, addr string, handshakes int, answer func([]probe.Summary, error)) {
	select {
	case <-acked:
	case <-ctx.Done():
		answer(nil, ctx.Err())
		return
	}
	if d := *rtt; d >= 0 {
		ms := float64(d) / float64(time.Millisecond)
		answer([]probe.Summary{{Samples: 1, MinMs: ms, MedianMs: ms, P90Ms: ms, LastAt: p.s.now()}}, nil)
		return
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		answer(nil, ctx.Err())
		return
	}
	defer func() { <-p.sem }()
	answer([]probe.Summary{p.s.sample(ctx, addr, handshakes, 0, p.s.Measure)}, nil)
}

// relayProbes asks relay for its probes of addrs in one request (and for
// its windows, withInfo).
func (p *surveyProber) relayProbes(ctx context.Context, relay registry.Relay, addrs []string, handshakes int, withInfo bool) ([]probe.Summary, *adminapi.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, p.s.relayProbesTimeout(handshakes, 0))
	defer cancel()
	// A relay that vanished fails its request now, not after its
	// targets' handshakes' bound.
	ctx, cancelConnect := adminapi.ConnectWithin(ctx, p.s.timeout())
	defer cancelConnect()
	return p.s.relayProbes(ctx, adminPath{first: relay}, addrs, handshakes, 0, withInfo)
}

// relaysProbeDst makes the destination's relay's probes at (of relays)
// once its request has failed: each of those relays probes the
// destination, as for any host, in a request of its own, all at once
// (within the failed request's slot: this is the exception, and a round
// has few such requests). Without it every chain would lose its last
// segment, and the plan could only go direct.
func (p *surveyProber) relaysProbeDst(ctx context.Context, probes []shortlist.Probe, at []int, handshakes int) []probe.Summary {
	p.mu.Lock()
	p.fellBack++
	p.mu.Unlock()
	sums := make([]probe.Summary, len(at))
	var wg sync.WaitGroup
	for j, k := range at {
		r, ok := p.relays[probes[k].To]
		if !ok {
			continue
		}
		wg.Go(func() {
			got, _, err := p.relayProbes(ctx, r, []string{p.target.Addr}, handshakes, false)
			if err == nil && len(got) == 1 {
				sums[j] = got[0]
			}
		})
	}
	wg.Wait()
	return sums
}

// Late hands over the answers that came after their round ended; with
// wait, once every request in flight has answered (or ctx ends).
func (p *surveyProber) Late(ctx context.Context, wait bool) ([]shortlist.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	for wait && p.flying > 0 && err == nil {
		err = p.wait(ctx)
	}
	out := p.late
	p.late = nil
	return out, err
}
