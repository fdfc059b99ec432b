package planner

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// spot is a node placed on a line: the RTT between two spots is their
// distance, in milliseconds.
type spot struct {
	name   string
	x      float64 // ms from the client
	relay  bool
	window int64 // bytes; 0 = unknown
}

// lineMatrix is the complete matrix of spots on a line.
func lineMatrix(spots ...spot) *Matrix {
	m := &Matrix{}
	for i, a := range spots {
		m.Nodes = append(m.Nodes, Node{Name: a.name, Relay: a.relay, WindowBytes: a.window})
		for _, b := range spots[i+1:] {
			m.Pairs = append(m.Pairs, Pair{A: a.name, B: b.name, RTTMs: math.Abs(a.x - b.x)})
		}
	}
	return m
}

func mustSearch(t *testing.T, m *Matrix, req Request) *Result {
	t.Helper()
	if req.Client == "" {
		req.Client, req.Destination = "client", "srv"
	}
	r, err := Search(m, req)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	return r
}

// hasReason reports whether a reason contains every fragment.
func hasReason(reasons []string, fragments ...string) bool {
	return slices.ContainsFunc(reasons, func(r string) bool {
		for _, f := range fragments {
			if !strings.Contains(r, f) {
				return false
			}
		}
		return true
	})
}

func wantChain(t *testing.T, r *Result, want ...string) {
	t.Helper()
	if !slices.Equal(r.Best.Chain, want) {
		t.Fatalf("best chain %v, want %v\n%s", r.Best.Chain, want, Explain(r))
	}
}

func wantReason(t *testing.T, r *Result, reasons []string, fragments ...string) {
	t.Helper()
	if !hasReason(reasons, fragments...) {
		t.Fatalf("no reason with %q in %q\n%s", fragments, reasons, Explain(r))
	}
}

// A 50 ms path with relays every 10 ms and decoys between them: with all
// windows equal (unknown), the best split is the one with equal RTTs.
func TestEqualWindowsEqualSplit(t *testing.T) {
	m := lineMatrix(
		spot{name: "client", x: 0}, spot{name: "srv", x: 50},
		spot{name: "r10", x: 10, relay: true}, spot{name: "r20", x: 20, relay: true},
		spot{name: "r30", x: 30, relay: true}, spot{name: "r40", x: 40, relay: true},
		spot{name: "d05", x: 5, relay: true}, spot{name: "d17", x: 17, relay: true},
		spot{name: "d26", x: 26, relay: true}, spot{name: "d33", x: 33, relay: true},
		spot{name: "d45", x: 45, relay: true},
	)
	r := mustSearch(t, m, Request{})
	wantChain(t, r, "r10", "r20", "r30", "r40")
	want := float64(DefaultWindowBytes) * 8 / 0.010 * math.Pow(1-DefaultRelayOverhead, 4)
	if !near(r.Best.PredictedBps, want) || !near(r.Best.Speedup, 5*math.Pow(0.98, 4)) {
		t.Errorf("predicted %v (%.3f× direct), want %v (%.3f×)", r.Best.PredictedBps, r.Best.Speedup, want, 5*math.Pow(0.98, 4))
	}
	wantReason(t, r, r.Best.Reasons, "equal windows", "equal segment RTTs are best")
	wantReason(t, r, r.Notes, "no window known")
	for _, seg := range r.Best.Segments {
		if seg.RTTMs != 10 || !seg.WindowAssumed || seg.LimitedBy != "window" {
			t.Errorf("segment %+v: want 10 ms, window assumed, window-limited", seg)
		}
	}

	// Fewer hops: still the most equal split within reach.
	wantChain(t, mustSearch(t, m, Request{Constraints: Constraints{MaxHops: 1}}), "d26")
	wantChain(t, mustSearch(t, m, Request{Constraints: Constraints{MaxHops: 2}}), "d17", "d33")
}

