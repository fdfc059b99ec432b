package survey

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/udpask"
	"github.com/relaymesh/relaymesh/planner"
)

// planeFleet is n relays on a 200×100 ms plane, each with an admin API
// whose /v1/probe answers the plane distance to the target, the client at
// the left end and the destination at the right. RTT = distance in ms.
type planeFleet struct {
	pos    map[string][2]float64 // by admin address, and "client"
	reg    fixedRegistry
	coords map[string]*coordinate.Coordinate
	probes atomic.Int64 // /v1/probe calls
	mu     sync.Mutex
	asked  map[string]bool // relays (admin addresses) that got a /v1/probe
	// requests counts /v1/probe requests by relay (admin address);
	// legacy makes the relays answer as a relayd from before batched
	// probes (the first target only, no results).
	requests map[string]int
	legacy   bool
	// infoReads counts /v1/info requests by relay (admin address);
	// noInfo makes the relays answer /v1/probe?info=1 without their info,
	// as a relayd from before it (legacy ones never carry it).
	infoReads map[string]int
	noInfo    bool
	delay     map[string]time.Duration // before a relay's /v1/probe answers, by admin address
	broken    map[string]bool          // relays (admin addresses) whose /v1/probe answers 503
	// silent are targets (admin addresses) that never answer a
	// handshake: a relay's probe of one is lost after the request's
	// timeout_ms (2 s without it, relayd's default probe.timeout).
	silent map[string]bool
	// lies are relays (admin addresses) whose /v1/probe answers this
	// RTT, ms, to every target; noise scales every relay's answers by a
	// random factor in [1-noise, 1+noise].
	lies  map[string]float64
	noise float64
}

const planeInfo = `{"limits":{"window_bytes_approx":1000000}}`

const planeDst = "dst.example:443"

func newPlaneFleet(t *testing.T, n int) *planeFleet {
	f := &planeFleet{pos: map[string][2]float64{"client": {0, 50}, planeDst: {200, 50}}, coords: map[string]*coordinate.Coordinate{}, asked: map[string]bool{}, requests: map[string]int{}, infoReads: map[string]int{}}
	rnd := rand.New(rand.NewPCG(5, 5))
	for i := range n {
		xy := [2]float64{rnd.Float64() * 200, rnd.Float64() * 100}
		var self string
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/info":
				f.mu.Lock()
				f.infoReads[self]++
				f.mu.Unlock()
				_, _ = w.Write([]byte(planeInfo))
			case "/v1/probe":
				f.probes.Add(1)
				f.mu.Lock()
				f.asked[self] = true
				f.requests[self]++
				legacy, delay, noInfo, broken := f.legacy, f.delay[self], f.noInfo, f.broken[self]
				f.mu.Unlock()
				time.Sleep(delay)
				if broken {
					http.Error(w, "broken", http.StatusServiceUnavailable)
					return
				}
				targets := r.URL.Query()["target"]
				if legacy { // a relayd from before batched probes: the first target only
					targets = targets[:1]
				}
				var results []map[string]any
				for _, target := range targets {
					f.mu.Lock()
					silent := f.silent[target]
					f.mu.Unlock()
					if silent {
						wait := 2 * time.Second
						if ms, err := strconv.Atoi(r.URL.Query().Get("timeout_ms")); err == nil {
							wait = time.Duration(ms) * time.Millisecond
						}
						time.Sleep(wait)
						results = append(results, map[string]any{"target": target, "summary": probe.Summary{Samples: 1, Lost: 1, LastErr: "i/o timeout"}})
						continue
					}
					ms := f.distance(self, target)
					f.mu.Lock()
					lie, lies := f.lies[self]
					ms *= 1 + f.noise*(2*rand.Float64()-1)
					f.mu.Unlock()
					if lies {
						ms = lie
					}
					results = append(results, map[string]any{"target": target, "summary": probe.Summary{Samples: 1, MedianMs: ms, MinMs: ms}})
				}
				answer := map[string]any{"summary": results[0]["summary"], "results": results}
				if legacy {
					delete(answer, "results")
				}
				if r.URL.Query().Get("info") == "1" && !legacy && !noInfo {
					answer["info"] = json.RawMessage(planeInfo)
				}
				_ = json.NewEncoder(w).Encode(answer)
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(s.Close)
		self = strings.TrimPrefix(s.URL, "http://")
		f.pos[self] = xy
		name := fmt.Sprintf("r%02d", i)
		f.reg.relays = append(f.reg.relays, registry.Relay{Name: name, Admin: self, Relay: "x:1", Healthy: true})
		c := coordinate.NewCoordinate(coordinate.DefaultConfig())
		c.Vec[0], c.Vec[1], c.Height = xy[0]/1000, xy[1]/1000, 0
		f.coords[name] = c
	}
	return f
}

