// Package survey gathers what the planner needs to plan one path from here:
// the fleet's relays and relay-to-relay RTTs from a registry, this host's
// RTT to every relay (probed from here), every relay's RTT to the
// destination (asked of the relays' admin API, /v1/probe), the direct RTT,
// and the receive windows (relays' /v1/info, this host's sysctls). The
// result is a planner.Matrix; the planner itself stays pure.
package survey

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/probesched"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/udpask"
	"github.com/relaymesh/relaymesh/planner"
)

// ClientNode is the matrix's name for the host the survey runs on.
const ClientNode = "client"

// Defaults.
const (
	DefaultCount = 3
	// DefaultTimeout bounds one handshake and one admin API call: plenty
	// for the longest Internet paths (~300 ms), short enough that a relay
	// that vanished delays a re-plan by seconds, not by a dial timeout.
	DefaultTimeout = 2 * time.Second
	// regionDstPort: a region destination is its relay's host; its admin
	// port is what the relays' probes and the direct probe connect to.
	probeGap = 100 * time.Millisecond
	// relayProbeGap spaces a relay's handshakes in a full survey, as
	// relayd's /v1/probe does by default.
	relayProbeGap = 200 * time.Millisecond
)

// Survey measures from this host. Set Reg; the rest has defaults.
type Survey struct {
	Reg        registry.Store
	AdminToken string // bearer token of the relays' admin APIs
	Count      int    // TCP handshakes per probed pair; default 3
	Timeout    time.Duration
	// Admin reaches the relays' admin APIs (HTTPS on a TLS fleet); nil
	// is plain HTTP with a 10 s timeout.
	Admin *adminapi.Client
	// ClientWindowBytes is this host's receive window; 0: read from
	// net.ipv4.tcp_rmem (half its max, what autotuning reaches).
	ClientWindowBytes int64
	// Measure times one round trip from here; default probe.HandshakeRTT.
	Measure func(ctx context.Context, addr string) (time.Duration, error)
	// MeasureDst times one round trip from here to the destination;
	// default Measure. A relay passes one that applies its destination
	// policy at connect: the survey must not connect where the tunnel
	// would be refused (its timing tells closed, open and filtered).
	MeasureDst func(ctx context.Context, addr string) (time.Duration, error)
	Now        func() time.Time
	// Mode is how to measure: ModeAuto ("", the default), ModeFull or
	// ModeShortlist.
	Mode Mode
	// Coordinates reads the relays' published network coordinates, by
	// relay name, for ModeShortlist and ModeAuto; nil: none known (every
	// survey measures every relay).
	Coordinates func(ctx context.Context) (map[string]registry.Coordinate, error)
	// Shortlist tunes a shortlist survey (candidates, first cut,
	// rounds); the zero value is shortlist's defaults.
	Shortlist shortlist.Config
	// Replans, when set, keeps what each destination's shortlist plan
	// learnt, and the next survey of that destination starts from it
	// (shortlist.Prior): about half a fresh plan's rounds, until its
	// FreshEvery. For a caller that surveys the same destinations again
	// and again from one host (relayctl connect); nil: every survey
	// plans afresh.
	Replans *Replans
	// Plan is the request the matrix will be planned for (its direction,
	// constraints and model; not its client and destination). A shortlist
	// plans with it: its candidates are only relays Include and Exclude
	// allow, so the matrix holds no other.
	Plan planner.Request
	// AskKey, when set, asks relays for a shortlist plan's probes (and
	// their windows) in one UDP datagram each (pkg/udpask; relayd
	// admin_udp), one round trip where a new HTTPS connection takes
	// three, until an HTTPS connection to the relay is up. A relay that
	// does not acknowledge an ask in time is asked over HTTPS (see
	// surveyProber). nil: HTTPS only.
	AskKey *udpask.Key
	// Own, when set, is what this host learnt of its own sends from the
	// traffic it carried (own.go): relayctl connect's. nil: nothing.
	Own OwnSends
}

// Target is the destination of a survey.
type Target struct {
	Name   string // the matrix node name: host:port as typed, or dst:<region>
	Addr   string // host:port the relays and this host probe
	Region string // set when the destination was given as a region
	Relay  string // the region's relay, when given as a region
}