// A relay off the path: the split does not pay for the detour.
func TestDetourLosesToDirect(t *testing.T) {
	for _, tc := range []struct {
		name     string
		detourMs float64 // client–r and r–srv
		reason   []string
	}{
		{"small gain", 45, []string{"direct wins: best chain via r gains only 8.9% over direct", "< the 10% minimum"}},
		{"slower", 60, []string{"direct wins: best chain via r predicts", "0.82× direct"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Matrix{
				Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r", Relay: true}},
				Pairs: []Pair{{A: "client", B: "srv", RTTMs: 50}, {A: "client", B: "r", RTTMs: tc.detourMs}, {A: "r", B: "srv", RTTMs: tc.detourMs}},
			}
			r := mustSearch(t, m, Request{})
			wantChain(t, r)
			wantReason(t, r, r.Best.Reasons, tc.reason...)
			if len(r.Alternatives) != 1 || !strings.HasPrefix(r.Alternatives[0].Reasons[0], "lost to direct:") {
				t.Fatalf("alternatives %+v: want the chain via r, lost to direct", r.Alternatives)
			}
			if !reflect.DeepEqual(r.Best, r.Direct) {
				t.Errorf("best %+v is not the direct plan %+v", r.Best, r.Direct)
			}
		})
	}
}

// A client with a small window and relays with large ones: for a download
// the first relay goes next to the client, not at the equal-RTT point.
// For an upload the client's receive window does not count, and the
// equal split wins again.
func TestWindowAware(t *testing.T) {
	m := lineMatrix(
		spot{name: "client", x: 0, window: 64 << 10}, spot{name: "srv", x: 50, window: 4 << 20},
		spot{name: "r05", x: 5, relay: true, window: 4 << 20},
		spot{name: "r25", x: 25, relay: true, window: 4 << 20},
		spot{name: "r45", x: 45, relay: true, window: 4 << 20},
	)
	r := mustSearch(t, m, Request{Direction: Down})
	wantChain(t, r, "r05")
	if want := float64(64<<10) * 8 / 0.005 * 0.98; !near(r.Best.PredictedBps, want) {
		t.Errorf("predicted %v, want %v (64 KiB over 5 ms, one relay)", r.Best.PredictedBps, want)
	}
	wantReason(t, r, r.Best.Reasons, "window-aware: client's window 64 KiB is the smallest", "first relay placed near the client")
	if seg := r.Best.Segments[0]; seg.Receiver != "client" || seg.WindowBytes != 64<<10 || r.Best.Bottleneck != 0 {
		t.Errorf("first segment %+v, bottleneck %d: want the client's 64 KiB window, bottleneck 0", seg, r.Best.Bottleneck)
	}

	up := mustSearch(t, m, Request{Direction: Up, Constraints: Constraints{MaxHops: 1}})
	wantChain(t, up, "r25")
	wantReason(t, up, up.Best.Reasons, "equal windows (4 MiB)")

	both := mustSearch(t, m, Request{Direction: Both})
	if both.Best.PredictedBps != min(both.Best.PredictedDownBps, both.Best.PredictedUpBps) {
		t.Errorf("both: predicted %v, down %v, up %v", both.Best.PredictedBps, both.Best.PredictedDownBps, both.Best.PredictedUpBps)
	}
	wantReason(t, both, both.Best.Reasons, "planned for the lower")
}

func TestStaleAndEstimated(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r1", Relay: true}},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 100},
			{A: "client", B: "r1", RTTMs: 50, Estimated: true},
			{A: "r1", B: "srv", RTTMs: 50, AgeSec: 900},
		},
	}
	r := mustSearch(t, m, Request{})
	wantChain(t, r) // the stale pair is unusable: no chain
	wantReason(t, r, r.Notes, "ignored 1 stale pair (older than 300 s)")
	wantReason(t, r, r.Best.Reasons, "no chain of up to 1 relay connects client and srv")

	r = mustSearch(t, m, Request{Constraints: Constraints{UseStale: true}})
	wantChain(t, r, "r1")
	s0, s1 := r.Best.Segments[0], r.Best.Segments[1]
	if !s0.Estimated || s0.Stale || s1.Estimated || !s1.Stale || s1.AgeSec != 900 {
		t.Errorf("segments %+v %+v: want the first estimated, the second stale (900 s)", s0, s1)
	}
	wantReason(t, r, r.Best.Reasons, "segment client→r1: RTT 50.0 ms is estimated")
	wantReason(t, r, r.Best.Reasons, "segment r1→srv: RTT measured 900 s ago, older than the 300 s limit")
	if d := Diagram(r.Best); d != "client ──~50.0 ms──▶ r1 ──50.0 ms?──▶ srv" {
		t.Errorf("diagram %q", d)
	}

	// A longer age limit makes the pair fresh; no limit at all too.
	for _, age := range []float64{1000, -1} {
		r = mustSearch(t, m, Request{Constraints: Constraints{MaxAgeSec: age}})
		wantChain(t, r, "r1")
		if r.Best.Segments[1].Stale {
			t.Errorf("max_age_s %v: segment marked stale", age)
		}
	}
}

