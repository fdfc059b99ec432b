package fleetsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/netsim"
	"github.com/relaymesh/relaymesh/planner"
)

// Run simulates cfg. Progress, when not nil, is told each phase.
func Run(ctx context.Context, cfg Config, progress func(string)) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s, err := newSimulation(cfg, progress)
	if err != nil {
		return nil, err
	}
	if err := s.warmUp(ctx); err != nil {
		return nil, err
	}
	// The plans, and the report on the fleet, are at the warm-up's end:
	// with drift, the relays' coordinates were learnt on the RTTs of
	// earlier moments.
	s.world = s.world.At(cfg.Warmup)
	rep, alive, err := s.fleetReport()
	if err != nil {
		return nil, err
	}
	if err := s.planPairs(ctx, rep, alive); err != nil {
		return nil, err
	}
	return rep, nil
}

// simulation is one Run: the world and its relays, the warm-up that
// gives them coordinates, and the plans over them.
type simulation struct {
	cfg    Config
	say    func(format string, args ...any)
	world  *netsim.World
	relays []*relay
	index  map[string]int
	// rnd is the warm-up's probe noise, then the fleet statistics'
	// draws, in that order; the pairs and their probes have sources of
	// their own.
	rnd   *rand.Rand
	start time.Time // the warm-up's start, on the relays' clocks
	// fleet is the last publication; each is a new slice, which the
	// relays' views share.
	fleet         []coord.Peer
	probes, bytes int64 // the warm-up's probes and their bytes

	// The warm-up's churn: the world's events not applied yet, the
	// joined relays to judge a minute after they joined (in time order),
	// and the errors of those judged.
	events     []netsim.Event
	checks     []joinCheck
	joinedErrs []float64
	// rejoin is Config.Rejoin's relays (of rejoinCities cities),
	// restarted at rejoinAt; restarted counts those alive then.
	rejoin                  []int
	rejoinCities, restarted int
	rejoinAt                time.Duration
	// recvScale is pairCase.recvScale, the same for every pair.
	recvScale []float64
}

// joinCheck is a joined relay to judge at at.
type joinCheck struct {
	at    time.Duration
	relay int
}

func newSimulation(cfg Config, progress func(string)) (*simulation, error) {
	s := &simulation{cfg: cfg, say: func(format string, args ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, args...))
		}
	}}
	var err error
	if s.world, err = netsim.NewWorld(cfg.World, cfg.Seed); err != nil {
		return nil, err
	}
	n := s.world.NumRelays()
	s.rnd = rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	s.relays = make([]*relay, n)
	s.index = make(map[string]int, n)
	for i := range s.relays {
		name := fmt.Sprintf("r%04d", i)
		node, err := coord.NewNode(name, cfg.Coord, rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1)))
		if err != nil {
			return nil, err
		}
		s.relays[i] = &relay{name: name, node: node, alive: s.world.Alive(i, 0), windowBytes: cfg.WindowBytes}
		s.index[name] = i
	}
	s.recvScale = make([]float64, n)
	for i, r := range s.relays {
		if cfg.MixedWindows {
			r.windowBytes = mixedWindowBytes(rand.New(rand.NewPCG(cfg.Seed, 0x77696e+uint64(i))))
		}
		s.recvScale[i] = float64(cfg.WindowBytes) / float64(r.windowBytes)
	}
	s.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return s, nil
}

// warmUp runs the fleet for Config.Warmup: every alive relay probes once
// per interval, at its own offset in the interval; every PublishEvery all
// relays publish; relays leave and join as the world's events say.
func (s *simulation) warmUp(ctx context.Context) error {
	cfg := s.cfg
	interval := cfg.Coord.Interval()
	offsets, order := s.probeOffsets(interval)
	s.events = s.world.Events(cfg.Warmup)
	s.pickRejoin()
	s.publish(s.start)
	s.readFleetViews()
	s.say("warm-up: %d relays, %v simulated", len(s.relays), cfg.Warmup)
	nextPublish := cfg.PublishEvery
	for tick := time.Duration(0); tick < cfg.Warmup; tick += interval {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, i := range order {
			at := tick + offsets[i]
			if err := s.churn(at); err != nil {
				return err
			}
			s.judgeJoined(at)
			for nextPublish <= at {
				s.publish(s.start.Add(nextPublish))
				nextPublish += cfg.PublishEvery
			}
			s.probeOnce(i, at)
		}
	}
	s.publish(s.start.Add(cfg.Warmup))
	return nil
}

// probeOffsets draws each relay's offset in the probe interval, and the
// relays in the order of their offsets.
func (s *simulation) probeOffsets(interval time.Duration) (offsets []time.Duration, order []int) {
	n := len(s.relays)
	offsets = make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(s.rnd.Int64N(int64(interval)))
	}
	order = make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(offsets[a], offsets[b]) })
	return offsets, order
}