func (f *planeFleet) distance(a, b string) float64 {
	pa, pb := f.pos[a], f.pos[b]
	return math.Hypot(pa[0]-pb[0], pa[1]-pb[1])
}

func (f *planeFleet) survey(mode Mode) *Survey {
	return &Survey{Reg: f.reg, Count: 1, ClientWindowBytes: 1000000, Mode: mode,
		Measure: func(_ context.Context, addr string) (time.Duration, error) {
			return time.Duration(f.distance("client", addr) * float64(time.Millisecond)), nil
		},
		Coordinates: func(context.Context) (map[string]registry.Coordinate, error) {
			out := map[string]registry.Coordinate{}
			for name, c := range f.coords {
				out[name] = registry.Coordinate{Relay: name, Coord: c}
			}
			return out, nil
		},
	}
}

// oracle plans on the true matrix of every relay.
func (f *planeFleet) oracle(t *testing.T) []string {
	return f.oracleTo(t, planeDst, planeDst)
}

// oracleTo plans on the true matrix of every relay to the destination
// named dst at addr (a relay's admin address: its host, which that relay
// is no hop to).
func (f *planeFleet) oracleTo(t *testing.T, dst, addr string) []string {
	m := &planner.Matrix{Nodes: []planner.Node{{Name: ClientNode, WindowBytes: 1000000}, {Name: dst, WindowBytes: 1000000}}}
	at := map[string]string{ClientNode: "client", dst: addr}
	names := []string{ClientNode, dst}
	for _, r := range f.reg.relays {
		if r.Admin == addr {
			continue
		}
		m.Nodes = append(m.Nodes, planner.Node{Name: r.Name, Relay: true, WindowBytes: 1000000})
		at[r.Name] = r.Admin
		names = append(names, r.Name)
	}
	for i, a := range names {
		for _, b := range names[i+1:] {
			m.Pairs = append(m.Pairs, planner.Pair{A: a, B: b, RTTMs: f.distance(at[a], at[b])})
		}
	}
	res, err := planner.Search(m, planner.Request{Client: ClientNode, Destination: dst})
	if err != nil {
		t.Fatal(err)
	}
	return res.Best.Chain
}

// A fleet whose relays publish coordinates is surveyed by shortlist: only
// the landmarks and the candidates (and the first cut they came from) are
// asked to probe, and the plan over the candidates is the plan over the
// whole true matrix.
//
// The relays' windows come with their first answer (/v1/probe?info=1), and
// only the relays described that made no probe are read (/v1/info); from
// relayds from before info=1 (noInfo), every relay described is read.
func TestSurveyShortlistsALargeFleet(t *testing.T) {
	for _, noInfo := range []bool{false, true} {
		t.Run(fmt.Sprintf("noInfo=%v", noInfo), func(t *testing.T) { testSurveyShortlistsALargeFleet(t, noInfo) })
	}
}