func TestMinGain(t *testing.T) {
	// One relay without overhead: the chain gains 50/x − 1 over direct.
	chain := func(x float64) *Matrix {
		return &Matrix{
			Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r", Relay: true}},
			Pairs: []Pair{{A: "client", B: "srv", RTTMs: 50}, {A: "client", B: "r", RTTMs: x}, {A: "r", B: "srv", RTTMs: x}},
		}
	}
	noOverhead := Model{RelayOverhead: -1}
	for _, tc := range []struct {
		gainPct float64 // the chain's gain over direct
		minGain float64
		chain   bool
	}{
		{9, 0, false}, // default 10 %
		{11, 0, true},
		{9, 0.05, true},
		{11, 0.20, false},
		{0.5, -1, true}, // no minimum: any faster chain
	} {
		r := mustSearch(t, chain(50/(1+tc.gainPct/100)), Request{Model: noOverhead, Constraints: Constraints{MinGain: tc.minGain}})
		if got := len(r.Best.Chain) > 0; got != tc.chain {
			t.Errorf("gain %v%%, min_gain %v: chain chosen %v, want %v\n%s", tc.gainPct, tc.minGain, got, tc.chain, Explain(r))
		}
	}
}

func TestIncludeExclude(t *testing.T) {
	m := lineMatrix(
		spot{name: "client", x: 0}, spot{name: "srv", x: 50},
		spot{name: "r10", x: 10, relay: true}, spot{name: "r20", x: 20, relay: true},
		spot{name: "r25", x: 25, relay: true}, spot{name: "r30", x: 30, relay: true},
		spot{name: "r40", x: 40, relay: true}, spot{name: "host", x: 24},
	)
	r := mustSearch(t, m, Request{Constraints: Constraints{Exclude: []string{"r20"}}})
	if slices.Contains(r.Best.Chain, "r20") || len(r.Best.Chain) == 0 {
		t.Errorf("exclude r20: chain %v", r.Best.Chain)
	}
	r = mustSearch(t, m, Request{Constraints: Constraints{Include: []string{"r25"}}})
	wantChain(t, r, "r25")
	wantReason(t, r, r.Notes, "searched 1 usable relay")
	r = mustSearch(t, m, Request{Constraints: Constraints{Include: []string{"r10", "r40"}}})
	wantChain(t, r, "r10", "r40")

	for _, tc := range []struct {
		c   Constraints
		err string
	}{
		{Constraints{Include: []string{"r99"}}, `constraints.include: unknown relay "r99"`},
		{Constraints{Exclude: []string{"host"}}, `constraints.exclude: "host" is not a relay`},
	} {
		if _, err := Search(m, Request{Client: "client", Destination: "srv", Constraints: tc.c}); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.err)
		}
	}
}

