package coord

import (
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// Peer is another relay as the registry lists it. Coord is its published
// coordinate, nil while unknown.
type Peer struct {
	Name  string
	Coord *coordinate.Coordinate
}

// Measurement is what one relay measured to one peer over its window, for
// publishing. MedianMs and MinMs are over the answered probes (0 when none
// was); Samples counts those, Failures the probes that failed; LastAt is the
// time of the newest result.
type Measurement struct {
	Peer     string
	MedianMs float64
	MinMs    float64
	Samples  int
	Failures int
	LastAt   time.Time
}

// Stats counts what Observe did with the coordinate.
type Stats struct {
	// Updates is how many answered probes moved the coordinate.
	Updates int
	// Rejected is how many answered probes to a peer with a coordinate
	// did not, because Serf refused the pair (the peer's coordinate of
	// another dimension or invalid, or an RTT over Serf's 10 s).
	Rejected int
	// Resets is how many times the coordinate became invalid and started
	// over.
	Resets int
}

// Node is one relay's measurement state: its Vivaldi coordinate, its probe
// set and a window of results per peer probed. It is safe for concurrent
// use. It reads no clock and draws randomness only from the *rand.Rand it
// was given, so a run is reproducible from the seed.
type Node struct {
	mu     sync.Mutex
	name   string
	cfg    Config
	rnd    *rand.Rand
	client *coordinate.Client
	seed   uint64 // for the stable random order of peers not known yet
	stats  Stats

	peers   map[string]*peerState // peers with results or in the set
	nearest []string              // by rank, at most cfg.Nearest
	random  []string              // at most cfg.Random, none in nearest
	drawnAt time.Time             // when random was last drawn whole
	drawn   bool
	wants   map[string]*want
	// shortcuts are peers measured well below their estimate (see
	// Config.Shortcuts), at most cfg.Shortcuts.
	shortcuts map[string]shortcut
	set       []string // nearest, random, then the wanted peers in the fleet
	seq       uint64   // counts picks (and Wants), to order them
	gen       uint64   // counts rebuilds
	// rankedAt and rankedLen are when the nearest peers were last ranked
	// and how many peers the fleet then listed (see rebuild).
	rankedAt  time.Time
	rankedLen int
	// worstNearestMs is the highest rank among the nearest peers (+Inf
	// while fewer than Nearest are ranked by RTT): a nearest peer
	// measured above it may leave the set, and ranks again at the next
	// pick.
	worstNearestMs float64
	// With Config.PerRing the nearest peers are each ring's first
	// PerRing, then the rings' next ones (see fillRings). ringWorstMs is
	// the rank of the PerRing-th peer of each ring that has that many: a
	// peer measured in that ring is one of its first only below it.
	// firstCapMs and nextCapMs are the ranks a peer measured must be
	// below to enter the nearest as one of its ring's first, or as one of
	// the next (+Inf: any enters; -Inf: none). Without rings every peer
	// is one of the first.
	ringWorstMs map[int]float64
	firstCapMs  float64
	nextCapMs   float64
	// expireAt is when expire next has something to do: the first
	// result's expiry, or MaxAge after the last pass.
	expireAt time.Time
}

type peerState struct {
	results  []result    // in the order observed, at most cfg.Window
	sum      Measurement // of results
	expires  time.Time   // when the oldest result expires
	lastPick uint64      // Node.seq when last picked; 0: never
	seen     uint64      // Node.gen of the last rebuild whose fleet held it
}

// update recomputes what is derived from the results.
func (st *peerState) update(maxAge time.Duration) {
	st.sum = summarize(st.results)
	st.expires = time.Time{}
	for i, r := range st.results {
		if at := r.at.Add(maxAge); i == 0 || at.Before(st.expires) {
			st.expires = at
		}
	}
}

type result struct {
	at     time.Time
	ms     float64
	failed bool
}

// shortcut is a peer whose measurement beat its estimate: the peer's last
// window as summarised, and measured/estimated RTT then.
type shortcut struct {
	m     Measurement
	ratio float64
}

type want struct {
	until   time.Time
	seq     uint64 // when asked: wants still pending go in this order
	pending bool   // not picked since asked
}

// startSpread is the size, in seconds per dimension, of the random offset a
// coordinate starts from (and restarts from after a reset). Serf moves a
// coordinate that sits on another (or on the origin, for gravity) in a
// direction drawn from math/rand's global source, which would make runs
// irreproducible; starting 0.1 ms apart keeps them from ever coinciding.
const startSpread = 1e-4

// NewNode makes the measurement state of the relay called name; cfg is
// completed by WithDefaults. rnd is used for the random peers and the
// starting coordinate; it must not be used concurrently elsewhere.
func NewNode(name string, cfg Config, rnd *rand.Rand) (*Node, error) {
	if name == "" {
		return nil, errors.New("coord: NewNode: empty name")
	}
	if rnd == nil {
		return nil, errors.New("coord: NewNode: nil rand")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	client, err := coordinate.NewClient(cfg.Vivaldi)
	if err != nil {
		return nil, err
	}
	n := &Node{
		name:      name,
		cfg:       cfg,
		rnd:       rnd,
		client:    client,
		seed:      rnd.Uint64(),
		peers:     map[string]*peerState{},
		wants:     map[string]*want{},
		shortcuts: map[string]shortcut{},
	}
	n.restart()
	return n, nil
}

// restart moves the coordinate to a random point near the origin.
func (n *Node) restart() {
	c := coordinate.NewCoordinate(n.cfg.Vivaldi)
	for i := range c.Vec {
		c.Vec[i] = (2*n.rnd.Float64() - 1) * startSpread
	}
	// Cannot fail: the dimension is the client's and the values finite.
	_ = n.client.SetCoordinate(c)
}

// Name is the relay's name.
func (n *Node) Name() string { return n.name }

// Config is the node's configuration, defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// Interval is the time between two probes: a minute / ProbesPerMinute.
func (n *Node) Interval() time.Duration { return n.cfg.Interval() }

// Coordinate is a copy of the node's coordinate.
func (n *Node) Coordinate() *coordinate.Coordinate { return n.client.GetCoordinate() }

// ProbeSetSize is how many peers the probe set held when NextTarget last
// made it: Nearest + Random + the wanted peers, fewer in a smaller fleet.
func (n *Node) ProbeSetSize() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.set)
}