func testSurveyShortlistsALargeFleet(t *testing.T, noInfo bool) {
	f := newPlaneFleet(t, 400)
	f.noInfo = noInfo
	s := f.survey(ModeAuto)
	// Every round waits for its last answer: which of this fleet's
	// requests (all about as fast) fall outside a round's quorum is
	// chance, and an end left behind ranks at its estimate times the
	// caution, so the candidates, and at times the plan, would differ
	// run to run. Rounds that end at their quorum are tested on their
	// own (TestProberEndsARoundAtItsQuorum, shortlist's
	// TestPlanTakesLateAnswers) and judged in the simulator.
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1
	// Without info=1 the first cut's 384 /v1/info reads follow its
	// probes, 256 at once: under the race detector on a loaded machine a
	// 2 s timeout left some relays' windows unread, and this test is about
	// the plan.
	s.Timeout = 30 * time.Second
	res, err := s.Run(context.Background(), planeDst)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(res.Notes, "\n")
	// 48 candidates, and the relays the neighbourhood searches added.
	var over, of int
	if i := strings.Index(notes, "shortlist: planned over "); i < 0 {
		t.Fatalf("notes %q: want the shortlist's", notes)
	} else if _, err := fmt.Sscanf(notes[i:], "shortlist: planned over %d of %d relays", &over, &of); err != nil || over < 48 || over >= 400 || of != 400 {
		t.Fatalf("notes %q: want the shortlist's, over 48 or more of 400 relays", notes)
	}
	relays := 0
	for _, n := range res.Matrix.Nodes {
		if n.Relay {
			relays++
			if n.WindowBytes != 1000000 {
				t.Errorf("relay %s: window %d, want its /v1/info's 1000000", n.Name, n.WindowBytes)
			}
			if _, ok := res.Relays[n.Name]; !ok {
				t.Errorf("relay %s in the matrix but not in the result's relays", n.Name)
			}
		}
	}
	if relays != over || len(res.Relays) != over {
		t.Errorf("%d relays in the matrix, %d in the result: want the %d candidates", relays, len(res.Relays), over)
	}
	for _, r := range f.reg.relays {
		reads, asked := f.infoReads[r.Admin], f.asked[r.Admin]
		switch {
		case reads > 1:
			t.Errorf("relay %s: %d /v1/info reads, want one at most", r.Name, reads)
		case reads == 1 && asked && !noInfo:
			t.Errorf("relay %s: its /v1/info read, though it was asked to probe (its answer carries it)", r.Name)
		}
	}
	// Only the landmarks, the coordinates' first cut (whose ends are
	// measured) and the neighbours searched are asked to probe.
	if n, most := len(f.asked), 8+shortlist.DefaultFirstCut+over-shortlist.DefaultCandidates; n == 0 || n > most {
		t.Errorf("%d relays asked to probe: want the 8 landmarks, the first cut and the neighbours searched, %d at most", n, most)
	}
	plan, err := planner.Search(res.Matrix, planner.Request{Client: ClientNode, Destination: planeDst})
	if err != nil {
		t.Fatal(err)
	}
	if want := f.oracle(t); !slices.Equal(plan.Best.Chain, want) {
		t.Errorf("plan %v, the whole true matrix's %v", plan.Best.Chain, want)
	}
	for _, s := range plan.Best.Segments {
		if s.Estimated {
			t.Errorf("segment %s-%s is estimated: the shortlist measures the plan's segments", s.From, s.To)
		}
	}
}