func TestMaxHops(t *testing.T) {
	m := lineMatrix(
		spot{name: "client", x: 0}, spot{name: "srv", x: 50},
		spot{name: "r10", x: 10, relay: true}, spot{name: "r20", x: 20, relay: true},
		spot{name: "r25", x: 25, relay: true}, spot{name: "r30", x: 30, relay: true},
		spot{name: "r40", x: 40, relay: true},
	)
	for hops, want := range map[int][]string{
		1: {"r25"},
		// r10+r30, r20+r30 and r20+r40 all have a 20 ms bottleneck and
		// 50 ms in total: the tie goes to the first by name.
		2: {"r10", "r30"},
		3: {"r10", "r25", "r40"},
		4: {"r10", "r20", "r30", "r40"},
	} {
		r := mustSearch(t, m, Request{Constraints: Constraints{MaxHops: hops}})
		if len(r.Best.Chain) > hops || r.Best.PredictedBps <= 0 {
			t.Fatalf("max_hops %d: chain %v", hops, r.Best.Chain)
		}
		wantChain(t, r, want...)
	}
	r := mustSearch(t, m, Request{Constraints: Constraints{MaxHops: -1}})
	wantChain(t, r)
	wantReason(t, r, r.Best.Reasons, "max_hops is negative")
	if len(r.Alternatives) != 0 {
		t.Errorf("max_hops −1: alternatives %v", r.Alternatives)
	}
}

// The same input in any order gives the same Result, and so does the same
// Search run twice.
func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		m, req := randomCase(rng)
		want, err := Search(m, req)
		if err != nil {
			t.Fatal(err)
		}
		shuffled := &Matrix{Nodes: slices.Clone(m.Nodes), Pairs: slices.Clone(m.Pairs)}
		rng.Shuffle(len(shuffled.Nodes), func(i, j int) { shuffled.Nodes[i], shuffled.Nodes[j] = shuffled.Nodes[j], shuffled.Nodes[i] })
		rng.Shuffle(len(shuffled.Pairs), func(i, j int) { shuffled.Pairs[i], shuffled.Pairs[j] = shuffled.Pairs[j], shuffled.Pairs[i] })
		for k := range shuffled.Pairs {
			if rng.IntN(2) == 0 {
				p := &shuffled.Pairs[k]
				p.A, p.B = p.B, p.A
				p.AWindowBytes, p.BWindowBytes = p.BWindowBytes, p.AWindowBytes
				p.ASendBps, p.BSendBps = p.BSendBps, p.ASendBps
				p.ASendAgeSec, p.BSendAgeSec = p.BSendAgeSec, p.ASendAgeSec
			}
		}
		for _, mm := range []*Matrix{m, shuffled} {
			got, err := Search(mm, req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d: results differ:\n%s\n%s", i, Explain(got), Explain(want))
			}
		}
	}
}