// Result is a survey: the matrix to plan on, the relays it found, and what
// could not be measured.
type Result struct {
	Matrix *planner.Matrix
	Relays map[string]registry.Relay
	Target Target
	Notes  []string
	// Shortlisted says the matrix holds only a shortlist's candidates
	// (the relays Survey.Plan's Include and Exclude allow among them).
	Shortlisted bool
	// OwnDstWindow is the destination's window the survey took from
	// this host's own sends (Survey.Own); nil: it took none.
	OwnDstWindow *OwnWindow
}

// FromHere names the relays this host reached itself in the survey (the
// others only through relays that reached them).
func (r *Result) FromHere() []string {
	var names []string
	for _, p := range r.Matrix.Pairs {
		if _, ok := r.Relays[p.B]; ok && p.A == ClientNode {
			names = append(names, p.B)
		}
	}
	return names
}

// ResolveTarget turns --dst into a Target: host:port as is; a region or
// relay name into that relay's host (its admin address: a destination in a
// region is taken to be next to the region's relay; `relayctl bench`
// downloads from that relay's traffic source).
func ResolveTarget(dst string, relays []registry.Relay) (Target, error) {
	if _, port, err := net.SplitHostPort(dst); err == nil && port != "" {
		return Target{Name: dst, Addr: dst}, nil
	}
	var in []registry.Relay
	for _, r := range relays {
		if r.Name == dst || strings.EqualFold(r.Region, dst) {
			in = append(in, r)
		}
	}
	switch {
	case len(in) == 0:
		var regions []string
		for _, r := range relays {
			if r.Region != "" {
				regions = append(regions, r.Region)
			}
		}
		slices.Sort(regions)
		return Target{}, fmt.Errorf("--dst %q: not host:port, and no relay or region of that name (regions: %s)",
			dst, cmp.Or(strings.Join(slices.Compact(regions), ", "), "none"))
	case len(in) > 1:
		var names []string
		for _, r := range in {
			names = append(names, r.Name)
		}
		slices.Sort(names)
		return Target{}, fmt.Errorf("--dst %q: region has several relays (%s): name one", dst, strings.Join(names, ", "))
	}
	r := in[0]
	if r.Admin == "" {
		return Target{}, fmt.Errorf("--dst %q: relay %s has no admin address to measure against", dst, r.Name)
	}
	// The node is named apart from the relay (often called like its
	// region): the relay is a hop, the destination an end.
	return Target{Name: "dst:" + dst, Addr: r.Admin, Region: r.Region, Relay: r.Name}, nil
}

func (s *Survey) count() int { return cmp.Or(s.Count, DefaultCount) }
func (s *Survey) timeout() time.Duration {
	return cmp.Or(s.Timeout, DefaultTimeout)
}
func (s *Survey) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
func (s *Survey) admin() *adminapi.Client {
	if s.Admin != nil {
		return s.Admin
	}
	return adminapi.NewClient(10*time.Second, nil)
}

// Run surveys the path to dst. What the registry and the relays said that
// the planner would refuse (a malformed name, window or capacity) is left
// out of the matrix with a note, not every plan with it
// (planner.Sanitize).
func (s *Survey) Run(ctx context.Context, dst string) (*Result, error) {
	res, err := s.run(ctx, dst)
	if err != nil {
		return nil, err
	}
	s.applyOwn(ctx, res)
	before := map[string]bool{}
	for _, n := range res.Matrix.Nodes {
		before[n.Name] = true
	}
	for _, n := range planner.Sanitize(res.Matrix, ClientNode, res.Target.Name) {
		res.Notes = append(res.Notes, "registry or relay answer "+n)
	}
	for _, n := range res.Matrix.Nodes {
		delete(before, n.Name)
	}
	for name := range before { // dropped: no plan may route through them
		delete(res.Relays, name)
	}
	return res, nil
}