// A destination given as a relay (or its region) is that relay's host, and
// the relay probes the first cut's ends to it: none of the first cut is
// asked to probe in that round, and their windows are read over the
// connections this host opens beside its probes of them. When the
// destination's relay does not answer, the relays of the first cut probe
// the destination, as for any host, and the plan is as good.
func TestSurveyTheDestinationsRelayProbesTheFirstCut(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			f := newPlaneFleet(t, 400)
			// The destination: the relay farthest from the client.
			dst := slices.MaxFunc(f.reg.relays, func(a, b registry.Relay) int { return cmp.Compare(f.pos[a.Admin][0], f.pos[b.Admin][0]) })
			if broken {
				f.broken = map[string]bool{dst.Admin: true}
			}
			s := f.survey(ModeAuto)
			s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1 // as in TestSurveyShortlistsALargeFleet
			s.Timeout = 30 * time.Second
			res, err := s.Run(context.Background(), dst.Name)
			if err != nil {
				t.Fatal(err)
			}
			notes := strings.Join(res.Notes, "\n")
			fellBack := strings.Contains(notes, "did not answer")
			if fellBack != broken {
				t.Errorf("notes %q: a note of the destination's relay failing: %v, want %v", notes, fellBack, broken)
			}
			plan, err := planner.Search(res.Matrix, planner.Request{Client: ClientNode, Destination: res.Target.Name})
			if err != nil {
				t.Fatal(err)
			}
			if want := f.oracleTo(t, res.Target.Name, dst.Admin); !slices.Equal(plan.Best.Chain, want) {
				t.Errorf("plan %v, the whole true matrix's %v", plan.Best.Chain, want)
			}
			for _, n := range res.Matrix.Nodes {
				if n.Relay && n.WindowBytes != 1000000 {
					t.Errorf("relay %s: window %d, want its /v1/info's 1000000", n.Name, n.WindowBytes)
				}
			}
			for _, r := range f.reg.relays {
				if reads := f.infoReads[r.Admin]; reads > 1 {
					t.Errorf("relay %s: %d /v1/info reads, want one at most", r.Name, reads)
				}
			}
			// The first cut's relays were not asked for their ends: the
			// relays asked are the candidates' later rounds' (and, when
			// it failed, the destination's relay's first cut).
			asked := len(f.asked)
			if broken {
				if asked < shortlist.DefaultFirstCut {
					t.Errorf("%d relays asked to probe: want the first cut's %d at least, the destination's relay failing", asked, shortlist.DefaultFirstCut)
				}
				return
			}
			// Every relay of the first cut is asked when each probes the
			// destination (the broken case above); here the later rounds
			// asked 160 to 196 relays in 15 runs (the count moves with the
			// order answers arrive in), so the bound is three in four.
			if asked >= shortlist.DefaultFirstCut*3/4 {
				t.Errorf("%d relays asked to probe: want far fewer than the first cut's %d", asked, shortlist.DefaultFirstCut)
			}
			if n := f.requests[dst.Admin]; n < shortlist.DefaultFirstCut/probe.MaxTargets {
				t.Errorf("the destination's relay got %d requests: want one for every %d of the first cut's %d at least", n, probe.MaxTargets, shortlist.DefaultFirstCut)
			}
		})
	}
}

func TestSurveyModes(t *testing.T) {
	f := newPlaneFleet(t, 40)
	// --survey full measures every relay, coordinates or not.
	res, err := f.survey(ModeFull).Run(context.Background(), planeDst)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(res.Notes, "\n"), "shortlist") || f.probes.Load() != 40 {
		t.Errorf("full: %d relay probes, notes %q: want 40 and no shortlist", f.probes.Load(), res.Notes)
	}
	// --survey shortlist on a fleet that publishes no coordinates says
	// what would.
	sv := f.survey(ModeShortlist)
	sv.Coordinates = nil
	if _, err := sv.Run(context.Background(), planeDst); err == nil || !strings.Contains(err.Error(), "probe.mode: coordinates") {
		t.Errorf("shortlist without coordinates: %v", err)
	}
	if _, err := ParseMode("mesh"); err == nil || !strings.Contains(err.Error(), "auto, full or shortlist") {
		t.Errorf("ParseMode(mesh): %v", err)
	}
}

// pairCountingRegistry counts its reads of the pairs, with the estimates
// (Pairs) and without (MeasuredPairs).
type pairCountingRegistry struct {
	fixedRegistry
	all, measured *atomic.Int32
	// probesAtRead is the relays' probes made when MeasuredPairs was
	// first asked (-1: not asked).
	probes       *atomic.Int64
	probesAtRead *atomic.Int64
}

func (r pairCountingRegistry) Pairs(ctx context.Context) ([]registry.Pair, error) {
	r.all.Add(1)
	return r.fixedRegistry.Pairs(ctx)
}

func (r pairCountingRegistry) MeasuredPairs(ctx context.Context) ([]registry.Pair, error) {
	r.measured.Add(1)
	r.probesAtRead.CompareAndSwap(-1, r.probes.Load())
	return r.fixedRegistry.Pairs(ctx)
}