// One direct segment, numbers worked out by hand.
func TestSegmentFormulas(t *testing.T) {
	for _, tc := range []struct {
		name      string
		client    Node
		srv       Node
		pair      Pair
		dir       Direction
		rateBps   float64
		limitedBy string
	}{
		// 65536 B × 8 / 0.0125 s
		{"window", Node{WindowBytes: 65536}, Node{}, Pair{RTTMs: 12.5}, Down, 41943040, "window"},
		// the destination receives an upload: its 3 MiB default window
		{"upload window", Node{WindowBytes: 65536}, Node{}, Pair{RTTMs: 12.5}, Up, 3 << 20 * 8 / 0.0125, "window"},
		{"both", Node{WindowBytes: 65536}, Node{}, Pair{RTTMs: 12.5}, Both, 41943040, "window"},
		{"limit", Node{WindowBytes: 65536}, Node{LimitBps: 20e6}, Pair{RTTMs: 12.5}, Down, 20e6, "limit"},
		// the destination sends a download: its 32 KiB in flight, not the
		// client's 64 KiB window
		{"send window", Node{WindowBytes: 65536}, Node{SendWindowBytes: 32768}, Pair{RTTMs: 12.5}, Down, 32768 * 8 / 0.0125, "send_window"},
		// a send window above the receiver's window changes nothing
		{"large send window", Node{WindowBytes: 65536}, Node{SendWindowBytes: 1 << 20}, Pair{RTTMs: 12.5}, Down, 41943040, "window"},
		// an upload: the client sends
		{"upload send window", Node{SendWindowBytes: 32768}, Node{}, Pair{RTTMs: 12.5}, Up, 32768 * 8 / 0.0125, "send_window"},
		{"both send windows", Node{WindowBytes: 65536, SendWindowBytes: 16384}, Node{SendWindowBytes: 32768}, Pair{RTTMs: 12.5}, Both, 16384 * 8 / 0.0125, "send_window"},
		{"limit under send window", Node{}, Node{SendWindowBytes: 32768, LimitBps: 1e6}, Pair{RTTMs: 12.5}, Down, 1e6, "limit"},
		// 1448 B × 8 × 1.22 / (0.05 s × √0.01)
		{"loss", Node{}, Node{}, Pair{RTTMs: 50, Loss: 0.01}, Down, 1448 * 8 * 1.22 / (0.05 * 0.1), "loss"},
		{"total loss", Node{}, Node{}, Pair{RTTMs: 50, Loss: 1}, Down, 0, "loss"},
		// The sender's congestion control decides: a download's sender is
		// the destination. BBR is not bound by 1 % loss: the window is.
		{"bbr sender", Node{WindowBytes: 65536}, Node{CongestionControl: "bbr"}, Pair{RTTMs: 50, Loss: 0.01}, Down, 65536 * 8 / 0.05, "window"},
		{"cubic sender", Node{WindowBytes: 65536}, Node{CongestionControl: "cubic"}, Pair{RTTMs: 50, Loss: 0.01}, Down, 1448 * 8 * 1.22 / (0.05 * 0.1), "loss"},
		// A BBR receiver does not help a loss-based sender.
		{"bbr receiver", Node{WindowBytes: 65536, CongestionControl: "bbr"}, Node{}, Pair{RTTMs: 50, Loss: 0.01}, Down, 1448 * 8 * 1.22 / (0.05 * 0.1), "loss"},
		// An upload: the client sends with BBR.
		{"bbr uploader", Node{CongestionControl: "bbr"}, Node{WindowBytes: 65536}, Pair{RTTMs: 50, Loss: 0.01}, Up, 65536 * 8 / 0.05, "window"},
		// A window measured on the path (the pair's client end: B, as
		// the test builds the pair) wins over the node's.
		{"measured window", Node{WindowBytes: 65536}, Node{}, Pair{RTTMs: 12.5, BWindowBytes: 32768}, Down, 32768 * 8 / 0.0125, "window"},
		// Past BBR's tolerance the Mathis bound applies to it too.
		{"bbr heavy loss", Node{WindowBytes: 65536}, Node{CongestionControl: "bbr"}, Pair{RTTMs: 50, Loss: 0.25}, Down, 1448 * 8 * 1.22 / (0.05 * 0.5), "loss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.client.Name, tc.srv.Name = "client", "srv"
			tc.pair.A, tc.pair.B = "srv", "client" // either way round
			m := &Matrix{Nodes: []Node{tc.client, tc.srv}, Pairs: []Pair{tc.pair}}
			r := mustSearch(t, m, Request{Direction: tc.dir})
			seg := r.Direct.Segments[0]
			if !near(seg.RateBps, tc.rateBps) || seg.LimitedBy != tc.limitedBy || r.Direct.PredictedBps != seg.RateBps {
				t.Errorf("segment %+v, predicted %v: want %v bit/s, limited by %s", seg, r.Direct.PredictedBps, tc.rateBps, tc.limitedBy)
			}
		})
	}
}

func TestUnmeasuredDirect(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r1", Relay: true}},
		Pairs: []Pair{{A: "client", B: "r1", RTTMs: 20}, {A: "r1", B: "srv", RTTMs: 30}},
	}
	r := mustSearch(t, m, Request{})
	wantChain(t, r, "r1")
	wantReason(t, r, r.Best.Reasons, "chosen without a comparison: the direct path client→srv is not measured")
	if r.Best.Speedup != 0 || r.Best.DirectPredictedBps != 0 || r.Direct.Bottleneck != -1 || len(r.Direct.Segments) != 0 {
		t.Errorf("best %+v, direct %+v: want no speed-up and an empty direct plan", r.Best, r.Direct)
	}
	if !strings.Contains(Explain(r), "client ──?──▶ srv (not measured)") {
		t.Errorf("explain:\n%s", Explain(r))
	}

	// Nothing measured at all: Best is the empty direct plan, saying so.
	m.Pairs = nil
	r = mustSearch(t, m, Request{})
	wantChain(t, r)
	wantReason(t, r, r.Best.Reasons, "no prediction: the direct path is not measured and no chain")
	if len(r.Best.Segments) != 0 || r.Best.PredictedBps != 0 {
		t.Errorf("best %+v: want no segments, no prediction", r.Best)
	}
	if !strings.Contains(Explain(r), "best (direct): (not measured)") {
		t.Errorf("explain:\n%s", Explain(r))
	}
}