func (s *Survey) run(ctx context.Context, dst string) (*Result, error) {
	relays, err := s.Reg.Relays(ctx)
	if err != nil {
		return nil, err
	}
	target, err := ResolveTarget(dst, relays)
	if err != nil {
		return nil, err
	}
	res := &Result{Matrix: &planner.Matrix{}, Relays: map[string]registry.Relay{}, Target: target}
	now := s.now()
	m := res.Matrix
	m.Nodes = append(m.Nodes, planner.Node{Name: ClientNode, WindowBytes: s.clientWindow(), SendWindowBytes: hostnet.SendWindowBytes(),
		CongestionControl: hostnet.CongestionControl()})
	dstNode := planner.Node{Name: target.Name, Region: target.Region}
	usable := res.keepUsable(relays)
	if coords, ok, err := s.shortlisting(ctx, usable); err != nil {
		return nil, err
	} else if ok {
		// The shortlist plans on what the relays measured and probes the
		// rest: a registry's estimates of every other pair (a million at
		// 1,000 relays) are not read. It reads them once its first
		// probes are out (a registry may still be reading them:
		// registry.PairsLater).
		pairs := sync.OnceValues(func() ([]registry.Pair, error) { return registry.MeasuredPairs(ctx, s.Reg) })
		client := m.Nodes[0]
		if err := s.runShortlist(ctx, res, usable, coords, pairs, client, dstNode); err != nil {
			return nil, err
		}
		return res, nil
	}
	pairs, err := s.Reg.Pairs(ctx)
	if err != nil {
		return nil, err
	}
	infos, direct := s.measureAll(ctx, res, usable, pairs)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.fillFull(usable, infos, direct, pairs, dstNode, now)
	return res, nil
}

// keepUsable is the relays a plan may route through, each kept in
// res.Relays; a note says why each other is left out.
func (res *Result) keepUsable(relays []registry.Relay) []registry.Relay {
	var usable []registry.Relay
	for _, r := range relays {
		if r.Name == ClientNode || r.Name == res.Target.Name {
			res.Notes = append(res.Notes, fmt.Sprintf("relay %s: its name clashes with the client or the destination; left out", r.Name))
			continue
		}
		if !r.Healthy {
			res.Notes = append(res.Notes, fmt.Sprintf("relay %s: not healthy (%s); left out", r.Name, r.Health))
			continue
		}
		if r.Relay == "" {
			res.Notes = append(res.Notes, fmt.Sprintf("relay %s: no relay listener in the registry (fleet file relay:); left out", r.Name))
			continue
		}
		usable = append(usable, r)
		res.Relays[r.Name] = r
	}
	return usable
}

// relayInfo is what the full survey measured of one relay.
type relayInfo struct {
	window   windows
	toDst    probe.Summary
	fromHere probe.Summary
	infoErr  error
	dstErr   error
}

// measureAll measures the full survey's two phases. Phase 1: this host's
// RTT to every relay and to the destination (direct). Phase 2: every
// relay's window and RTT to the destination, from its admin API, or
// through one this host reaches (?via=) when this host cannot reach it.
// Each phase runs concurrently: a few round trips on a long path each.
func (s *Survey) measureAll(ctx context.Context, res *Result, usable []registry.Relay, pairs []registry.Pair) (infos []relayInfo, direct probe.Summary) {
	infos = make([]relayInfo, len(usable))
	var wg sync.WaitGroup
	for i, r := range usable {
		wg.Go(func() { infos[i].fromHere = s.sample(ctx, r.Admin, 0, probeGap, s.Measure) })
	}
	measureDst := s.MeasureDst
	if measureDst == nil {
		measureDst = s.Measure
	}
	wg.Go(func() { direct = s.sample(ctx, res.Target.Addr, 0, probeGap, measureDst) })
	wg.Wait()
	var reachable []registry.Relay
	for i, r := range usable {
		if infos[i].fromHere.Reachable() {
			reachable = append(reachable, r)
		}
	}
	for i, r := range usable {
		wg.Go(func() {
			in := &infos[i]
			ap := relayPath(r, in.fromHere.Reachable(), reachable, res.Relays, pairs)
			// The window and the relay's probes at once, each within a
			// bound of its own: one timeout, plus the probes' gaps.
			var inner sync.WaitGroup
			inner.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, s.timeout())
				defer cancel()
				in.window, in.infoErr = s.relayWindow(cctx, ap)
			})
			inner.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, s.timeout()+time.Duration(s.count())*probeGap)
				defer cancel()
				in.toDst, in.dstErr = s.relayProbe(cctx, ap, res.Target.Addr, 0, relayProbeGap)
			})
			inner.Wait()
		})
	}
	wg.Wait()
	return infos, direct
}