// publish makes every alive relay's coordinate and pairs as of now what
// readers see.
func (s *simulation) publish(now time.Time) {
	s.fleet = make([]coord.Peer, 0, len(s.fleet))
	for _, r := range s.relays {
		if r.alive {
			r.coord, r.measured = r.node.Coordinate(), r.node.Measured(now)
			s.fleet = append(s.fleet, coord.Peer{Name: r.name, Coord: r.coord})
		}
	}
}

// readFleetViews has every relay read the fleet at a time of its own
// within the last FleetViewEvery (a relayd started then); one that joins
// reads it at its first probe.
func (s *simulation) readFleetViews() {
	// A source of its own: the probes' noise stays the same.
	phase := rand.New(rand.NewPCG(s.cfg.Seed, 0xf1ee7))
	for _, r := range s.relays {
		r.view, r.viewAt = s.fleet, -time.Duration(phase.Int64N(int64(s.cfg.FleetViewEvery)))
	}
}

// pickRejoin picks Config.Rejoin's relays, whole cities at random, to
// restart RejoinAgo before the warm-up ends (not when that is the
// warm-up's start: they start with everyone).
func (s *simulation) pickRejoin() {
	cfg := s.cfg
	s.rejoinAt = cfg.Warmup - cfg.RejoinAgo
	if s.rejoinAt <= 0 {
		s.rejoinAt = cfg.Warmup + 1 // never
	}
	if cfg.Rejoin <= 0 {
		return
	}
	byCity := map[int][]int{}
	var cities []int
	for i := range s.relays {
		c := s.world.Relay(i).City()
		if len(byCity[c]) == 0 {
			cities = append(cities, c)
		}
		byCity[c] = append(byCity[c], i)
	}
	pick := rand.New(rand.NewPCG(cfg.Seed, 0x7e10))
	pick.Shuffle(len(cities), func(a, b int) { cities[a], cities[b] = cities[b], cities[a] })
	for _, c := range cities {
		if len(s.rejoin) >= cfg.Rejoin {
			break
		}
		s.rejoin = append(s.rejoin, byCity[c]...)
		s.rejoinCities++
	}
}

// fresh makes relay i a new relayd at at: no coordinate, no measurements.
func (s *simulation) fresh(i int, at time.Duration) (err error) {
	r := s.relays[i]
	r.since = at
	r.node, err = coord.NewNode(r.name, s.cfg.Coord, rand.New(rand.NewPCG(s.cfg.Seed, uint64(i)+1)))
	r.coord, r.measured, r.view = nil, nil, nil
	return err
}

// churn applies the world's events up to at (a relay that joins is a new
// relayd, judged a minute later), and restarts the rejoin relays once at
// is past rejoinAt.
func (s *simulation) churn(at time.Duration) error {
	for len(s.events) > 0 && s.events[0].At <= at {
		e := s.events[0]
		s.events = s.events[1:]
		r := s.relays[e.Relay]
		r.alive = e.Kind == netsim.Join
		if !r.alive {
			continue
		}
		if err := s.fresh(e.Relay, e.At); err != nil {
			return err
		}
		if e.At+time.Minute < s.cfg.Warmup {
			s.checks = append(s.checks, joinCheck{at: e.At + time.Minute, relay: e.Relay})
		}
	}
	if at < s.rejoinAt {
		return nil
	}
	for _, j := range s.rejoin {
		if s.relays[j].alive {
			if err := s.fresh(j, at); err != nil {
				return err
			}
			s.restarted++
		}
	}
	s.rejoinAt = s.cfg.Warmup + 1
	return nil
}

// judgeJoined measures the coordinate error of the joined relays due by
// at.
func (s *simulation) judgeJoined(at time.Duration) {
	for len(s.checks) > 0 && s.checks[0].at <= at {
		if c := s.checks[0]; s.relays[c.relay].alive {
			s.joinedErrs = append(s.joinedErrs, coordErrOf(s.world.At(at), s.relays, c.relay, s.rnd))
		}
		s.checks = s.checks[1:]
	}
}

// probeOnce is relay i's probe at at: of the next target its coordinate
// node picks, from the fleet as it last read it.
func (s *simulation) probeOnce(i int, at time.Duration) {
	r := s.relays[i]
	if !r.alive || at >= s.cfg.Warmup {
		return
	}
	now := s.start.Add(at)
	if r.view == nil || at-r.viewAt >= s.cfg.FleetViewEvery {
		r.view, r.viewAt = s.fleet, at
	}
	peer, ok := r.node.NextTarget(now, r.view)
	if !ok {
		return
	}
	j := s.index[peer]
	s.probes++
	s.bytes += ProbeBytes
	if !s.relays[j].alive {
		r.node.Observe(now, coord.Peer{Name: peer, Coord: s.relays[j].coord}, 0, true)
		return
	}
	w := s.world.At(at)
	ms, lost := w.Sample(w.Relay(i), w.Relay(j), s.rnd)
	r.node.Observe(now, coord.Peer{Name: peer, Coord: s.relays[j].coord}, ms, lost)
}