// The shortlist plans on the pairs the relays measured: it reads those
// alone, not a registry's estimates of every other pair (a million at
// 1,000 relays), and once the landmarks' probes are out (a registry may
// still be reading them); the full survey reads both.
func TestSurveyShortlistReadsTheMeasuredPairsOnly(t *testing.T) {
	f := newPlaneFleet(t, 40)
	for _, mode := range []Mode{ModeShortlist, ModeFull} {
		reg := pairCountingRegistry{fixedRegistry: f.reg, all: new(atomic.Int32), measured: new(atomic.Int32),
			probes: &f.probes, probesAtRead: new(atomic.Int64)}
		reg.probesAtRead.Store(-1)
		s := f.survey(mode)
		s.Reg = reg
		if _, err := s.Run(context.Background(), planeDst); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		all, measured := reg.all.Load(), reg.measured.Load()
		if mode == ModeShortlist && (all != 0 || measured != 1) || mode == ModeFull && (all != 1 || measured != 0) {
			t.Errorf("%s: %d reads with the estimates, %d of the measured pairs alone", mode, all, measured)
		}
		if at := reg.probesAtRead.Load(); mode == ModeShortlist && at < 1 {
			t.Errorf("%s: the measured pairs read with %d of the relays' probes made; want after the landmarks'", mode, at)
		}
	}
}

// A round's probes from one relay go to it in one request, answered in
// order; a relayd from before batched probes answers the first, and the
// rest are asked one by one.
func TestProberBatchesARelaysProbes(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		f := newPlaneFleet(t, 3)
		f.legacy = legacy
		s := f.survey(ModeShortlist)
		s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1 // every answer in its round
		relays := map[string]registry.Relay{}
		for _, r := range f.reg.relays {
			relays[r.Name] = r
		}
		p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
		probes := []shortlist.Probe{
			{From: "r00", To: planeDst}, {From: ClientNode, To: "r01"}, {From: "r00", To: "r01"},
			{From: "r01", To: planeDst}, {From: "r00", To: "r02"}, {From: ClientNode, To: planeDst},
		}
		got, err := p.Probe(context.Background(), probes)
		if err != nil {
			t.Fatal(err)
		}
		addr := func(name string) string {
			if name == ClientNode {
				return "client"
			}
			if r, ok := relays[name]; ok {
				return r.Admin
			}
			return name
		}
		for i, pr := range probes {
			if want := f.distance(addr(pr.From), addr(pr.To)); math.Abs(got[i]-want) > 1e-6 {
				t.Errorf("legacy %v: probe %d (%s→%s) = %.3f ms, want %.3f", legacy, i, pr.From, pr.To, got[i], want)
			}
		}
		wantR00 := 1 // three targets, one request
		if legacy {
			wantR00 = 3 // the batch, then the two it did not answer
		}
		if n := f.requests[relays["r00"].Admin]; n != wantR00 {
			t.Errorf("legacy %v: r00 got %d requests, want %d", legacy, n, wantR00)
		}
		if n := f.requests[relays["r01"].Admin]; n != 1 {
			t.Errorf("legacy %v: r01 got %d requests, want 1", legacy, n)
		}
	}
}

// A relay's probe of a target that does not answer (a relay that
// vanished) is lost after the request's timeout_ms, and the request waits
// for it: the relay's other probes in the request still answer.
func TestProberKeepsARequestsAnswersPastASilentTarget(t *testing.T) {
	f := newPlaneFleet(t, 3)
	s := f.survey(ModeShortlist)
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1
	s.Timeout = 300 * time.Millisecond
	relays := map[string]registry.Relay{}
	for _, r := range f.reg.relays {
		relays[r.Name] = r
	}
	f.silent = map[string]bool{relays["r01"].Admin: true}
	p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
	probes := []shortlist.Probe{{From: "r00", To: "r01"}, {From: "r00", To: "r02"}, {From: "r00", To: planeDst}}
	got, err := p.Probe(context.Background(), probes)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 {
		t.Errorf("r00→r01 (silent) = %v ms, want 0 (lost)", got[0])
	}
	for i, to := range []string{relays["r02"].Admin, planeDst} {
		if want := f.distance(relays["r00"].Admin, to); math.Abs(got[i+1]-want) > 1e-6 {
			t.Errorf("probe %d (%s) = %v ms, want %.3f: a silent target cost the request's other answers", i+1, probes[i+1].To, got[i+1], want)
		}
	}
}