// fillFull makes res's matrix of what the full survey measured (infos,
// direct) and the pairs the fleet measured: every relay's node, this
// host's RTT to it and its RTT to the destination (unless the triangle
// check doubts it), the destination's node and the direct path.
func (res *Result) fillFull(usable []registry.Relay, infos []relayInfo, direct probe.Summary, pairs []registry.Pair, dstNode planner.Node, now time.Time) {
	m, target := res.Matrix, res.Target
	addPair := func(a, b string, sum probe.Summary, what string) {
		if !sum.Reachable() || sum.MedianMs <= 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: no answer (%s)", what, cmp.Or(sum.LastErr, "lost")))
			return
		}
		m.Pairs = append(m.Pairs, pairOfProbe(a, b, sum))
	}
	// What each relay (and this host) measured itself, the witnesses of
	// the triangle check (triangle.go).
	own := ownRTTs(pairs)
	dstMs := map[string]float64{}
	if direct.Reachable() {
		dstMs[ClientNode] = direct.MedianMs
	}
	for i, r := range usable {
		if infos[i].fromHere.Reachable() {
			own[[2]string{ClientNode, r.Name}] = infos[i].fromHere.MedianMs
		}
		if infos[i].dstErr == nil && infos[i].toDst.Reachable() {
			dstMs[r.Name] = infos[i].toDst.MedianMs
		}
	}
	for i, r := range usable {
		in := infos[i]
		node := planner.Node{Name: r.Name, Relay: true, Region: r.Region}
		in.window.apply(&node)
		if in.infoErr != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("relay %s: window unknown (%v)", r.Name, in.infoErr))
		}
		m.Nodes = append(m.Nodes, node)
		if r.Name == target.Relay {
			// The destination is that relay's host.
			in.window.apply(&dstNode)
		}
		addPair(ClientNode, r.Name, in.fromHere, "client -> "+r.Name)
		if in.dstErr != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("%s -> %s: %v", r.Name, target.Name, in.dstErr))
			continue
		}
		if claim, ok := dstMs[r.Name]; ok {
			var ws []witness
			for w, wDst := range dstMs {
				ws = append(ws, witness{name: w, toClaimantMs: own[[2]string{w, r.Name}], toTargetMs: wDst})
			}
			if bad, ok := checkClaim(r.Name, target.Name, claim, ws); ok {
				res.Notes = append(res.Notes, bad.note())
				continue
			}
		}
		addPair(r.Name, target.Name, in.toDst, r.Name+" -> "+target.Name)
	}
	m.Nodes = append(m.Nodes, dstNode)
	addPair(ClientNode, target.Name, direct, "client -> "+target.Name+" (direct)")
	rp, notes := relayPairs(pairs, res.Relays, own, now)
	m.Pairs = append(m.Pairs, rp...)
	res.Notes = append(res.Notes, notes...)
	learnt := map[string]windows{}
	for i, r := range usable {
		learnt[r.Name] = infos[i].window
	}
	applyLearnt(m, learnt)
}

// pairOfProbe is the pair a measured of b: its RTT and loss, and what a's
// tunnels learnt of b's sends to a (a relay's answer for a destination
// carries it: what the destination's segment carried, which no relay sends
// on), marked learnt by the receiver.
func pairOfProbe(a, b string, sum probe.Summary) planner.Pair {
	p := planner.Pair{A: a, B: b, RTTMs: sum.MedianMs, Loss: sum.Loss}
	if bps := sum.LearntRecvBps; bps > 0 && !math.IsInf(bps, 0) {
		p.BSendBps, p.BSendAgeSec, p.BSendSource = bps, max(sum.LearntRecvAgeSec, 0), planner.LearntByReceiver
	}
	return p
}

