package survey

import (
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/shortlist"
)

// Replan defaults.
const (
	// DefaultFreshEvery: a destination is planned afresh (landmarks, the
	// first cut's ends, every round) at least this often; the replans in
	// between start from what the last plan learnt. Ten minutes: the
	// relays' coordinates move little in that time, and the replans
	// measure again every segment their answer rests on.
	DefaultFreshEvery = 10 * time.Minute
	// DefaultReplanDestinations bounds the destinations whose last plan
	// is kept: each keeps the RTTs its plans measured, some two thousand
	// (about 100 KB) at 1,000 relays.
	DefaultReplanDestinations = 256
)

// Replans keeps, per destination, what its last shortlist plan learnt
// (shortlist.Prior), so that the next survey of it starts from that
// instead of placing the destination again: relayctl connect surveys each
// destination again every minute. Safe for concurrent use; the zero value
// is ready, with the defaults.
type Replans struct {
	// FreshEvery is how long after a destination's fresh plan (one not
	// started from a Prior) its surveys may start from what the plans
	// learnt; 0 = DefaultFreshEvery, negative = every plan fresh.
	FreshEvery time.Duration
	// Destinations bounds the destinations kept (the least recently
	// planned goes first); 0 = DefaultReplanDestinations.
	Destinations int

	mu sync.Mutex
	m  map[string]replan
}

type replan struct {
	prior   *shortlist.Prior
	freshAt time.Time // when the plan the prior descends from was made
	putAt   time.Time
}

// get is what dst's next plan starts from at now (nil: plan afresh) and
// when its line of plans began (now for a fresh one).
func (r *Replans) get(dst string, now time.Time) (*shortlist.Prior, time.Time) {
	if r == nil || r.FreshEvery < 0 {
		return nil, now
	}
	every := r.FreshEvery
	if every == 0 {
		every = DefaultFreshEvery
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[dst]
	if !ok || now.Sub(e.freshAt) >= every || now.Before(e.freshAt) {
		return nil, now
	}
	return e.prior, e.freshAt
}

// put keeps what dst's plan learnt; freshAt is get's second answer.
func (r *Replans) put(dst string, prior *shortlist.Prior, freshAt, now time.Time) {
	if r == nil || r.FreshEvery < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prior == nil {
		delete(r.m, dst)
		return
	}
	if r.m == nil {
		r.m = map[string]replan{}
	}
	r.m[dst] = replan{prior: prior, freshAt: freshAt, putAt: now}
	limit := r.Destinations
	if limit <= 0 {
		limit = DefaultReplanDestinations
	}
	for len(r.m) > limit {
		oldest := ""
		for k, e := range r.m {
			if oldest == "" || e.putAt.Before(r.m[oldest].putAt) {
				oldest = k
			}
		}
		delete(r.m, oldest)
	}
}