// fleetReport is the report on the fleet after the warm-up (its costs,
// its coordinates' error, its churn), and the relays alive.
func (s *simulation) fleetReport() (*Report, []int, error) {
	cfg, n := s.cfg, len(s.relays)
	rep := &Report{Relays: n, WarmupMin: cfg.Warmup.Minutes()}
	var alive []int
	var published int64
	for i, r := range s.relays {
		if r.alive {
			alive = append(alive, i)
			published += int64(len(r.measured))
		}
	}
	rep.AliveRelays = len(alive)
	read := RegistryReadAt(len(alive))
	rep.RegistryReadMs, rep.RegistryPairsMs = read.RelaysMs, read.PairsMs
	if len(alive) < 2 {
		return nil, nil, errors.New("fewer than 2 relays alive at the end of the warm-up: nothing to plan over")
	}
	relayMinutes := float64(n) * cfg.Warmup.Minutes()
	rep.ProbesPerMin = float64(s.probes) / relayMinutes
	// Each relay publishes its coordinate and its pairs every
	// PublishEvery, and reads the coordinate of each peer it probes.
	perPublish := float64(CoordinateBytes) + float64(published)/float64(len(alive))*MeasurementBytes
	rep.BytesPerMin = float64(s.bytes)/relayMinutes + perPublish*(time.Minute.Seconds()/cfg.PublishEvery.Seconds()) +
		rep.ProbesPerMin*CoordinateReadBytes
	rep.FleetViewBytesPerMin = float64(len(alive)*FleetViewBytesPerRelay) * time.Minute.Seconds() / cfg.FleetViewEvery.Seconds()

	s.say("coordinate error over random pairs")
	var errs []float64
	for range 20000 {
		a, b := alive[s.rnd.IntN(len(alive))], alive[s.rnd.IntN(len(alive))]
		if a == b {
			continue
		}
		est, ok := coord.EstimateMs(s.relays[a].coord, s.relays[b].coord)
		if !ok {
			continue
		}
		truth := s.world.RelayRTTMs(a, b)
		errs = append(errs, math.Abs(est-truth)/truth)
	}
	rep.CoordErrMedian, rep.CoordErrP90 = quantile(errs, 0.5), quantile(errs, 0.9)
	rep.Joined, rep.JoinedErrMedian = len(s.joinedErrs), quantile(s.joinedErrs, 0.5)
	rep.RejoinedRelays, rep.RejoinedCities = len(s.rejoin), s.rejoinCities
	if s.restarted > 0 {
		rep.Rejoined, rep.RejoinedAgoS = s.restarted, cfg.RejoinAgo.Seconds()
	}
	rep.TIVShare = s.world.TIVShare(2000, s.rnd)
	return rep, alive, nil
}

// planInput is what every plan starts from: the alive relays with their
// published coordinates and pairs.
func (s *simulation) planInput(alive []int) shortlist.Input {
	cfg := s.cfg
	in := shortlist.Input{
		Client:      planner.Node{Name: "client", WindowBytes: cfg.WindowBytes},
		Destination: planner.Node{Name: "destination", WindowBytes: cfg.WindowBytes},
		Request:     planner.Request{Constraints: planner.Constraints{MaxHops: cfg.MaxHops}},
	}
	for _, i := range alive {
		r := s.relays[i]
		in.Relays = append(in.Relays, shortlist.Relay{
			Node: planner.Node{Name: r.name, Relay: true, WindowBytes: r.windowBytes}, Coord: r.coord,
			MeasuredFor: cfg.Warmup - r.since})
		for _, m := range r.measured {
			if m.Samples > 0 && s.relays[s.index[m.Peer]].alive {
				in.Exact = append(in.Exact, planner.Pair{A: r.name, B: m.Peer, RTTMs: m.MedianMs})
			}
		}
	}
	return in
}