// sample times a few TCP handshakes from here to addr. The first failure
// ends it: a relay that vanished (its host down, its address gone) costs one
// timeout or unreachable, not one per sample, so a re-plan after a relay
// dies is quick.
//
// count is the number of handshakes; 0 is Count.
func (s *Survey) sample(ctx context.Context, addr string, count int, gap time.Duration, measure func(context.Context, string) (time.Duration, error)) probe.Summary {
	if measure == nil {
		measure = probe.HandshakeRTT
	}
	count = cmp.Or(count, s.count())
	w := probe.NewWindow(count)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(gap):
			}
		}
		mctx, cancel := context.WithTimeout(ctx, s.timeout())
		rtt, err := measure(mctx, addr)
		cancel()
		w.Add(rtt, err, time.Now())
		if err != nil {
			break
		}
	}
	return w.Summary()
}

// ownRTTs is every answering, probed pair by who measured it: [from, to].
func ownRTTs(pairs []registry.Pair) map[[2]string]float64 {
	own := map[[2]string]float64{}
	for _, p := range pairs {
		if p.Answering() && !p.Estimated && p.RTTMs > 0 {
			own[[2]string{p.From, p.To}] = p.RTTMs
		}
	}
	return own
}

// relayPairs turns the registry's directed relay-to-relay measurements into
// the planner's symmetric pairs: of A's measurement of B and B's of A a
// probed one counts before an estimated one; of two probed ones the higher
// RTT (a relay can make a pair of its own look worse, which only steers
// plans away from it, but not better than the other end measured it: a
// lie low, newest-stamped, would pull plans through the liar); of two
// estimated ones the newer. Pairs with no
// answer are left out (unusable paths). A measurement the triangle check
// does not believe (own: the witnesses' measurements) is dropped, and a
// note says so: the other end's measurement of the pair, if any, stands.
// The loss is the higher of the two ends'
// measured ones: each learns what it sent (relays learn loss from their
// tunnels), and one that sent nothing reports only its probes'; the pair
// says, each way, whether the sender's loss was learnt from traffic.
func relayPairs(pairs []registry.Pair, usable map[string]registry.Relay, own map[[2]string]float64, now time.Time) ([]planner.Pair, []string) {
	type key [2]string
	best := map[key]registry.Pair{}
	// worst[k] is the higher of the two ends' measured losses; learnt
	// says whose sends' loss was learnt from traffic: {from, to}.
	worst := map[key]float64{}
	learnt := map[key]bool{}
	// sends[{from, to}] is the rate from's tunnels to to were learnt to
	// sustain: only from learns it.
	sends := map[key]registry.Pair{}
	var notes []string
	for _, p := range pairs {
		if _, ok := usable[p.From]; !ok {
			continue
		}
		if _, ok := usable[p.To]; !ok || p.From == p.To {
			continue
		}
		if !p.Answering() && !p.Estimated || !(p.RTTMs > 0) {
			continue
		}
		if !p.Estimated {
			var ws []witness
			for w := range usable {
				ws = append(ws, witness{name: w, toClaimantMs: own[key{w, p.From}], toTargetMs: own[key{w, p.To}]})
			}
			ws = append(ws, witness{name: ClientNode, toClaimantMs: own[key{ClientNode, p.From}], toTargetMs: own[key{ClientNode, p.To}]})
			if bad, ok := checkClaim(p.From, p.To, p.RTTMs, ws); ok {
				notes = append(notes, bad.note())
				continue
			}
		}
		k := key{p.From, p.To}
		if k[0] > k[1] {
			k[0], k[1] = k[1], k[0]
		}
		if old, ok := best[k]; !ok || pairBefore(p, old) {
			best[k] = p
		}
		if !p.Estimated && p.Loss < 1 {
			worst[k] = max(worst[k], p.Loss)
			learnt[key{p.From, p.To}] = p.LossLearnt
		}
		if p.SendBps > 0 && !math.IsInf(p.SendBps, 0) {
			sends[key{p.From, p.To}] = p
		}
	}
	out := make([]planner.Pair, 0, len(best))
	source := func(from, to string) string {
		if learnt[key{from, to}] {
			return planner.LearntFromTunnels
		}
		return ""
	}
	for k, p := range best {
		loss := p.Loss
		if loss < 1 {
			loss = max(loss, worst[k])
		}
		out = append(out, planner.Pair{A: k[0], B: k[1], RTTMs: p.RTTMs, Loss: min(max(loss, 0), 1),
			ALossSource: source(k[0], k[1]), BLossSource: source(k[1], k[0]),
			Estimated: p.Estimated, AgeSec: max(now.Sub(p.UpdatedAt).Seconds(), 0),
			ASendBps: sends[k].SendBps, BSendBps: sends[key{k[1], k[0]}].SendBps})
		if a := sends[k]; a.SendBps > 0 {
			out[len(out)-1].ASendAgeSec, out[len(out)-1].ASendSource = max(now.Sub(a.SendAt).Seconds(), 0), sendSourceOf(a)
		}
		if b := sends[key{k[1], k[0]}]; b.SendBps > 0 {
			out[len(out)-1].BSendAgeSec, out[len(out)-1].BSendSource = max(now.Sub(b.SendAt).Seconds(), 0), sendSourceOf(b)
		}
	}
	slices.SortFunc(out, func(a, b planner.Pair) int { return cmp.Or(strings.Compare(a.A, b.A), strings.Compare(a.B, b.B)) })
	slices.Sort(notes)
	return out, notes
}

