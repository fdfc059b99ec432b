package coord

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// small is a probe set of 3 nearest and 2 random peers, one probe every
// 10 s, so a cycle through the set takes 50 s.
// small ranks its nearest peers by RTT alone (no rings: PerRing -1).
var small = Config{ProbesPerMinute: 6, Nearest: 3, Random: 2, RotateEvery: 5 * time.Minute, Window: 4, MaxAge: 10 * time.Minute, PerRing: -1}

func newNode(t *testing.T, name string, cfg Config, seed uint64) *Node {
	t.Helper()
	n, err := NewNode(name, cfg, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fleetOf is peers p00..p(k-1) with no coordinates, plus self.
func fleetOf(k int, self string) []Peer {
	f := []Peer{{Name: self}}
	for i := 0; i < k; i++ {
		f = append(f, Peer{Name: fmt.Sprintf("p%02d", i)})
	}
	return f
}

// picks is the next k targets, one interval apart from *now on.
func picks(t *testing.T, n *Node, now *time.Time, fleet []Peer, k int) []string {
	t.Helper()
	var out []string
	for i := 0; i < k; i++ {
		name, ok := n.NextTarget(*now, fleet)
		if !ok {
			t.Fatalf("no target from a fleet of %d", len(fleet))
		}
		out = append(out, name)
		*now = now.Add(n.Interval())
	}
	return out
}

// at is a coordinate on the first axis, ms from the origin.
func at(ms float64) *coordinate.Coordinate {
	c := coordinate.NewCoordinate(coordinate.DefaultConfig())
	c.Vec[0] = ms / 1000
	return c
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func TestNextTargetCyclesThroughTheSet(t *testing.T) {
	n := newNode(t, "self", small, 1)
	fleet := fleetOf(30, "self")
	now := t0
	if got := n.ProbeSetSize(); got != 0 {
		t.Fatalf("probe set of %d before the first pick", got)
	}
	first := picks(t, n, &now, fleet, 5)
	if len(sorted(first)) != 5 {
		t.Fatalf("first 5 picks %v: want 5 different peers", first)
	}
	if got := n.ProbeSetSize(); got != 5 {
		t.Fatalf("probe set of %d, want 3 nearest + 2 random", got)
	}
	if slices.Contains(first, "self") {
		t.Fatalf("picked itself: %v", first)
	}
	// Within the rotation period the set stays: the next cycles pick the
	// same 5, each exactly once per cycle, in the same order.
	for c := 0; c < 4; c++ {
		again := picks(t, n, &now, fleet, 5)
		if !slices.Equal(again, first) {
			t.Fatalf("cycle %d: %v, want %v again", c+2, again, first)
		}
	}
	if got, ok := n.NextTarget(now, []Peer{{Name: "self"}}); ok {
		t.Errorf("a fleet of only itself gave %q", got)
	}
	if got, ok := n.NextTarget(now, nil); ok {
		t.Errorf("an empty fleet gave %q", got)
	}
}

func TestNextTargetRotatesTheRandomPeers(t *testing.T) {
	n := newNode(t, "self", small, 2)
	fleet := fleetOf(30, "self")
	now := t0
	before := sorted(picks(t, n, &now, fleet, 5))
	// A cycle ending just before RotateEvery: the same set.
	now = t0.Add(small.RotateEvery - 5*n.Interval())
	if got := sorted(picks(t, n, &now, fleet, 5)); !slices.Equal(got, before) {
		t.Fatalf("before rotation: %v, want %v", got, before)
	}
	// After: the 3 nearest stay (nothing is measured, so they are the same
	// random order), the 2 random peers are drawn again.
	after := sorted(picks(t, n, &now, fleet, 5))
	var kept int
	for _, p := range after {
		if slices.Contains(before, p) {
			kept++
		}
	}
	if kept < 3 || kept == 5 {
		t.Errorf("after rotation %v, before %v: %d kept, want the 3 nearest and new random peers", after, before, kept)
	}
	if len(after) != 5 {
		t.Errorf("after rotation %v: want 5 different peers", after)
	}
}

func TestNextTargetDropsDepartedPeers(t *testing.T) {
	n := newNode(t, "self", small, 3)
	fleet := fleetOf(30, "self")
	now := t0
	set := sorted(picks(t, n, &now, fleet, 5))
	// Every member of the set leaves in turn; the set stays full from the
	// others and never picks one that left.
	gone := map[string]bool{}
	for _, leave := range set {
		gone[leave] = true
		fleet = slices.DeleteFunc(fleet, func(p Peer) bool { return p.Name == leave })
		got := picks(t, n, &now, fleet, 5)
		if len(sorted(got)) != 5 {
			t.Errorf("after %s left: %v, want 5 different peers", leave, got)
		}
		for _, p := range got {
			if gone[p] {
				t.Errorf("after %s left: picked %s, which left", leave, p)
			}
		}
	}
	// A fleet smaller than the set: all of it, in turn.
	few := fleetOf(2, "self")
	if got := sorted(picks(t, n, &now, few, 4)); !slices.Equal(got, []string{"p00", "p01"}) {
		t.Errorf("fleet of 2: picked %v", got)
	}
	if got := n.ProbeSetSize(); got != 2 {
		t.Errorf("fleet of 2: a probe set of %d", got)
	}
}

func TestNextTargetNearestByMeasuredRTT(t *testing.T) {
	// p00 is 1 ms away, p01 2 ms, ...: the random peers find the near
	// ones, which then stay as the nearest.
	n := newNode(t, "self", small, 4)
	fleet := fleetOf(30, "self")
	now := t0
	for i := 0; i < 2000; i++ {
		name, _ := n.NextTarget(now, fleet)
		var k int
		fmt.Sscanf(name, "p%d", &k)
		n.Observe(now, Peer{Name: name}, float64(k+1), false)
		now = now.Add(n.Interval())
	}
	got := picks(t, n, &now, fleet, 5)
	for _, near := range []string{"p00", "p01", "p02"} {
		if !slices.Contains(got, near) {
			t.Errorf("a cycle %v lacks %s, one of the 3 nearest", got, near)
		}
	}
}

func TestNextTargetNearestByCoordinate(t *testing.T) {
	n := newNode(t, "self", small, 5)
	// Peers on a line at 1, 2, ... 30 ms from this node's coordinate,
	// listed far first; this node is done learning.
	var fleet []Peer
	for i := 30; i >= 1; i-- {
		fleet = append(fleet, Peer{Name: fmt.Sprintf("p%02d", i), Coord: at(float64(i))})
	}
	if err := n.client.SetCoordinate(at(0)); err != nil {
		t.Fatal(err)
	}
	n.stats.Updates = 100
	now := t0
	got := picks(t, n, &now, fleet, 5)
	// The nearest, nearest first, then the random ones.
	if !slices.Equal(got[:3], []string{"p01", "p02", "p03"}) {
		t.Errorf("picks %v: want p01 p02 p03 first", got)
	}
	// A measurement overrides the estimate: p01 measured at 50 ms leaves
	// the nearest for p04.
	n.Observe(now, Peer{Name: "p01"}, 50, false)
	got = picks(t, n, &now, fleet, 5)
	if slices.Contains(got, "p01") || !slices.Contains(got, "p04") {
		t.Errorf("after p01 measured far: %v, want p04 and no p01", got)
	}
	// A peer whose probes all fail goes last.
	n.Observe(now, Peer{Name: "p02"}, 0, true)
	got = picks(t, n, &now, fleet, 5)
	if slices.Contains(got[:3], "p02") {
		t.Errorf("after p02 failed: %v, want it out of the nearest", got)
	}
}

func TestNextTargetNearestByRing(t *testing.T) {
	cfg := small
	cfg.Nearest, cfg.PerRing = 4, 2
	n := newNode(t, "self", cfg, 5)
	// City-mates at 1–3 ms (ring 0), the next city at 5–7 ms (ring 1),
	// then 10, 12 and 20 ms; this node is done learning.
	var fleet []Peer
	for _, ms := range []float64{1, 1.5, 2, 2.5, 3, 5, 6, 7, 10, 12, 20} {
		fleet = append(fleet, Peer{Name: fmt.Sprintf("p%04.1f", ms), Coord: at(ms)})
	}
	if err := n.client.SetCoordinate(at(0)); err != nil {
		t.Fatal(err)
	}
	n.stats.Updates = 100
	now := t0
	got := picks(t, n, &now, fleet, 6)
	if want := []string{"p01.0", "p01.5", "p05.0", "p06.0"}; !slices.Equal(got[:4], want) {
		t.Errorf("picks %v: want %v first, two a ring", got, want)
	}
	// A peer of a full ring measured below its worst enters the nearest
	// at the next pick, before the minute's ranking is due: p10.0 measured
	// at 4.5 ms takes p06.0's place.
	n.Observe(now, Peer{Name: "p10.0"}, 4.5, false)
	picks(t, n, &now, fleet, 1)
	if want := []string{"p01.0", "p01.5", "p10.0", "p05.0"}; !slices.Equal(n.nearest, want) {
		t.Errorf("after p10.0 measured at 4.5 ms: nearest %v, want %v", n.nearest, want)
	}
	// One measured in a full ring above its worst would not enter, and
	// costs no ranking before the minute's: p02.0 at 1.8 ms.
	ranked := n.rankedAt
	n.Observe(now, Peer{Name: "p02.0"}, 1.8, false)
	if n.rankedAt != ranked {
		t.Errorf("p02.0 measured at 1.8 ms, behind two nearer in its ring, asked for a new ranking")
	}
	// A fleet in one ring, one data centre's: the set still holds four,
	// the lowest RTTs.
	var dc []Peer
	for _, ms := range []float64{1, 1.5, 2, 2.5, 3, 3.5} {
		dc = append(dc, Peer{Name: fmt.Sprintf("d%03.1f", ms), Coord: at(ms)})
	}
	n = newNode(t, "self", cfg, 5)
	if err := n.client.SetCoordinate(at(0)); err != nil {
		t.Fatal(err)
	}
	n.stats.Updates = 100
	picks(t, n, &now, dc, 1)
	if want := []string{"d1.0", "d1.5", "d2.0", "d2.5"}; !slices.Equal(n.nearest, want) {
		t.Errorf("one ring: nearest %v, want %v", n.nearest, want)
	}
	// A peer of that full ring measured below the set's last enters as
	// one of the next; one above it asks for no ranking; one measured in
	// a ring of its own enters ahead of the ring's next ones.
	n.Observe(now, Peer{Name: "d3.0"}, 1.8, false)
	picks(t, n, &now, dc, 1)
	if want := []string{"d1.0", "d1.5", "d3.0", "d2.0"}; !slices.Equal(n.nearest, want) {
		t.Errorf("after d3.0 measured at 1.8 ms: nearest %v, want %v", n.nearest, want)
	}
	ranked = n.rankedAt
	n.Observe(now, Peer{Name: "d3.5"}, 2.2, false)
	if n.rankedAt != ranked {
		t.Errorf("d3.5 measured at 2.2 ms, above the set's last, asked for a new ranking")
	}
	n.Observe(now, Peer{Name: "d3.5"}, 30, false)
	n.Observe(now, Peer{Name: "d3.5"}, 30, false)
	picks(t, n, &now, dc, 1)
	if want := []string{"d1.0", "d1.5", "d3.5", "d3.0"}; !slices.Equal(n.nearest, want) {
		t.Errorf("after d3.5 measured at 30 ms: nearest %v, want %v", n.nearest, want)
	}
	// Without rings, the four lowest RTTs.
	cfg.PerRing = -1
	n = newNode(t, "self", cfg, 5)
	if err := n.client.SetCoordinate(at(0)); err != nil {
		t.Fatal(err)
	}
	n.stats.Updates = 100
	got = picks(t, n, &now, fleet, 6)
	if want := []string{"p01.0", "p01.5", "p02.0", "p02.5"}; !slices.Equal(got[:4], want) {
		t.Errorf("no rings: picks %v, want %v first", got, want)
	}
}

func TestWant(t *testing.T) {
	n := newNode(t, "self", small, 6)
	fleet := fleetOf(30, "self")
	now := t0
	set := sorted(picks(t, n, &now, fleet, 5))
	var outside []string
	for _, p := range fleet[1:] {
		if !slices.Contains(set, p.Name) {
			outside = append(outside, p.Name)
		}
	}
	a, b := outside[0], outside[1]
	until := now.Add(2 * time.Minute)
	n.Want(b, until)
	n.Want(a, until)
	n.Want("self", until)
	n.Want("absent", until) // not in the fleet: never picked
	if got := picks(t, n, &now, fleet, 2); !slices.Equal(got, []string{b, a}) {
		t.Fatalf("after Want(%s), Want(%s): picked %v first", b, a, got)
	}
	// Until then they are in the set: a cycle of 7.
	cycle := sorted(picks(t, n, &now, fleet, 7))
	if want := sorted(append(slices.Clone(set), a, b)); !slices.Equal(cycle, want) {
		t.Errorf("cycle while wanted: %v, want %v", cycle, want)
	}
	// Asking again asks for one more probe.
	n.Want(a, until)
	if got, _ := n.NextTarget(now, fleet); got != a {
		t.Errorf("after asking again for %s: picked %s", a, got)
	}
	// Measured includes them while wanted. (A failure, so that a does not
	// become a nearest peer, as any peer measured would while the others
	// are unknown.)
	n.Observe(now, Peer{Name: a}, 0, true)
	if !slices.ContainsFunc(n.Measured(now), func(m Measurement) bool { return m.Peer == a }) {
		t.Errorf("Measured lacks wanted %s", a)
	}
	// After until they leave.
	now = until
	for _, p := range picks(t, n, &now, fleet, 10) {
		if p == a || p == b || p == "absent" || p == "self" {
			t.Errorf("picked %s after its time was up", p)
		}
	}
	if slices.ContainsFunc(n.Measured(now), func(m Measurement) bool { return m.Peer == a }) {
		t.Errorf("Measured still has %s after its time was up", a)
	}
}

func TestMeasured(t *testing.T) {
	n := newNode(t, "self", small, 7)
	fleet := fleetOf(30, "self")
	now := t0
	set := sorted(picks(t, n, &now, fleet, 5))
	p := set[0]
	// Window 4: of 9, 1, 5, fail, 3, 8 the last four count.
	for i, ms := range []float64{9, 1, 5, 0, 3, 8} {
		n.Observe(t0.Add(time.Duration(i)*time.Second), Peer{Name: p}, ms, ms == 0)
	}
	// Results for every peer of the fleet: only the set is published.
	for _, q := range fleet {
		if q.Name != p {
			n.Observe(t0, q, 10, false)
		}
	}
	ms := n.Measured(now)
	if len(ms) != 5 {
		t.Errorf("%d measurements, want the 5 of the set: %+v", len(ms), ms)
	}
	if !slices.IsSortedFunc(ms, func(a, b Measurement) int { return strings.Compare(a.Peer, b.Peer) }) {
		t.Errorf("not sorted by peer: %+v", ms)
	}
	i := slices.IndexFunc(ms, func(m Measurement) bool { return m.Peer == p })
	want := Measurement{Peer: p, MedianMs: 5, MinMs: 3, Samples: 3, Failures: 1, LastAt: t0.Add(5 * time.Second)}
	if i < 0 || ms[i] != want {
		t.Errorf("got %+v, want %+v", ms, want)
	}
	// An even number of samples (3, 8, 4, 6): the mean of the middle two.
	n.Observe(t0.Add(6*time.Second), Peer{Name: p}, 4, false)
	n.Observe(t0.Add(7*time.Second), Peer{Name: p}, 6, false)
	if m := measuredOf(n, now, p); m.MedianMs != 5 || m.MinMs != 3 || m.Samples != 4 || m.Failures != 0 {
		t.Errorf("got %+v, want median 5 min 3 of 4 samples", m)
	}
	// Results older than MaxAge are dropped (3 and 8, from 4 s and 5 s);
	// the peers observed only at t0 are gone.
	now = t0.Add(small.MaxAge + 5*time.Second + time.Nanosecond)
	if m := measuredOf(n, now, p); m.Samples != 2 || m.MedianMs != 5 || m.MinMs != 4 {
		t.Errorf("with the oldest two expired: got %+v, want 4 and 6", m)
	}
	if got := n.Measured(now); len(got) != 1 {
		t.Errorf("measurements %+v, want only %s's", got, p)
	}
	now = now.Add(time.Minute)
	if got := n.Measured(now); len(got) != 0 {
		t.Errorf("measurements %+v after all expired", got)
	}
}

func measuredOf(n *Node, now time.Time, peer string) Measurement {
	for _, m := range n.Measured(now) {
		if m.Peer == peer {
			return m
		}
	}
	return Measurement{}
}

func TestObserve(t *testing.T) {
	n := newNode(t, "self", small, 8)
	cfg := coordinate.DefaultConfig()
	far := coordinate.NewCoordinate(cfg)
	far.Vec[0] = 0.1
	start := n.Coordinate()

	n.Observe(t0, Peer{Name: "a", Coord: far}, 0, true)
	n.Observe(t0, Peer{Name: "a", Coord: far}, math.NaN(), false)
	n.Observe(t0, Peer{Name: "a", Coord: far}, -1, false)
	n.Observe(t0, Peer{Name: "b"}, 100, false) // coordinate unknown
	if got := n.Coordinate(); !slices.Equal(got.Vec, start.Vec) {
		t.Errorf("failures or an unknown coordinate moved it: %v -> %v", start.Vec, got.Vec)
	}
	n.Observe(t0, Peer{Name: "a", Coord: far}, 100, false)
	got := n.Coordinate()
	if slices.Equal(got.Vec, start.Vec) {
		t.Errorf("an answered probe did not move the coordinate")
	}
	if ms, _ := EstimateMs(got, far); ms < 1 {
		t.Errorf("moved to %v ms from the peer 100 ms away", ms)
	}
	// Another dimension, or an RTT over Serf's 10 s: refused, not a panic.
	n.Observe(t0, Peer{Name: "c", Coord: &coordinate.Coordinate{Vec: []float64{0, 0}}}, 10, false)
	n.Observe(t0, Peer{Name: "a", Coord: far}, 20000, false)
	if s := n.Stats(); s.Updates != 1 || s.Rejected != 2 || s.Resets != 0 {
		t.Errorf("stats %+v, want 1 update and 2 rejected", s)
	}
	// Its own name is ignored.
	n.Observe(t0, Peer{Name: "self", Coord: far}, 5, false)
	if n.Stats().Updates != 1 {
		t.Errorf("observed itself")
	}
}

func TestNewNode(t *testing.T) {
	if _, err := NewNode("", Config{}, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := NewNode("a", Config{}, nil); err == nil {
		t.Error("nil rand accepted")
	}
	if _, err := NewNode("a", Config{Nearest: -1}, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Error("bad config accepted")
	}
}

// TestDeterministic runs a small fleet twice from one seed: the same
// coordinates to the bit.
func TestDeterministic(t *testing.T) {
	run := func() []Peer {
		p := newPlane(t, 20, 7)
		p.run(t, 10*time.Minute)
		return p.fleet()
	}
	a, b := run(), run()
	for i := range a {
		if !slices.Equal(a[i].Coord.Vec, b[i].Coord.Vec) || a[i].Coord.Height != b[i].Coord.Height ||
			a[i].Coord.Adjustment != b[i].Coord.Adjustment {
			t.Fatalf("%s: %+v then %+v", a[i].Name, a[i].Coord, b[i].Coord)
		}
	}
}

// A peer measured well below its estimate is a shortcut: published after
// it left the probe set and its results expired, the lowest ratios first,
// at most Shortcuts of them, until ShortcutMaxAge after its last probe.
func TestShortcuts(t *testing.T) {
	cfg := small
	cfg.Shortcuts, cfg.ShortcutMaxAge = 2, 30*time.Minute
	// Peers on a line 10, 20, ... 300 ms from this node.
	var fleet []Peer
	for i := 1; i <= 30; i++ {
		fleet = append(fleet, Peer{Name: fmt.Sprintf("p%02d", i), Coord: at(10 * float64(i))})
	}
	peer := func(name string) Peer {
		return fleet[slices.IndexFunc(fleet, func(p Peer) bool { return p.Name == name })]
	}
	for _, learning := range []bool{true, false} {
		n := newNode(t, "self", cfg, 9)
		origin := func() {
			if err := n.client.SetCoordinate(at(0)); err != nil {
				t.Fatal(err)
			}
		}
		origin()
		if !learning {
			n.stats.Updates = 100
		}
		now := t0
		set := sorted(picks(t, n, &now, fleet, 5))
		// Four far peers out of the set, measured at 0.4, 0.58, 1.0 and
		// 0.36 of their estimate. The coordinate is put back after each
		// probe, so that every ratio is against the origin.
		var far []string
		for i := 20; i <= 30 && len(far) < 4; i++ {
			if name := fmt.Sprintf("p%02d", i); !slices.Contains(set, name) {
				far = append(far, name)
			}
		}
		for i, ratio := range []float64{0.4, 0.58, 1.0, 0.36} {
			est, _ := EstimateMs(at(0), peer(far[i]).Coord)
			n.Observe(now, peer(far[i]), ratio*est, false)
			origin()
		}
		var got []string
		for _, m := range n.Measured(now.Add(cfg.MaxAge + time.Minute)) {
			got = append(got, m.Peer)
		}
		if learning {
			if len(got) != 0 {
				t.Errorf("while learning: published %v, want no shortcuts (the estimates mean nothing yet)", got)
			}
			continue
		}
		if want := []string{far[0], far[3]}; !slices.Equal(got, want) {
			t.Errorf("after the results expired: published %v, want the two lowest ratios %v", got, want)
		}
		est, _ := EstimateMs(at(0), peer(far[0]).Coord)
		if m := measuredOf(n, now.Add(cfg.MaxAge+time.Minute), far[0]); math.Abs(m.MedianMs-0.4*est) > 1e-9 || m.Samples != 1 || !m.LastAt.Equal(now) {
			t.Errorf("%s as published: %+v, want its measurement", far[0], m)
		}
		if got := n.Measured(now.Add(cfg.ShortcutMaxAge + time.Second)); len(got) != 0 {
			t.Errorf("after ShortcutMaxAge: published %+v, want none", got)
		}
	}
}