// Alternatives: runners-up, distinct, each saying why it lost and how it
// was found.
func TestAlternatives(t *testing.T) {
	m := lineMatrix(
		spot{name: "client", x: 0}, spot{name: "srv", x: 50},
		spot{name: "r10", x: 10, relay: true}, spot{name: "r20", x: 20, relay: true},
		spot{name: "r25", x: 25, relay: true}, spot{name: "r30", x: 30, relay: true},
		spot{name: "r40", x: 40, relay: true},
	)
	r := mustSearch(t, m, Request{})
	wantChain(t, r, "r10", "r20", "r30", "r40")
	if len(r.Alternatives) == 0 || len(r.Alternatives) > MaxAlternatives {
		t.Fatalf("%d alternatives", len(r.Alternatives))
	}
	seen := map[string]bool{strings.Join(r.Best.Chain, ","): true}
	for _, a := range r.Alternatives {
		key := strings.Join(a.Chain, ",")
		if seen[key] || len(a.Chain) == 0 {
			t.Errorf("alternative %v repeated or direct", a.Chain)
		}
		seen[key] = true
		if !strings.HasPrefix(a.Reasons[0], "lost") || !strings.Contains(a.Reasons[0], " — best chain ") {
			t.Errorf("alternative %v: first reason %q", a.Chain, a.Reasons[0])
		}
	}
	// The best chain avoiding r20 is among them: a fallback if r20 fails.
	if !hasReason(slices.Concat(slicesOfReasons(r.Alternatives)...), "lost: ", "slower than the best plan", "best chain avoiding r20") {
		t.Errorf("no fallback avoiding r20:\n%s", Explain(r))
	}
	wantReason(t, r, r.Direct.Reasons, "direct loses: chain via r10, r20, r30, r40 predicts 4.61× direct")
}

func slicesOfReasons(plans []Plan) [][]string {
	out := make([][]string, len(plans))
	for i, p := range plans {
		out[i] = p.Reasons
	}
	return out
}