// planPairs plans Config.Pairs random pairs with each variant, and
// summarises them into rep.
func (s *simulation) planPairs(ctx context.Context, rep *Report, alive []int) error {
	cfg, n := s.cfg, len(s.relays)
	s.say("true matrix of %d relays", n)
	truth := newTrueMatrix(n, s.world.RelayRTTMs)
	aliveMask := make([]bool, n)
	for _, i := range alive {
		aliveMask[i] = true
	}
	in := s.planInput(alive)

	s.say("planning %d random pairs", cfg.Pairs)
	configs := []Variant{{Planning: cfg.Planning}}
	configs = append(configs, cfg.Variants...)
	results := make([][]pairResult, len(configs))
	// The pairs, and each pair's probe noise, come from their own
	// sources: two runs that differ only in how they plan plan the same
	// pairs, and their results compare pair by pair.
	pairRnd := rand.New(rand.NewPCG(cfg.Seed, 0x9a125))
	for k := 0; k < cfg.Pairs; k++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		pc, pin, ok, err := s.drawPair(rep, pairRnd, truth, in, alive, aliveMask, k)
		if err != nil {
			return err
		}
		if !ok {
			k-- // drawn again
			continue
		}
		for c, v := range configs {
			vin := pin
			if v.FitDst {
				vin.DestinationCoord = nil
			}
			if v.RelaysProbeDst {
				vin.DestinationProbes = false
			}
			r, err := pc.plan(ctx, cfg, v, vin, cfg.Seed^(0x9b0be+uint64(k)))
			if err != nil {
				return fmt.Errorf("pair %d: %w", k, err)
			}
			results[c] = append(results[c], r)
		}
	}
	read := RegistryRead{RelaysMs: rep.RegistryReadMs, PairsMs: rep.RegistryPairsMs}
	rep.Plans = summarise(results[0], cfg.Replan, read)
	for i, v := range cfg.Variants {
		rep.Variants = append(rep.Variants, VariantPlans{Name: v.Name, Plans: summarise(results[i+1], cfg.Replan, read)})
	}
	return nil
}

// drawPair draws the k-th pair (a client and a destination, with its
// plans' input and the best any chain could do); ok is false when the
// pair does not count and another is to be drawn: with Config.Rejoin, one
// that a chain within 10 % of its optimum serves without the relays
// restarted.
func (s *simulation) drawPair(rep *Report, pairRnd *rand.Rand, truth *trueMatrix, in shortlist.Input, alive []int, aliveMask []bool, k int) (pc pairCase, pin shortlist.Input, ok bool, err error) {
	cfg, n := s.cfg, len(s.relays)
	client, dst := s.world.RandomEndpoint(pairRnd), s.world.RandomServer(pairRnd)
	pin, mask, hosting := in, aliveMask, -1
	if cfg.DstRelays {
		// The destination's relay is no hop of the pair's chains, in the
		// plans or the optimum (a relay's probe of its own host would be
		// 0 ms, which stands for a failed probe).
		hosting = alive[pairRnd.IntN(len(alive))]
		dst, pin.DestinationCoord, pin.DestinationProbes = s.world.Relay(hosting), s.relays[hosting].coord, true
		name := s.relays[hosting].name
		pin.Relays = slices.DeleteFunc(slices.Clone(in.Relays), func(r shortlist.Relay) bool { return r.Node.Name == name })
		mask = slices.Clone(aliveMask)
		mask[hosting] = false
	}
	pc = pairCase{world: s.world, relays: s.relays, index: s.index, truth: truth, client: client, dst: dst,
		to: make([]float64, n), from: make([]float64, n), maxHops: cfg.MaxHops, hosting: hosting, recvScale: s.recvScale}
	for _, i := range alive {
		pc.to[i], pc.from[i] = s.world.RTTMs(client, s.world.Relay(i)), s.world.RTTMs(s.world.Relay(i), dst)
	}
	pc.directMs = s.world.RTTMs(client, dst)
	byHops := truth.bestByHopsMs(mask, pc.to, pc.from, pc.directMs, cfg.MaxHops, nil)
	pc.optMs, pc.optRate = byHops[len(byHops)-1], bestModelRate(byHops, planner.DefaultRelayOverhead)
	if cfg.MixedWindows {
		pc.optRate = bestModelRate(truth.bestByHopsMs(mask, pc.to, pc.from, pc.directMs, cfg.MaxHops, s.recvScale), planner.DefaultRelayOverhead)
	}
	if len(s.rejoin) == 0 {
		return pc, pin, true, nil
	}
	rep.RejoinDrawn++
	without := slices.Clone(mask)
	for _, j := range s.rejoin {
		without[j] = false
	}
	if pc.optMs/truth.bestBottleneckMs(without, pc.to, pc.from, pc.directMs, cfg.MaxHops) < 0.9 {
		return pc, pin, true, nil
	}
	// A chain within 10 % needs none of them: another pair.
	if rep.RejoinDrawn > 200*cfg.Pairs {
		return pc, pin, false, fmt.Errorf("rejoin: %d random pairs drawn, %d need the %d relays restarted: restart more (--rejoin)", rep.RejoinDrawn, k, len(s.rejoin))
	}
	return pc, pin, false, nil
}