// pairBefore says whether p, a measurement of a relay pair, stands before
// old, the other end's (or an older one): see relayPairs.
func pairBefore(p, old registry.Pair) bool {
	switch {
	case p.Estimated != old.Estimated:
		return !p.Estimated
	case !p.Estimated && p.RTTMs != old.RTTMs:
		return p.RTTMs > old.RTTMs
	}
	return p.UpdatedAt.After(old.UpdatedAt)
}

// adminPath is how to reach r's admin API: the relay this host calls, and
// the relays it forwards through (?via=, ending with r). r itself when this
// host reaches it; else the shortest path over relay pairs that answer
// each other's probes, from a relay this host reaches.
type adminPath struct {
	first registry.Relay
	via   []string
}

func relayPath(r registry.Relay, direct bool, reachable []registry.Relay, usable map[string]registry.Relay, pairs []registry.Pair) adminPath {
	if direct || len(reachable) == 0 {
		return adminPath{first: r}
	}
	adj := map[string][]string{}
	for _, p := range pairs {
		if p.Answering() {
			adj[p.From] = append(adj[p.From], p.To)
		}
	}
	prev := map[string]string{}
	var queue []string
	for _, x := range reachable {
		prev[x.Name] = ""
		queue = append(queue, x.Name)
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == r.Name {
			var path []string
			for n := cur; n != ""; n = prev[n] {
				path = append([]string{n}, path...)
			}
			return adminPath{first: usable[path[0]], via: path[1:]}
		}
		for _, nb := range adj[cur] {
			if _, seen := prev[nb]; !seen {
				if _, ok := usable[nb]; ok {
					prev[nb] = cur
					queue = append(queue, nb)
				}
			}
		}
	}
	return adminPath{first: r} // no known path: try it directly, and say so
}