// A round ends once its quorum of requests has answered: the slow relay's
// probes are pending (NaN), and Late hands them over when they are in.
func TestProberEndsARoundAtItsQuorum(t *testing.T) {
	f := newPlaneFleet(t, 3)
	s := f.survey(ModeShortlist)
	s.Shortlist.FirstQuorum = 0.5 // the probes below are the plan's first round
	relays := map[string]registry.Relay{}
	for _, r := range f.reg.relays {
		relays[r.Name] = r
	}
	slow := relays["r02"].Admin
	f.delay = map[string]time.Duration{slow: 400 * time.Millisecond}
	p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
	probes := []shortlist.Probe{{From: "r02", To: planeDst}, {From: "r00", To: planeDst}, {From: "r02", To: "r01"}, {From: "r01", To: planeDst}}
	start := time.Now()
	got, err := p.Probe(context.Background(), probes)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 400*time.Millisecond {
		t.Errorf("the round took %v: it waited for the slow relay", took)
	}
	if !shortlist.Pending(got[0]) || !shortlist.Pending(got[2]) || got[1] <= 0 || got[3] <= 0 {
		t.Fatalf("got %v: want the slow relay's two probes pending, the others answered", got)
	}
	late, err := p.Late(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(late) != 2 {
		t.Fatalf("late answers %+v: want the slow relay's two", late)
	}
	for _, a := range late {
		to := planeDst
		if a.Probe.To != planeDst {
			to = relays[a.Probe.To].Admin
		}
		if want := f.distance(slow, to); a.Probe.From != "r02" || math.Abs(a.RTTMs-want) > 1e-6 {
			t.Errorf("late answer %+v: want r02's probe, %.3f ms", a, want)
		}
	}
	if again, _ := p.Late(context.Background(), false); len(again) != 0 {
		t.Errorf("late answers handed over twice: %+v", again)
	}
}

// An awaited request holds its round past the quorum: the slow relay's
// probe that verify waits for answers in the round, not late.
func TestProberWaitsForAnAwaitedRequest(t *testing.T) {
	f := newPlaneFleet(t, 3)
	s := f.survey(ModeShortlist)
	s.Shortlist.FirstQuorum = 0.5
	relays := map[string]registry.Relay{}
	for _, r := range f.reg.relays {
		relays[r.Name] = r
	}
	f.delay = map[string]time.Duration{relays["r02"].Admin: 300 * time.Millisecond}
	p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
	probes := []shortlist.Probe{{From: "r02", To: planeDst, Awaited: true}, {From: "r00", To: planeDst}, {From: "r01", To: planeDst}}
	got, err := p.Probe(context.Background(), probes)
	if err != nil {
		t.Fatal(err)
	}
	for i, ms := range got {
		if shortlist.Pending(ms) || ms <= 0 {
			t.Errorf("probe %d (%s): %v, want answered in the round: the awaited request held it", i, probes[i].From, ms)
		}
	}
	if late, _ := p.Late(context.Background(), false); len(late) != 0 {
		t.Errorf("late answers %+v: want none", late)
	}
}

// From a plan's third round on, the prober ends a round at the later
// quorum: the slow relay holds the first two rounds (quorum 1), not the
// third (0.5).
func TestProberEndsLaterRoundsAtTheLaterQuorum(t *testing.T) {
	f := newPlaneFleet(t, 2)
	s := f.survey(ModeShortlist)
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 0.5
	relays := map[string]registry.Relay{}
	for _, r := range f.reg.relays {
		relays[r.Name] = r
	}
	f.delay = map[string]time.Duration{relays["r01"].Admin: 300 * time.Millisecond}
	p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
	for round := range 3 {
		probes := []shortlist.Probe{{From: "r01", To: planeDst}, {From: "r00", To: planeDst}}
		got, err := p.Probe(context.Background(), probes)
		if err != nil {
			t.Fatal(err)
		}
		if waited := !shortlist.Pending(got[0]); waited != (round < 2) {
			t.Errorf("round %d: the slow relay's answer in the round: %v, want %v", round, waited, round < 2)
		}
		if _, err := p.Late(context.Background(), true); err != nil {
			t.Fatal(err)
		}
	}
}

// udpRelay answers asks over UDP (pkg/udpask) on a plane relay's admin
// port's number: it acknowledges each, and replies with the plane's
// distances, unless lose (given the ask's number, from 1) says the ask
// or the reply is lost on the way. It counts the asks it acknowledged.
func (f *planeFleet) udpRelay(t *testing.T, key udpask.Key, admin string, lose func(n int) (ask, reply bool)) *atomic.Int64 {
	t.Helper()
	conn, err := net.ListenPacket("udp", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var acked atomic.Int64
	go func() {
		buf := make([]byte, udpask.MaxDatagram)
		for asks := 1; ; asks++ {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			a, err := key.OpenAsk(buf[:n])
			if err != nil {
				continue
			}
			lostAsk, lostReply := lose(asks)
			if lostAsk {
				continue
			}
			_, _ = conn.WriteTo(key.SealAck(a.Nonce), from)
			acked.Add(1)
			if lostReply {
				continue
			}
			r := udpask.Reply{Nonce: a.Nonce}
			for _, target := range a.Targets {
				r.RTTs = append(r.RTTs, time.Duration(f.distance(admin, target)*float64(time.Millisecond)))
			}
			_, _ = conn.WriteTo(key.SealReply(r), from)
		}
	}()
	return &acked
}

// udpPair asks two plane relays over UDP, r00 then r01 (each answering
// as udpRelay does with lose00 and lose01; r01's /v1/probe over HTTPS
// answering 503 with broken01), each for its probe of the destination,
// in a round of its own, every answer in its round; each must answer its
// plane distance within the test's 4 s. It returns the prober, the
// relays and the asks each acknowledged.
func udpPair(t *testing.T, lose00, lose01 func(n int) (ask, reply bool), broken01 bool) (*planeFleet, *surveyProber, map[string]registry.Relay, [2]*atomic.Int64) {
	t.Helper()
	f := newPlaneFleet(t, 2)
	key, err := udpask.DeriveKey("a fleet secret for the test", "an admin token")
	if err != nil {
		t.Fatal(err)
	}
	s := f.survey(ModeShortlist)
	s.Shortlist.Quorum, s.Shortlist.LaterQuorum = 1, 1
	s.Timeout, s.AskKey = 5*time.Second, &key
	relays := map[string]registry.Relay{}
	for _, r := range f.reg.relays {
		relays[r.Name] = r
	}
	acked := [2]*atomic.Int64{f.udpRelay(t, key, relays["r00"].Admin, lose00), f.udpRelay(t, key, relays["r01"].Admin, lose01)}
	f.broken = map[string]bool{relays["r01"].Admin: broken01}
	p := newSurveyProber(s, relays, Target{Addr: planeDst}, planeDst)
	t.Cleanup(p.close)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	// r00's ask proves UDP (unless the read of its windows beside it, on
	// loopback, beats its acknowledgement: then it is asked over HTTPS,
	// and UDP is proven here, as an acknowledgement would); r01 is then
	// asked alone. The probes' expected RTT sets the replies' wait.
	for _, name := range []string{"r00", "r01"} {
		if name == "r01" {
			p.mu.Lock()
			p.sched.Acked(0)
			p.mu.Unlock()
		}
		got, err := p.Probe(ctx, []shortlist.Probe{{From: name, To: planeDst, Handshakes: 1, ExpectMs: 60}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := f.distance(relays[name].Admin, planeDst); math.Abs(got[0]-want) > 1e-3 {
			t.Errorf("%s→dst = %v ms, want %.3f", name, got[0], want)
		}
	}
	return f, p, relays, acked
}

// noLoss loses nothing.
func noLoss(int) (bool, bool) { return false, false }

// An ask over UDP that is acknowledged but whose reply is lost on the way
// is asked again, over UDP and over HTTPS at once, once the reply is
// overdue (twice its probes' expected time and 50 ms), not after the bound
// of the relay's probes (here 10 s, past the test's 4 s). Every reply of
// r01 is lost here: HTTPS answers.
func TestProberAsksOverHTTPSWhenAReplyIsLost(t *testing.T) {
	f, p, relays, acked := udpPair(t, noLoss, func(int) (bool, bool) { return false, true }, false)
	if acked[0].Load() != 1 || acked[1].Load() < 1 {
		t.Errorf("asks acknowledged: r00 %d, r01 %d; want 1, and at least 1", acked[0].Load(), acked[1].Load())
	}
	p.mu.Lock()
	r00ByUDP := !p.unacked["r00"]
	p.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.requests[relays["r01"].Admin]; n != 1 {
		t.Errorf("r01 got %d requests over HTTPS, want 1 (its reply lost)", n)
	}
	if n := f.requests[relays["r00"].Admin]; r00ByUDP && n != 0 {
		t.Errorf("r00 got %d requests over HTTPS, want 0 (answered over UDP)", n)
	}
}

// The same, r01's first reply lost and its HTTPS broken: the ask made
// again over UDP answers.
func TestProberAsksAgainOverUDPWhenAReplyIsLost(t *testing.T) {
	_, _, _, acked := udpPair(t, noLoss, func(n int) (bool, bool) { return false, n == 1 }, true)
	if acked[1].Load() != 2 {
		t.Errorf("r01 acknowledged %d asks, want 2 (the first, and the one asked again)", acked[1].Load())
	}
}

// An ask alone whose datagram is lost (no acknowledgement) is asked
// again over UDP beside the request over HTTPS, after a wait set by this
// host's RTT to that relay; here r01's HTTPS is broken, and the ask made
// again answers.
func TestProberAsksAgainWhenAnAskIsLost(t *testing.T) {
	_, p, _, acked := udpPair(t, noLoss, func(n int) (bool, bool) { return n == 1, false }, true)
	if acked[1].Load() != 1 {
		t.Errorf("r01 acknowledged %d asks, want 1 (the one asked again)", acked[1].Load())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.unacked["r01"] {
		t.Error("r01 is not counted among the relays whose ask was not acknowledged")
	}
}

// An ask's waits follow what the plan knows: the acknowledgement's this
// host's RTT to the relay, the reply's its probes' expected time.
func TestProberWaitsByWhatItKnows(t *testing.T) {
	s := &Survey{Timeout: 2 * time.Second}
	p := newSurveyProber(s, nil, Target{}, "dst")
	p.sched.Acked(300 * time.Millisecond)
	p.sched.Measured("near", 20*time.Millisecond)
	if got, want := p.ackWaitLocked("near"), 100*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay 20 ms away: %v, want %v (the floor)", got, want)
	}
	p.sched.Measured("mid", 80*time.Millisecond)
	if got, want := p.ackWaitLocked("mid"), 210*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay 80 ms away: %v, want %v", got, want)
	}
	if got, want := p.ackWaitLocked("unknown"), 650*time.Millisecond; got != want {
		t.Errorf("ack wait of a relay not measured: %v, want %v (the plan's slowest's)", got, want)
	}
	bound := s.relayProbesTimeout(1, 0)
	if got := p.replyWaitLocked(1, 0, 3); got != bound {
		t.Errorf("reply wait with nothing known: %v, want the bound %v", got, bound)
	}
	if got, want := p.replyWaitLocked(1, 0, 0), 100*time.Millisecond; got != want {
		t.Errorf("reply wait of an ask for windows alone: %v, want %v", got, want)
	}
	if got, want := p.replyWaitLocked(2, 60, 3), 290*time.Millisecond; got != want {
		t.Errorf("reply wait of two handshakes expected at 60 ms: %v, want %v", got, want)
	}
	p.sched.Replied(400 * time.Millisecond)
	if got, want := p.replyWaitLocked(1, 0, 3), 850*time.Millisecond; got != want {
		t.Errorf("reply wait with no expectation, the plan's slowest reply 400 ms: %v, want %v", got, want)
	}
}