func TestSearchErrors(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "srv"}, {Name: "r1", Relay: true}},
		Pairs: []Pair{{A: "client", B: "srv", RTTMs: 50}},
	}
	ok := Request{Client: "client", Destination: "srv"}
	for _, tc := range []struct {
		name string
		edit func(*Request)
		err  string
	}{
		{"direction", func(r *Request) { r.Direction = "sideways" }, `direction "sideways": want down, up or both`},
		{"client", func(r *Request) { r.Client = "nobody" }, `client "nobody": not a node of the matrix`},
		{"destination", func(r *Request) { r.Destination = "tokyo" }, `destination "tokyo": not a node of the matrix`},
		{"same", func(r *Request) { r.Destination = "client" }, `client and destination are both "client"`},
		{"overhead", func(r *Request) { r.Model.RelayOverhead = 1 }, "model.relay_overhead 1: want a fraction below 1"},
		{"min gain", func(r *Request) { r.Constraints.MinGain = math.NaN() }, "constraints.min_gain NaN"},
		{"max age", func(r *Request) { r.Constraints.MaxAgeSec = math.NaN() }, "constraints.max_age_s NaN"},
		{"window", func(r *Request) { r.Model.DefaultWindowBytes = -1 }, "model.default_window_bytes -1"},
		{"mss", func(r *Request) { r.Model.MSSBytes = -1 }, "model.mss_bytes -1"},
		{"error margin", func(r *Request) { r.Model.ErrorMargin = 1 }, "model.error_margin 1: want a fraction below 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok
			tc.edit(&req)
			if _, err := Search(m, req); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
	// Search validates the matrix as Validate does.
	bad := &Matrix{Nodes: m.Nodes, Pairs: append(slices.Clone(m.Pairs), Pair{A: "srv", B: "client", RTTMs: 40})}
	if _, err := Search(bad, ok); err == nil || !strings.Contains(err.Error(), `rtt_ms[1] ("srv", "client"): duplicate`) {
		t.Errorf("duplicate pair: error %v", err)
	}
}

// A relay's send window can be a chain's bottleneck: here the long middle
// segment r1→r2, sent by r2 with 256 KiB in flight, not the client's small
// window over 5 ms, sets the rate, and the plan says so.
func TestSendWindowBottleneck(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{
			{Name: "client", WindowBytes: 160 << 10},
			{Name: "r1", Relay: true, WindowBytes: 10 << 20},
			{Name: "r2", Relay: true, WindowBytes: 10 << 20, SendWindowBytes: 256 << 10},
			{Name: "srv"},
		},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 50},
			{A: "client", B: "r1", RTTMs: 5},
			{A: "r1", B: "r2", RTTMs: 40},
			{A: "r2", B: "srv", RTTMs: 5},
		},
	}
	r := mustSearch(t, m, Request{})
	wantChain(t, r, "r1", "r2")
	seg := r.Best.Segments[r.Best.Bottleneck]
	if seg.From != "r1" || seg.To != "r2" || seg.LimitedBy != "send_window" || seg.Sender != "r2" || seg.SendWindowBytes != 256<<10 {
		t.Fatalf("bottleneck %+v: want r1→r2, limited by r2's 256 KiB send window", seg)
	}
	if want := float64(256<<10) * 8 / 0.040 * 0.98 * 0.98; !near(r.Best.PredictedBps, want) {
		t.Errorf("predicted %v, want %v (256 KiB over 40 ms, two relays)", r.Best.PredictedBps, want)
	}
	wantReason(t, r, r.Best.Reasons, "set by the send window 256 KiB of r2 over 40.0 ms", "raise its tcp_wmem")
	if hasReason(r.Best.Reasons, "window-aware") {
		t.Errorf("a receive-window reason where the send window sets the rate: %q", r.Best.Reasons)
	}
	if txt := Explain(r); !strings.Contains(txt, "send 256 KiB (r2)") {
		t.Errorf("the segment table does not show the send window:\n%s", txt)
	}
	// Uploads: on r1→r2 r2 receives with its large window (r1's send
	// window is unknown: no limit); r2 sends the last segment, where its
	// send window is the limit.
	up := mustSearch(t, m, Request{Direction: Up, Constraints: Constraints{MinGain: -1, Include: []string{"r1", "r2"}}})
	found := false
	for _, p := range append([]Plan{up.Best}, up.Alternatives...) {
		if !slices.Equal(p.Chain, []string{"r1", "r2"}) {
			continue
		}
		found = true
		if seg := p.Segments[1]; seg.LimitedBy != "window" || seg.Receiver != "r2" {
			t.Errorf("upload r1→r2 %+v: want r2's receive window", seg)
		}
		if seg := p.Segments[2]; seg.LimitedBy != "send_window" || seg.Sender != "r2" {
			t.Errorf("upload r2→srv %+v: want r2's send window", seg)
		}
	}
	if !found {
		t.Errorf("no upload plan via r1, r2:\n%s", Explain(up))
	}
}

