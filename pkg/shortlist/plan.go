package shortlist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/planner"
)

// Plan plans the path from in.Client to in.Destination: see the package
// documentation. It returns the planner's result, the matrix it planned
// on (candidates only) and what it cost.
func Plan(ctx context.Context, cfg Config, in Input, p Prober) (*planner.Result, *planner.Matrix, Stats, error) {
	r, err := newPlanRun(ctx, cfg, in, p)
	if err != nil {
		return nil, nil, Stats{}, err
	}
	r.startCosts()
	if err := r.landmarksRound(); err != nil {
		return nil, nil, r.st, err
	}
	if err := r.place(); err != nil {
		return nil, nil, r.st, err
	}
	r.priorChains()
	r.rankFirstCut()
	if err := r.measureEnds(); err != nil {
		return nil, nil, r.st, err
	}
	r.rankOnEnds()
	if err := r.rounds(); err != nil {
		return nil, nil, r.st, err
	}
	if err := r.answer(); err != nil {
		return nil, nil, r.st, err
	}
	if err := r.verify(); err != nil {
		return nil, nil, r.st, err
	}
	r.tally()
	return r.res, r.m, r.st, nil
}

// planRun is one plan's state: what the phases of Plan share. Each phase
// is a method, in a file of its own: the landmarks' round (landmarks.go),
// the first cut and its ends (firstcut.go), the shortlist's rounds
// (rounds.go), the answer (answer.go); probes.go keeps the probes' books.
type planRun struct {
	ctx context.Context
	cfg Config
	// in is the plan's input; Describe may tell it more of the
	// destination (in.Destination).
	in    Input
	p     Prober
	st    Stats
	began time.Time

	client, dst string
	placed      map[string]Relay // every relay, by name, as Describe last told of it
	peers       []coord.Peer     // the relays with a coordinate, by name
	young       map[string]bool  // Config.YoungFor
	// prior is in.Prior when it places both endpoints: a replan starts
	// from it (see Prior).
	prior *Prior

	// l holds every RTT probed in this plan, by unordered pair, with the
	// pairs whose probe failed, no segment of this plan whatever was
	// published or estimated for them, and the relays the client's own
	// probe could not reach, no hop of this plan at all (their admin API,
	// which makes their probes, is out of reach too; a relay that
	// vanished still has its coordinate and its published pairs in the
	// registry until they age out).
	l               *ledger
	clientID, dstID int32
	// pending are the pairs probed and not answered yet (LateProber).
	pending map[[2]string]bool
	// ready says the ledger holds the endpoints' and the relays'
	// coordinates and the figures known beforehand: rtt can be asked,
	// and probe orders a batch by it (the landmarks' round it cannot).
	ready bool
	// batch is the round's probes; each round reuses its memory.
	batch []Probe

	// The landmarks' round: the landmarks, and whether the destination's
	// coordinate is known beforehand (Input.DestinationCoord).
	landmarks []coord.Peer
	dstPlaced bool

	// The first cut. sp is the placed relays' space, the pairs' costs
	// for its first ranking on their way in costsReady (computed since
	// the Clock said costsFrom); at is a relay's index in it.
	sp         *space
	costsReady chan []float32
	costsFrom  time.Duration
	at         map[string]int
	// recheck are a replan's probes of its Prior's chains, and kept their
	// relays (see priorChains).
	recheck []Probe
	kept    []string
	// The ranking's terms: the direct path's RTT (+Inf: none), the most
	// relays of a chain, the site limit, and the first cut's indexes in
	// sp, best first.
	directMs float64
	hops     int
	site     siteLimit
	wide     []int
	// candidates is how many relays the planner sees after the first
	// cut's ends are measured; cands are the candidates so far (the first
	// cut until then), sorted.
	candidates int
	cands      []string
	// undescribed are the candidates Describe has not told of yet: their
	// descriptions may be on their way (a Prober's read beside its probe
	// of a relay takes round trips more than the probe), so each round
	// asks again before it plans, and they count from then on.
	undescribed map[string]bool
	// searchFrom is when the search budget starts: once the first cut's
	// ends are in.
	searchFrom time.Duration

	// The rounds. req is what the planner is asked; res and m are the
	// last search's result and matrix.
	req planner.Request
	res *planner.Result
	m   *planner.Matrix
	// g is the figures between the endpoints and the candidates as of
	// the last build: a round's optimisticPairs reads them too.
	g grid
	// pairs is the last matrix's pairs, whose memory the next reuses: a
	// round's matrix at thousands of relays is a few hundred thousand
	// pairs, and the planner keeps none of them past its search.
	pairs []planner.Pair
	// isCand says a relay is a candidate; searched are the bottleneck
	// segments whose neighbourhoods were probed (see neighbourhoods).
	isCand   map[string]bool
	searched map[[2]string]bool
}

// newPlanRun is the state of a plan of in, its relays taken in; an error
// for names a plan cannot tell apart.
func newPlanRun(ctx context.Context, cfg Config, in Input, p Prober) (*planRun, error) {
	r := &planRun{ctx: ctx, cfg: cfg.withDefaults(), in: in, p: p, began: time.Now()}
	client, dst := in.Client.Name, in.Destination.Name
	r.client, r.dst = client, dst
	if client == "" || dst == "" || client == dst {
		return nil, errors.New("shortlist: the client and the destination need two different names")
	}
	r.placed = make(map[string]Relay, len(in.Relays))
	r.young = map[string]bool{}
	for _, rl := range in.Relays {
		if rl.MeasuredFor > 0 && rl.MeasuredFor < r.cfg.YoungFor {
			r.young[rl.Node.Name] = true
		}
		if rl.Node.Name == client || rl.Node.Name == dst {
			return nil, fmt.Errorf("shortlist: relay %q has an endpoint's name", rl.Node.Name)
		}
		if _, twice := r.placed[rl.Node.Name]; twice {
			return nil, fmt.Errorf("shortlist: two relays named %q: a plan needs each relay once", rl.Node.Name)
		}
		r.placed[rl.Node.Name] = rl
		if rl.Coord != nil {
			r.peers = append(r.peers, coord.Peer{Name: rl.Node.Name, Coord: rl.Coord})
		}
	}
	slices.SortFunc(r.peers, func(a, b coord.Peer) int { return cmp.Compare(a.Name, b.Name) })
	r.l = newLedger()
	r.pending = map[[2]string]bool{}
	r.undescribed = map[string]bool{}
	r.req = in.Request
	r.req.Client, r.req.Destination = client, dst
	// A replan starts from its Prior (see Prior) when that places both
	// endpoints.
	r.prior = in.Prior
	if r.prior != nil && !(validCoord(r.prior.Client) && validCoord(r.prior.Destination)) {
		r.prior = nil
	}
	return r, nil
}
