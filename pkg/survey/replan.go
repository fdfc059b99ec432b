package survey

import (
	"encoding/json"
	"fmt"
	"io"
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

// replansFile is what Save writes: per destination its kept plan.
type replansFile struct {
	Version int                    `json:"version"`
	Plans   map[string]replansSave `json:"plans"`
}

type replansSave struct {
	Prior   *shortlist.Prior `json:"prior"`
	FreshAt time.Time        `json:"fresh_at"`
	PutAt   time.Time        `json:"put_at"`
}

// replansVersion is replansFile's format; Load ignores another.
const replansVersion = 1

// Save writes what r keeps, for Load in a later process (relayctl plan
// and bench keep it between runs: each run is a process of its own).
func (r *Replans) Save(w io.Writer) error {
	f := replansFile{Version: replansVersion, Plans: map[string]replansSave{}}
	if r != nil {
		r.mu.Lock()
		for k, e := range r.m {
			f.Plans[k] = replansSave{Prior: e.prior, FreshAt: e.freshAt, PutAt: e.putAt}
		}
		r.mu.Unlock()
	}
	return json.NewEncoder(w).Encode(f)
}

// Load adds what Save wrote to r, keeping r's own where both have a
// destination and honouring r's bound on destinations. A file of another
// format version is ignored (the plans start afresh); one that does not
// parse is an error.
func (r *Replans) Load(rd io.Reader) error {
	var f replansFile
	if err := json.NewDecoder(rd).Decode(&f); err != nil {
		return fmt.Errorf("kept plans: %w", err)
	}
	if f.Version != replansVersion {
		return nil
	}
	for k, e := range f.Plans {
		if e.Prior == nil {
			continue
		}
		r.mu.Lock()
		_, have := r.m[k]
		r.mu.Unlock()
		if !have {
			r.put(k, e.Prior, e.FreshAt, e.PutAt)
		}
	}
	return nil
}