// A rate learnt from traffic bounds its sender's segment one way only:
// r1's short segments would carry the most on windows, but what r1 sent to
// the client reached 28 Mbit/s, so the download goes via r2; the upload,
// which r1 does not send towards the client, still goes via r1.
func TestLearntRateBoundsItsSender(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{
			{Name: "client", WindowBytes: 315 << 10},
			{Name: "r1", Relay: true, WindowBytes: 4 << 20},
			{Name: "r2", Relay: true, WindowBytes: 4 << 20},
			{Name: "srv", WindowBytes: 315 << 10},
		},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 60},
			{A: "client", B: "r1", RTTMs: 20, BSendBps: 28e6, BSendAgeSec: 150},
			{A: "r1", B: "srv", RTTMs: 20},
			{A: "client", B: "r2", RTTMs: 30},
			{A: "r2", B: "srv", RTTMs: 30},
		},
	}
	down := mustSearch(t, m, Request{Constraints: Constraints{Include: []string{"r1", "r2"}}})
	wantChain(t, down, "r2")
	var viaR1 *Plan
	for i, p := range down.Alternatives {
		if slices.Equal(p.Chain, []string{"r1"}) {
			viaR1 = &down.Alternatives[i]
		}
	}
	if viaR1 == nil {
		t.Fatalf("no alternative via r1:\n%s", Explain(down))
	}
	seg := viaR1.Segments[0]
	if seg.LimitedBy != "learnt" || seg.Sender != "r1" || seg.LearntBps != 28e6 || seg.LearntAgeSec != 150 || !near(viaR1.PredictedBps, 28e6*0.98) {
		t.Fatalf("client→r1 %+v, predicted %v: want r1's learnt 28 Mbit/s", seg, viaR1.PredictedBps)
	}
	wantReason(t, down, viaR1.Reasons, "the rate r1's traffic to client reached, 28.0 Mbit/s (learnt from its tunnels, 2 min ago)")
	// Without a direct path, r1's chain is the plan and its table shows it.
	onlyR1 := mustSearch(t, &Matrix{Nodes: m.Nodes, Pairs: m.Pairs[1:]}, Request{Constraints: Constraints{Include: []string{"r1"}}})
	if txt := Explain(onlyR1); !strings.Contains(txt, "28.0 Mbit/s learnt (r1, 2 min ago)") {
		t.Errorf("the segment table does not show the learnt rate:\n%s", txt)
	}
	up := mustSearch(t, m, Request{Direction: Up, Constraints: Constraints{Include: []string{"r1", "r2"}}})
	wantChain(t, up, "r1")
	if seg := up.Best.Segments[0]; seg.LearntBps != 0 || seg.LimitedBy != "window" {
		t.Errorf("upload client→r1 %+v: r1's learnt rate is not the client's", seg)
	}
}

// A second relay that adds less than the tie margin (2 %) is not chosen:
// the one-relay chain wins the tie, and the two-relay chain is listed with
// why it lost. With no margin, the faster prediction wins.
func TestTiesGoToFewerRelays(t *testing.T) {
	w := int64(1 << 20)
	m := lineMatrix(
		spot{name: "client", x: 0, window: w}, spot{name: "srv", x: 50, window: w},
		spot{name: "b", x: 24.6, relay: true, window: w},
		spot{name: "c", x: 25.4, relay: true, window: w},
	)
	r := mustSearch(t, m, Request{})
	wantChain(t, r, "b")
	// b, c: 24.6 ms segments, 2 relays; b: a 25.4 ms segment, 1 relay.
	two := float64(w) * 8 / 0.0246 * 0.98 * 0.98
	one := float64(w) * 8 / 0.0254 * 0.98
	if !near(r.Best.PredictedBps, one) {
		t.Errorf("predicted %v, want %v", r.Best.PredictedBps, one)
	}
	i := slices.IndexFunc(r.Alternatives, func(p Plan) bool { return slices.Equal(p.Chain, []string{"b", "c"}) })
	if i < 0 || !near(r.Alternatives[i].PredictedBps, two) {
		t.Fatalf("no alternative via b, c predicting %v:\n%s", two, Explain(r))
	}
	wantReason(t, r, r.Alternatives[i].Reasons, "predicts 1.2% more than the best plan (via b", "within the 2% tie margin, with more relays (2 > 1)")

	// 3 % more is no tie.
	wider := lineMatrix(
		spot{name: "client", x: 0, window: w}, spot{name: "srv", x: 50, window: w},
		spot{name: "b", x: 24.4, relay: true, window: w},
		spot{name: "c", x: 25.6, relay: true, window: w},
	)
	wantChain(t, mustSearch(t, wider, Request{}), "b", "c")

	exact := mustSearch(t, m, Request{Model: Model{ErrorMargin: -1}})
	wantChain(t, exact, "b", "c")
}