// adminGet GETs path about a relay over ap into v.
func (s *Survey) adminGet(ctx context.Context, ap adminPath, path string, v any) error {
	via := ap.first
	if len(ap.via) > 0 {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "via=" + url.QueryEscape(strings.Join(ap.via, ","))
	}
	body, err := s.admin().Get(ctx, via.Name, via.Admin, path, s.AdminToken, 1<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// CheckRelay asks whether r's relayd answers: its /healthz directly, or,
// with via (a relay this host reaches), its /v1/info through via's admin
// API (?via=, which needs the admin token): for relays only other relays
// reach.
func (s *Survey) CheckRelay(ctx context.Context, r registry.Relay, via *registry.Relay) error {
	if via != nil && via.Name != r.Name {
		var info struct{}
		return s.adminGet(ctx, adminPath{first: *via, via: []string{r.Name}}, adminapi.PathInfo, &info)
	}
	if r.Admin == "" {
		return errors.New("no admin address in the registry")
	}
	_, err := s.admin().Get(ctx, r.Name, r.Admin, adminapi.PathHealthz, "", 512)
	return err
}

// windows are what the planner reads of a relay's info: node, the model
// inputs of its planner.Node (every field but Name, Relay and Region,
// which the registry gives: its windows, capacity, congestion control,
// stripes), and what its tunnels to this host taught, for the pair: the
// rate they were learnt to sustain, bits/s (0 = none learnt), and the
// share of what they sent that went again (learntLossOK false: none
// learnt).
type windows struct {
	node             planner.Node
	learntToUsBps    float64
	learntToUsAgeSec float64
	learntLossToUs   float64
	learntLossOK     bool
}

// apply sets n's model inputs to w's, keeping its name, relay and region:
// the whole node, so that an input added to planner.Node needs no edit
// here, only in windowsOf.
func (w windows) apply(n *planner.Node) {
	in := w.node
	in.Name, in.Relay, in.Region = n.Name, n.Relay, n.Region
	*n = in
}

// applyLearnt sets, on each pair between this host and a relay, what the
// relay's tunnels to this host taught (learnt, by relay name): the rate
// they sustained and its age, and the share of their bytes sent again,
// which the pair's loss (the higher of the two ways) then covers, marked
// learnt for the relay's sends.
func applyLearnt(m *planner.Matrix, learnt map[string]windows) {
	for i := range m.Pairs {
		p := &m.Pairs[i]
		switch {
		case p.A == ClientNode:
			w := learnt[p.B]
			if w.learntToUsBps > 0 {
				p.BSendBps, p.BSendAgeSec = w.learntToUsBps, w.learntToUsAgeSec
			}
			if w.learntLossOK && p.Loss < 1 {
				p.Loss, p.BLossSource = max(p.Loss, w.learntLossToUs), planner.LearntFromTunnels
			}
		case p.B == ClientNode:
			w := learnt[p.A]
			if w.learntToUsBps > 0 {
				p.ASendBps, p.ASendAgeSec = w.learntToUsBps, w.learntToUsAgeSec
			}
			if w.learntLossOK && p.Loss < 1 {
				p.Loss, p.ALossSource = max(p.Loss, w.learntLossToUs), planner.LearntFromTunnels
			}
		}
	}
}

// relayWindow is the receive window the relay's autotuning reaches, the
// send window its tcp_wmem allows, and the capacity its operator declared.
func (s *Survey) relayWindow(ctx context.Context, ap adminPath) (windows, error) {
	var info adminapi.Info
	if err := s.adminGet(ctx, ap, adminapi.PathInfo, &info); err != nil {
		return windows{}, err
	}
	return windowsOf(info, len(ap.via) > 0), nil
}

// windowsOf is what the planner reads of a relay's info (its /v1/info,
// /v1/probe?info=1's or a UDP ask's reply's); forwarded: info came
// through ?via=, so what the relay learnt of the path to its asker is not
// of this host's.
func windowsOf(info adminapi.Info, forwarded bool) windows {
	l := info.Limits
	w := windows{node: planner.Node{
		WindowBytes:       l.WindowBytesApprox,
		SendWindowBytes:   hostnet.SendWindowOfWmem(l.TCPWmemMaxBytes),
		LimitBps:          max(info.CapacityBps, 0),
		CongestionControl: cmp.Or(info.CongestionControl, l.CongestionControl),
		MaxStripes:        max(info.MaxStripes, 0),
	}}
	if !forwarded && info.LearntSendBpsToYou > 0 && !math.IsInf(info.LearntSendBpsToYou, 0) {
		w.learntToUsBps, w.learntToUsAgeSec = info.LearntSendBpsToYou, max(info.LearntSendAgeSec, 0)
	}
	if loss, _, ok := info.LearntLoss(); !forwarded && ok && loss >= 0 && loss < 1 {
		w.learntLossToUs, w.learntLossOK = loss, true
	}
	return w
}

// relayProbe asks the relay for its RTT to addr: count handshakes (0:
// Count), gap apart.
func (s *Survey) relayProbe(ctx context.Context, ap adminPath, addr string, count int, gap time.Duration) (probe.Summary, error) {
	var out adminapi.ProbeAnswer
	err := s.adminGet(ctx, ap, adminapi.PathProbe+"?"+s.probeQuery([]string{addr}, count, gap).Encode(), &out)
	if out.Summary == nil {
		return probe.Summary{}, err
	}
	return *out.Summary, err
}

// probeQuery is /v1/probe's query for addrs: count handshakes each (0:
// Count), gap apart, each lost after this host's Timeout, as its own are.
func (s *Survey) probeQuery(addrs []string, count int, gap time.Duration) url.Values {
	return url.Values{"target": addrs, "count": {strconv.Itoa(cmp.Or(count, s.count()))},
		"gap_ms": {strconv.FormatInt(gap.Milliseconds(), 10)}, "timeout_ms": {strconv.FormatInt(s.timeout().Milliseconds(), 10)}}
}

// relayProbesTimeout bounds a /v1/probe request of count handshakes a
// target (0: Count), gap apart (probesched.ProbesTimeout of Timeout, as
// probeQuery asks the relay to time them). A request given up on
// sooner loses every target's answer for one that does not answer. Its
// connection is bounded apart (adminapi.ConnectWithin): a relay that does
// not answer at all should not hold a plan that long.
func (s *Survey) relayProbesTimeout(count int, gap time.Duration) time.Duration {
	return probesched.ProbesTimeout(s.timeout(), cmp.Or(count, s.count()), gap)
}

// relayProbes asks the relay for its RTT to each of addrs in one request
// (/v1/probe with a target each, at most probe.MaxTargets): count
// handshakes to each, gap apart, the targets at once. A target the relay
// could not measure has a Summary with LastErr. A relayd from before
// batched probes answers the first target only; the others are then asked
// one request each. With withInfo the request asks for the relay's
// /v1/info too (info=1), returned as info: nil from a relayd from before
// it.
func (s *Survey) relayProbes(ctx context.Context, ap adminPath, addrs []string, count int, gap time.Duration, withInfo bool) (sums []probe.Summary, info *adminapi.Info, err error) {
	if len(addrs) == 1 && !withInfo {
		sum, err := s.relayProbe(ctx, ap, addrs[0], count, gap)
		return []probe.Summary{sum}, nil, err
	}
	var out adminapi.ProbeAnswer
	q := s.probeQuery(addrs, count, gap)
	if withInfo {
		q.Set("info", "1")
	}
	if err := s.adminGet(ctx, ap, adminapi.PathProbe+"?"+q.Encode(), &out); err != nil {
		return nil, nil, err
	}
	info = out.Info
	sums = make([]probe.Summary, len(addrs))
	if out.Results == nil {
		// An older relayd: it measured the first target.
		if out.Summary != nil {
			sums[0] = *out.Summary
		}
		var wg sync.WaitGroup
		for i := 1; i < len(addrs); i++ {
			wg.Go(func() {
				sum, err := s.relayProbe(ctx, ap, addrs[i], count, gap)
				if err != nil {
					sum.LastErr = err.Error()
				}
				sums[i] = sum
			})
		}
		wg.Wait()
		return sums, info, nil
	}
	if len(out.Results) != len(addrs) {
		return nil, nil, fmt.Errorf("%s answered %d of %d targets", adminapi.PathProbe, len(out.Results), len(addrs))
	}
	for i, r := range out.Results {
		switch {
		case r.Summary != nil:
			sums[i] = *r.Summary
		default:
			sums[i].LastErr = cmp.Or(r.Error, "no answer")
		}
	}
	return sums, info, nil
}

// clientWindow is this host's receive window: configured, or what
// autotuning reaches with net.ipv4.tcp_rmem's max (the relays report theirs
// the same way).
func (s *Survey) clientWindow() int64 {
	if s.ClientWindowBytes > 0 {
		return s.ClientWindowBytes
	}
	return hostnet.RecvWindowBytes()
}

// ErrNoRelays is returned by callers that need at least one usable relay.
var ErrNoRelays = errors.New("no usable relay in the registry")