// ProbeSet is the peers of the probe set as NextTarget last made it, and
// those asked for with Want whose time is not up: the peers whose
// coordinates and measurements this node needs fresh. Sorted.
func (n *Node) ProbeSet() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.probeSet()
}

func (n *Node) probeSet() []string {
	names := slices.Clone(n.set)
	for name := range n.wants {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Stats are the node's counters.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// learning says the coordinate has not yet moved once per member of a full
// probe set: estimates from it would rank peers by their distance from the
// origin, so peers not measured are ranked at random meanwhile.
func (n *Node) learning() bool { return n.stats.Updates < n.cfg.Nearest+n.cfg.Random }

// NextTarget picks the peer to probe now among the fleet the registry lists
// (this node, empty names and repeated names are skipped; names never seen
// before are fine). The probe set is
//
//   - the Nearest peers with the lowest RTT: measured (median of the
//     window), else estimated from the coordinates, else, while the node is
//     still learning or the peer's coordinate is unknown, in a random order
//     fixed per node; peers whose recent probes all failed come last;
//   - Random other peers, drawn again every RotateEvery (one that leaves
//     the fleet or becomes a nearest peer is replaced at once);
//   - the peers asked for with Want, until their time is up.
//
// A peer asked for with Want and not probed since goes first; otherwise the
// member of the set picked longest ago (never picked first; ties in the
// order above). Peers no longer in the fleet leave the set. ok is false
// when the fleet holds no peer. Cost O(len(fleet) * Nearest), plus
// O(len(fleet)) when random peers are drawn.
func (n *Node) NextTarget(now time.Time, fleet []Peer) (name string, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expire(now)
	n.rebuild(now, fleet)
	if len(n.set) == 0 {
		return "", false
	}

	var pick string
	var first *want
	for _, name := range n.set {
		if w := n.wants[name]; w != nil && w.pending && (first == nil || w.seq < first.seq) {
			pick, first = name, w
		}
	}
	if first == nil {
		oldest := uint64(math.MaxUint64)
		for _, name := range n.set {
			last := uint64(0)
			if st := n.peers[name]; st != nil {
				last = st.lastPick
			}
			if last < oldest {
				pick, oldest = name, last
			}
		}
	} else {
		first.pending = false
	}
	st := n.state(pick)
	n.seq++
	st.lastPick = n.seq
	return pick, true
}

// expire drops results older than MaxAge, wants whose time is up, and the
// state of peers left with neither results nor a place in the set or the
// wants. It passes over the peers only when a result may have expired, or
// MaxAge after its last pass.
func (n *Node) expire(now time.Time) {
	for name, w := range n.wants {
		if !now.Before(w.until) {
			delete(n.wants, name)
		}
	}
	for name, sc := range n.shortcuts {
		if now.Sub(sc.m.LastAt) > n.cfg.ShortcutMaxAge {
			delete(n.shortcuts, name)
		}
	}
	if !now.After(n.expireAt) && !n.expireAt.IsZero() {
		return
	}
	n.expireAt = now.Add(n.cfg.MaxAge)
	for name, st := range n.peers {
		if len(st.results) > 0 && now.After(st.expires) {
			st.results = slices.DeleteFunc(st.results, func(r result) bool { return now.Sub(r.at) > n.cfg.MaxAge })
			st.update(n.cfg.MaxAge)
		}
		if len(st.results) == 0 {
			if !slices.Contains(n.set, name) && n.wants[name] == nil {
				delete(n.peers, name)
				n.client.ForgetNode(name)
			}
			continue
		}
		if st.expires.Before(n.expireAt) {
			n.expireAt = st.expires
		}
	}
}

// state is peer's state, made if need be.
func (n *Node) state(peer string) *peerState {
	st := n.peers[peer]
	if st == nil {
		st = &peerState{}
		n.peers[peer] = st
	}
	return st
}

// rank orders candidates for the nearest peers: class first, then ms.
type rank struct {
	class int // 0: RTT measured or estimated; 1: unknown; 2: failing
	ms    float64
	tie   uint64
	name  string
}

// byRank orders ranks for slices' sort and search functions; no two
// ranks are equal (names differ), so it never returns 0.
func byRank(a, b rank) int {
	if a.less(b) {
		return -1
	}
	return 1
}

func (a rank) less(b rank) bool {
	if a.class != b.class {
		return a.class < b.class
	}
	if a.ms != b.ms {
		return a.ms < b.ms
	}
	if a.tie != b.tie {
		return a.tie < b.tie
	}
	return a.name < b.name
}

// rerankEvery is how often the nearest peers are ranked again while the
// fleet's size stays the same: ranking costs a pass over the fleet, and
// medians and coordinates move little in a minute. A fleet that grew or
// shrank is ranked again at once.
const rerankEvery = time.Minute

// rebuild computes the probe set from the fleet. Random and wanted peers
// always have a state, so one map look-up per fleet peer tells both its
// results and that it is in the fleet (st.seen).
func (n *Node) rebuild(now time.Time, fleet []Peer) {
	if n.rankedLen == len(fleet) && !n.rankedAt.IsZero() && now.Sub(n.rankedAt) < rerankEvery && !n.learning() {
		n.rebuildSet(now, fleet)
		return
	}
	n.rankedAt, n.rankedLen = now, len(fleet)
	self := n.client.GetCoordinate()
	learning := n.learning() || !valid(self)
	n.gen++
	top := make([]rank, 0, n.cfg.Nearest+1)
	// With PerRing, each ring's best Nearest (class 0) are kept apart,
	// and merged with top once the fleet is ranked.
	var rings map[int][]rank
	if n.cfg.PerRing > 0 {
		rings = map[int][]rank{}
	}
	for _, p := range fleet {
		if p.Name == "" || p.Name == n.name {
			continue
		}
		st := n.peers[p.Name]
		if st != nil {
			if st.seen == n.gen {
				continue // listed twice
			}
			st.seen = n.gen
		}
		r := n.rankOf(p, st, self, learning)
		if rings != nil && r.class == 0 {
			ring := ringOf(r.ms)
			rings[ring] = insertRank(rings[ring], r, n.cfg.Nearest, st == nil)
			continue
		}
		top = insertRank(top, r, n.cfg.Nearest, st == nil)
	}
	if rings != nil {
		top = n.fillRings(rings, top)
	} else {
		n.firstCapMs, n.nextCapMs = math.Inf(1), math.Inf(-1)
		if n.full(top) {
			n.firstCapMs = top[len(top)-1].ms
		}
	}
	n.worstNearestMs = math.Inf(1)
	if n.full(top) {
		n.worstNearestMs = 0
	}
	n.nearest = n.nearest[:0]
	for _, r := range top {
		n.nearest = append(n.nearest, r.name)
		n.worstNearestMs = max(n.worstNearestMs, r.ms)
	}

	n.rebuildSet(now, fleet)
}

// fillRings merges the rings' ranked peers (class 0, each ring sorted)
// with top (the peers ranked without an RTT, sorted) into the nearest
// peers: each ring's first PerRing, by rank, then the rings' next ones,
// by rank, then top's, at most Nearest in all. A fleet in fewer rings
// than Nearest/PerRing, such as one data centre's, so still fills the
// set with its lowest RTTs. It sets ringWorstMs, firstCapMs and nextCapMs
// for wouldBeNear.
func (n *Node) fillRings(rings map[int][]rank, top []rank) []rank {
	var first, next []rank
	clear(n.ringWorstMs)
	for g, ring := range rings {
		k := min(len(ring), n.cfg.PerRing)
		first = append(first, ring[:k]...)
		next = append(next, ring[k:]...)
		if k == n.cfg.PerRing {
			if n.ringWorstMs == nil {
				n.ringWorstMs = map[int]float64{}
			}
			n.ringWorstMs[g] = ring[k-1].ms
		}
	}
	slices.SortFunc(first, byRank)
	slices.SortFunc(next, byRank)
	set := slices.Concat(first, next, top)
	set = set[:min(len(set), n.cfg.Nearest)]
	n.firstCapMs, n.nextCapMs = math.Inf(1), math.Inf(1)
	switch {
	case len(first) >= n.cfg.Nearest:
		// All first: a peer enters as one of its ring's first, below the
		// set's worst, and never as a next one.
		n.firstCapMs, n.nextCapMs = set[len(set)-1].ms, math.Inf(-1)
	case n.full(set):
		// Full, the last a next one: any new first enters, a next one
		// only below that last.
		n.nextCapMs = set[len(set)-1].ms
	}
	return set
}

// full says a nearest set holds Nearest peers, all ranked by RTT.
func (n *Node) full(set []rank) bool {
	return len(set) == n.cfg.Nearest && set[len(set)-1].class == 0
}

// wouldBeNear says a peer not among the nearest, measured at ms, would be
// one of them were they ranked again.
func (n *Node) wouldBeNear(ms float64) bool {
	if worst, full := n.ringWorstMs[ringOf(ms)]; !full || ms < worst {
		return ms < n.firstCapMs
	}
	return ms < n.nextCapMs
}

// insertRank inserts r into top, sorted, keeping at most limit; a peer
// that may be listed twice (check) is not inserted again.
func insertRank(top []rank, r rank, limit int, check bool) []rank {
	if len(top) == limit && !r.less(top[len(top)-1]) {
		return top
	}
	if check && slices.ContainsFunc(top, func(t rank) bool { return t.name == r.name }) {
		return top // listed twice
	}
	i, _ := slices.BinarySearchFunc(top, r, byRank)
	top = slices.Insert(top, i, r)
	if len(top) > limit {
		top = top[:limit]
	}
	return top
}

// ringOf is the ring of Config.PerRing an RTT falls in: 0 below 4 ms, 1
// for 4–8 ms, 2 for 8–16 ms, and so on.
func ringOf(ms float64) int {
	if !(ms >= 4) {
		return 0
	}
	return 1 + int(math.Log2(ms/4))
}

// rebuildSet completes the probe set around the nearest peers: the random
// peers (drawn again when due) and the wanted ones.
func (n *Node) rebuildSet(now time.Time, fleet []Peer) {
	if !n.drawn || now.Sub(n.drawnAt) >= n.cfg.RotateEvery {
		n.random = n.random[:0]
		n.drawn, n.drawnAt = true, now
	} else {
		n.random = slices.DeleteFunc(n.random, func(name string) bool {
			return !n.inFleet(name) || slices.Contains(n.nearest, name)
		})
	}
	if len(n.random) < n.cfg.Random {
		n.draw(fleet)
	}

	n.set = append(append(n.set[:0], n.nearest...), n.random...)
	var wanted []string
	for name := range n.wants {
		if n.inFleet(name) && !slices.Contains(n.set, name) {
			wanted = append(wanted, name)
		}
	}
	slices.Sort(wanted)
	n.set = append(n.set, wanted...)
}

// inFleet says a peer with a state was in the fleet of the last rebuild.
func (n *Node) inFleet(name string) bool {
	st := n.peers[name]
	return st != nil && st.seen == n.gen
}

func (n *Node) rankOf(p Peer, st *peerState, self *coordinate.Coordinate, learning bool) rank {
	r := rank{class: 1, name: p.Name}
	if st != nil && len(st.results) > 0 {
		if st.sum.Samples > 0 {
			r.class, r.ms = 0, st.sum.MedianMs
			return r
		}
		r.class = 2
	} else if !learning && p.Coord != nil && len(p.Coord.Vec) == len(self.Vec) && valid(p.Coord) {
		r.class, r.ms = 0, estimateSeconds(self, p.Coord)*1000
		return r
	}
	r.tie = n.tie(p.Name)
	return r
}

// tie is a random number fixed per (node, peer name): the order of peers
// nothing is known about.
func (n *Node) tie(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	x := h.Sum64() ^ n.seed
	// splitmix64's finalizer, so that close names get unrelated ranks.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// draw fills the random peers up to cfg.Random with fleet peers in neither
// the nearest nor the random ones, uniformly.
func (n *Node) draw(fleet []Peer) {
	cand := make([]string, 0, len(fleet))
	for _, p := range fleet {
		if p.Name == "" || p.Name == n.name || slices.Contains(n.nearest, p.Name) || slices.Contains(n.random, p.Name) {
			continue
		}
		cand = append(cand, p.Name)
	}
	for i := 0; i < len(cand) && len(n.random) < n.cfg.Random; i++ {
		j := i + n.rnd.IntN(len(cand)-i)
		cand[i], cand[j] = cand[j], cand[i]
		if !slices.Contains(n.random, cand[i]) { // listed twice
			n.random = append(n.random, cand[i])
			n.state(cand[i]).seen = n.gen
		}
	}
}

// Observe records the result of one probe of peer at now: an RTT of rttMs
// milliseconds, or a failure when failed is set or rttMs is not a positive
// finite number. An answered probe joins the peer's window and, when the
// peer's coordinate is known, moves this node's coordinate (Serf's Vivaldi
// update, which keeps its own median filter of the last few RTTs per peer);
// a failure only joins the window. Results for this node itself are ignored.
func (n *Node) Observe(now time.Time, peer Peer, rttMs float64, failed bool) {
	if peer.Name == "" || peer.Name == n.name {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	failed = failed || !(rttMs > 0) || math.IsInf(rttMs, 0)
	st := n.state(peer.Name)
	if len(st.results) >= n.cfg.Window {
		st.results = slices.Delete(st.results, 0, len(st.results)-n.cfg.Window+1)
	}
	r := result{at: now, ms: rttMs, failed: failed}
	if failed {
		r.ms = 0
	}
	st.results = append(st.results, r)
	st.update(n.cfg.MaxAge)
	near := slices.Contains(n.nearest, peer.Name)
	if near && (failed || st.sum.MedianMs > n.worstNearestMs) || !near && !failed && n.wouldBeNear(st.sum.MedianMs) {
		n.rankedAt = time.Time{} // the nearest set may change: rank again
	}
	if st.expires.Before(n.expireAt) {
		n.expireAt = st.expires
	}
	if failed || peer.Coord == nil {
		return
	}
	// The peer's coordinate is its own word: an error it claims below
	// what any measurement allows would give it the whole weight of the
	// update (Believed).
	peer.Coord = Believed(peer.Coord)
	n.noteShortcut(peer, st.sum)
	before := n.client.Stats().Resets
	if _, err := n.client.Update(peer.Name, peer.Coord, time.Duration(rttMs*float64(time.Millisecond))); err != nil {
		n.stats.Rejected++
		return
	}
	n.stats.Updates++
	if n.client.Stats().Resets != before {
		n.stats.Resets++
		n.restart()
	}
}

// noteShortcut keeps peer as a shortcut when m, its window's summary, is
// at most ShortcutRatio of what the coordinates estimate (before this
// probe moves them), and refreshes the measurement of one already kept.
// Not while learning: the estimate then means nothing.
func (n *Node) noteShortcut(peer Peer, m Measurement) {
	m.Peer = peer.Name
	old, kept := n.shortcuts[peer.Name]
	if kept {
		old.m = m
		n.shortcuts[peer.Name] = old
	}
	if n.learning() || m.Samples == 0 || n.cfg.Shortcuts == 0 {
		return
	}
	est, ok := EstimateMs(n.client.GetCoordinate(), peer.Coord)
	if !ok || est <= 0 {
		return
	}
	ratio := m.MedianMs / est
	if ratio > ShortcutRatio || kept && ratio >= old.ratio {
		return
	}
	n.shortcuts[peer.Name] = shortcut{m: m, ratio: ratio}
	if len(n.shortcuts) <= n.cfg.Shortcuts {
		return
	}
	// Over the bound: drop the highest ratio (ties: the name last).
	var worst string
	for name, sc := range n.shortcuts {
		w, ok := n.shortcuts[worst]
		if !ok || sc.ratio > w.ratio || sc.ratio == w.ratio && name > worst {
			worst = name
		}
	}
	delete(n.shortcuts, worst)
}

// Want asks for peer to be measured exactly until until (a plan needs this
// pair): while it is in the fleet it joins the probe set, within the same
// budget, and is probed next (after peers asked for earlier and not probed
// yet). Asking again for a peer asks for one more probe and moves until.
func (n *Node) Want(peer string, until time.Time) {
	if peer == "" || peer == n.name {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	n.wants[peer] = &want{until: until, seq: n.seq, pending: true}
	n.state(peer) // so that rebuild sees it in the fleet
}

// Measured is this node's own measurements, for publishing: the peers of
// the probe set as the last NextTarget made it, and those asked for with
// Want whose time is not up, that have results under MaxAge old; and the
// shortcuts (Config.Shortcuts) under ShortcutMaxAge old, as last measured.
// At most Nearest + Random + Shortcuts + the number of wanted peers; sorted
// by peer name.
func (n *Node) Measured(now time.Time) []Measurement {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expire(now)
	names := n.probeSet()
	out := make([]Measurement, 0, len(names)+len(n.shortcuts))
	for _, name := range names {
		st := n.peers[name]
		if st == nil || len(st.results) == 0 {
			continue
		}
		m := st.sum
		m.Peer = name
		out = append(out, m)
	}
	for name, sc := range n.shortcuts {
		if !slices.ContainsFunc(out, func(m Measurement) bool { return m.Peer == name }) {
			out = append(out, sc.m)
		}
	}
	slices.SortFunc(out, func(a, b Measurement) int { return strings.Compare(a.Peer, b.Peer) })
	return out
}

// summarize is a window's measurement (Peer left empty). The median of an
// even number of samples is the mean of the middle two.
func summarize(rs []result) Measurement {
	var m Measurement
	ms := make([]float64, 0, len(rs))
	for _, r := range rs {
		if r.at.After(m.LastAt) {
			m.LastAt = r.at
		}
		if r.failed {
			m.Failures++
			continue
		}
		ms = append(ms, r.ms)
	}
	m.Samples = len(ms)
	if len(ms) == 0 {
		return m
	}
	slices.Sort(ms)
	m.MinMs = ms[0]
	if h := len(ms) / 2; len(ms)%2 == 1 {
		m.MedianMs = ms[h]
	} else {
		m.MedianMs = (ms[h-1] + ms[h]) / 2
	}
	return m
}
