package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/fleet"
)

// Measurements is what a relay's admin API serves at /v1/measurements: the
// pairs it measured itself and its own network coordinate (scope=local, the
// default), or with scope=fleet also the pairs and coordinates it pulled
// from its peers. AgeS of each pair and coordinate is its age when served,
// so a reader computes UpdatedAt on its own clock (relays' clocks may
// disagree; ages do not). A relay probing every peer (probe mode mesh) has
// no coordinate.
type Measurements struct {
	Relay       string             `json:"relay"`
	Region      string             `json:"region,omitempty"`
	Pairs       []ServedPair       `json:"pairs"`
	Coordinates []ServedCoordinate `json:"coordinates,omitempty"`
}

// ServedPair is a Pair with its age at serving time.
type ServedPair struct {
	Pair
	AgeS float64 `json:"age_s"`
}

// Serve turns pairs into what /v1/measurements answers, ages taken at now.
func Serve(relay, region string, pairs []Pair, now time.Time) Measurements {
	m := Measurements{Relay: relay, Region: region, Pairs: make([]ServedPair, 0, len(pairs))}
	for _, p := range pairs {
		m.Pairs = append(m.Pairs, ServedPair{Pair: p, AgeS: p.Age(now).Seconds()})
	}
	return m
}

// FleetHealthTTL: a relay whose admin API answered within this is healthy;
// otherwise a peer's probe answered within this makes it healthy.
const FleetHealthTTL = 30 * time.Second

// Fleet is the fleet-file backend. Relays come from the file (re-read when
// it changes, or on Reload); measurements and coordinates are pulled from
// each relay's admin API with the file's admin token. Inside relayd, Self
// names the relay running it: its own pairs come from Publish and its
// coordinate from PublishCoordinate, not from a pull.
type Fleet struct {
	path      string
	self      string
	client    *adminapi.Client
	pullEvery time.Duration // Run's pull interval
	events    Events

	mu      sync.Mutex
	file    *fleet.File
	modTime time.Time
	size    int64
	local   []Pair
	coord   *Coordinate // this relay's own, from PublishCoordinate
	// started is when this registry (its relayd) started: its
	// coordinate has been measured since (Coordinate.MeasuredForS).
	started time.Time
	pulled  map[string]pull
	relayed map[string][]Pair // by From: pairs of peers we cannot reach, as another peer knows them
	// relayedCoords are the coordinates of peers we cannot reach, as
	// another peer knows them.
	relayedCoords map[string]Coordinate
	rotate        int // which reachable peer relays next
	watchers      watchers
	// pullOnly (Options.PullOnly) makes Sync sparse; coordsAt is when it
	// last read the fleet's coordinates, coordsNext which peer it asks
	// next.
	pullOnly   func() []string
	coordsAt   time.Time
	coordsNext int
}

type pull struct {
	// pairs and coords are the relay's own word: the pairs with it as an
	// end, its own coordinate. heardPairs and heardCoords are what it
	// passes on of others ("fleet", "coordinates"): hearsay, believed
	// only as hearsay.go says.
	pairs       []Pair
	coords      []Coordinate
	heardPairs  []Pair
	heardCoords []Coordinate
	at          time.Time // when it answered
	err         error
}

// openFleet reads the fleet file at path (Open's fleet-file half). self is
// the name of the relay using it ("" for a client such as relayctl); admin
// reaches the relays' admin APIs (a 3 s timeout suits the pulls).
func openFleet(path, self string, admin *adminapi.Client) (*Fleet, error) {
	f := &Fleet{
		path: path, self: self, client: admin, pullEvery: DefaultPullInterval, started: time.Now(),
		pulled: map[string]pull{}, relayed: map[string][]Pair{}, relayedCoords: map[string]Coordinate{},
	}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	if self != "" {
		if _, ok := f.file.Relay(self); !ok {
			for _, e := range f.file.Skipped {
				if strings.Contains(e.Error(), fmt.Sprintf("name %q", self)) {
					return nil, fmt.Errorf("this relay's own entry is invalid: %w", e)
				}
			}
			return nil, fmt.Errorf("%s: this relay (%q) is not listed; add it, or set this relay's name to one of the file's", path, self)
		}
	}
	return f, nil
}

// Reload re-reads the file if it changed since the last read. On an error
// (the file cannot be read, or is not a fleet file) the last good fleet
// stays in use. A file with bad relay entries is used without them: the
// entries are in File().Skipped.
func (f *Fleet) Reload() (changed bool, err error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	same := f.file != nil && st.ModTime().Equal(f.modTime) && st.Size() == f.size
	f.mu.Unlock()
	if same {
		return false, nil
	}
	file, err := fleet.Load(f.path)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	f.file, f.modTime, f.size = file, st.ModTime(), st.Size()
	for name := range f.pulled {
		if _, ok := file.Relay(name); !ok {
			delete(f.pulled, name)
		}
	}
	for name := range f.relayed {
		if _, ok := file.Relay(name); !ok {
			delete(f.relayed, name)
		}
	}
	for name := range f.relayedCoords {
		if _, ok := file.Relay(name); !ok {
			delete(f.relayedCoords, name)
		}
	}
	f.mu.Unlock()
	f.watchers.notify()
	return true, nil
}

// File returns the fleet as last read.
func (f *Fleet) File() *fleet.File {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.file
}

// Problems lists the relay entries of the file in use that were left out,
// each naming its entry (fleet.File.Skipped).
func (f *Fleet) Problems() []error { return slices.Clone(f.File().Skipped) }

// Relays lists the fleet with health: the relay itself is healthy; another
// is healthy when its admin API answered a pull within FleetHealthTTL, or
// when a peer's newest probe of it, less than FleetHealthTTL old, was
// answered.
func (f *Fleet) Relays(ctx context.Context) ([]Relay, error) {
	pairs, _ := f.Pairs(ctx)
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Relay, 0, len(f.file.Relays))
	for _, r := range f.file.Relays {
		rel := Relay{Name: r.Name, Region: r.Region, SOCKS: r.SOCKS, HTTP: r.HTTP, Admin: r.Admin, Relay: r.Relay, Health: "unknown"}
		switch p, ok := f.pulled[r.Name]; {
		case r.Name == f.self:
			rel.Healthy, rel.Health = true, "self"
		case ok && p.err == nil && now.Sub(p.at) < FleetHealthTTL:
			rel.Healthy, rel.Health = true, "admin"
		default:
			for _, p := range pairs {
				if p.To == r.Name && p.Answering() && p.Age(now) < FleetHealthTTL {
					rel.Healthy, rel.Health = true, "probes"
					break
				}
			}
		}
		out = append(out, rel)
	}
	return out, nil
}

// Pairs merges this relay's own pairs and those pulled from others, keeping
// the newest per (from, to).
func (f *Fleet) Pairs(context.Context) ([]Pair, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	newest := newestPairs{}
	newest.add(f.local)
	for _, p := range f.pulled {
		newest.add(p.pairs)
	}
	for _, ps := range f.relayed {
		newest.add(ps)
	}
	newest.add(f.believedHearsayPairsLocked())
	return newest.sorted(), nil
}

// Publish records this relay's own measurements (from must be Self).
func (f *Fleet) Publish(_ context.Context, from string, pairs []Pair) error {
	if from != f.self || from == "" {
		return fmt.Errorf("fleet registry of %q cannot publish for %q: each relay serves its own measurements", f.self, from)
	}
	f.mu.Lock()
	f.local = slices.Clone(pairs)
	f.mu.Unlock()
	return nil
}

// PublishCoordinate records this relay's own network coordinate (relay
// must be Self), served at /v1/measurements with the pairs.
func (f *Fleet) PublishCoordinate(_ context.Context, relay string, c *coordinate.Coordinate) error {
	if relay != f.self || relay == "" {
		return fmt.Errorf("fleet registry of %q cannot publish a coordinate for %q: each relay serves its own", f.self, relay)
	}
	if !saneCoord(c) {
		return fmt.Errorf("fleet registry of %q: coordinate %+v is not a usable one (finite, at most %d dimensions, within %d s)", relay, c, maxCoordDims, maxCoordSeconds)
	}
	f.mu.Lock()
	f.coord = ownCoordinate(relay, c, f.started)
	f.mu.Unlock()
	return nil
}

// Coordinates merges this relay's own coordinate and those pulled from
// others, keeping the newest per relay. A relay, which pulls each peer's
// own ("local"), knows its peers' coordinates; relayctl, which reads
// "fleet" from every relay (Refresh), knows every one any of them knows.
func (f *Fleet) Coordinates(context.Context) ([]Coordinate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	newest := newestCoords{}
	if f.coord != nil {
		newest.add(*f.coord)
	}
	for _, p := range f.pulled {
		newest.add(p.coords...)
	}
	for _, c := range f.relayedCoords {
		newest.add(c)
	}
	newest.add(f.believedHearsayCoordsLocked()...)
	return newest.sorted(), nil
}

// Watch signals when the file changed.
func (f *Fleet) Watch(ctx context.Context) <-chan struct{} { return f.watchers.add(ctx) }

// Pull pulls every other relay's measurements concurrently. scope is
// "local" (what each measured: N-1 pairs) or "fleet" (what each knows: up
// to the whole matrix). relayctl pulls "fleet" once (Refresh), so one
// reachable relay is enough; relays keep in step with Sync. It returns the
// relays that could not be reached, joined.
func (f *Fleet) Pull(ctx context.Context, scope string) error {
	return f.pull(ctx, scope, nil)
}

// pull is Pull, from only the relays named in only when it is not nil.
func (f *Fleet) pull(ctx context.Context, scope string, only []string) error {
	file := f.File()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, r := range file.Relays {
		if r.Name == f.self || r.Admin == "" || only != nil && !slices.Contains(only, r.Name) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pairs, coords, err := f.fetch(ctx, r, file.AdminToken, scope)
			f.mu.Lock()
			if err == nil {
				f.pulled[r.Name] = splitWord(r.Name, pairs, coords, time.Now())
			} else {
				old := f.pulled[r.Name]
				old.err = err // keep the last pairs and coordinates: they age, and say so
				f.pulled[r.Name] = old
			}
			f.mu.Unlock()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s (%s): %w", r.Name, r.Admin, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *Fleet) fetch(ctx context.Context, r fleet.Relay, token, scope string) ([]Pair, []Coordinate, error) {
	body, err := f.client.Get(ctx, r.Name, r.Admin, adminapi.PathMeasurements+"?scope="+scope, token, 16<<20)
	if err != nil {
		return nil, nil, err
	}
	var m Measurements
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, nil, fmt.Errorf("measurements: %w", err)
	}
	now := time.Now()
	out := make([]Pair, 0, len(m.Pairs))
	for _, sp := range m.Pairs {
		// A relay speaks for itself ("local"): pairs it claims for others
		// are dropped. ("fleet" is what it relays; Sync takes from it only
		// the relays this one cannot reach.) Ages in the future and
		// impossible figures are dropped too: a future age never goes
		// stale, a zero RTT pulls every plan through the liar.
		if (scope == "local" && sp.From != r.Name) || !sane(sp.Pair, sp.AgeS) {
			continue
		}
		p := sp.Pair
		p.UpdatedAt = now.Add(-time.Duration(sp.AgeS * float64(time.Second)))
		out = append(out, p)
	}
	// Coordinates likewise: a relay's own in "local", any relay's in
	// "fleet"; an impossible one, or an age in the future, is dropped.
	coords := make([]Coordinate, 0, len(m.Coordinates))
	for _, sc := range m.Coordinates {
		if (scope == "local" && sc.Relay != r.Name) || sc.Relay == "" || !saneCoord(sc.Coord) || !saneAge(sc.AgeS) {
			continue
		}
		c := sc.Coordinate
		// Its error as a peer's is believed (coord.Believed): one
		// claimed below what any measurement allows would take the
		// whole weight of the readers' Vivaldi updates.
		c.Coord = coord.Believed(c.Coord)
		c.UpdatedAt = now.Add(-time.Duration(sc.AgeS * float64(time.Second)))
		coords = append(coords, c)
	}
	return out, coords, nil
}

// MinRTTMs is the smallest RTT believed from another relay: 1 us. Relays
// on one host measure each other over loopback, where a TCP handshake has
// taken 5-10 us on an idle machine; two hosts take tens of microseconds.
// Below it the figure is a liar's (a zero RTT would pull every plan
// through it).
const MinRTTMs = 0.001

// maxSendBps is the highest learnt send rate believed: 10 Tbit/s.
const maxSendBps = 1e13

// sane says whether a pair's figures are possible: an age (seconds) not in
// the future, RTTs within [MinRTTMs, 60 s] when probes were answered, loss
// in [0, 1], a send rate in [0, maxSendBps] from a known source, no
// negative counts.
func sane(sp Pair, ageS float64) bool {
	ok := func(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }
	if !saneAge(ageS) || !ok(sp.Loss, 0, 1) || sp.Samples < 0 || sp.From == "" || sp.To == "" || sp.From == sp.To {
		return false
	}
	if sp.Samples > 0 && sp.Loss < 1 && !ok(sp.RTTMs, MinRTTMs, 60_000) {
		return false
	}
	for _, v := range []float64{sp.MinMs, sp.P90Ms, sp.JitterMs} {
		if !ok(v, 0, 60_000) {
			return false
		}
	}
	return ok(sp.SendBps, 0, maxSendBps) && (sp.SendSource == "" || sp.SendSource == SendFromProbe)
}

// saneAge says whether an age (seconds) is possible: not in the future,
// and under 30 days.
func saneAge(ageS float64) bool { return !math.IsNaN(ageS) && ageS >= 0 && ageS <= 30*24*3600 }

// Sync is what a relay does every pull interval: pull each peer's own
// measurements ("local": N-1 pairs from each of N-1 peers), then, only if
// some peers could not be reached from here, read theirs from one peer that
// could (rotating), as that peer knows them ("fleet"), with their
// coordinates. Measurements thus reach every relay even where two relays
// have no path between them, and a fleet whose relays all reach each other
// never moves the whole matrix.
func (f *Fleet) Sync(ctx context.Context) error {
	if f.pullOnly != nil {
		return f.syncSparse(ctx)
	}
	err := f.Pull(ctx, "local")
	file := f.File()
	f.mu.Lock()
	var missing []string
	var via []fleet.Relay
	for _, r := range file.Relays {
		if r.Name == f.self || r.Admin == "" {
			continue
		}
		if p, ok := f.pulled[r.Name]; ok && p.err == nil && !p.at.IsZero() {
			via = append(via, r)
		} else {
			missing = append(missing, r.Name)
		}
	}
	var from fleet.Relay
	if len(via) > 0 {
		from = via[f.rotate%len(via)]
		f.rotate++
	}
	f.mu.Unlock()
	if len(missing) == 0 || len(via) == 0 {
		return err
	}
	pairs, coords, rerr := f.fetch(ctx, from, file.AdminToken, "fleet")
	if rerr != nil {
		return errors.Join(err, fmt.Errorf("%s (%s), relaying: %w", from.Name, from.Admin, rerr))
	}
	byFrom := map[string][]Pair{}
	for _, p := range pairs {
		if slices.Contains(missing, p.From) {
			byFrom[p.From] = append(byFrom[p.From], p)
		}
	}
	f.mu.Lock()
	for name, ps := range byFrom {
		f.relayed[name] = ps
	}
	for _, c := range coords {
		if slices.Contains(missing, c.Relay) {
			f.relayedCoords[c.Relay] = c
		}
	}
	f.mu.Unlock()
	return err
}

// syncSparse is Sync with Options.PullOnly: the own measurements of the
// relays it names (and with them their coordinates, fresh), and every
// CoordinatesEvery, or coord.FleetViewEvery for a fleet of more than 100
// relays, every relay's coordinate from one peer (scope=coordinates,
// rotating through the peers; one that fails is passed over until the next
// time). A relay's cost no longer grows with the fleet but for those
// coordinates: ~350 bytes a minute for each relay of a fleet of up to 100,
// ~35 KB a minute from 100 to 1,000 relays.
func (f *Fleet) syncSparse(ctx context.Context) error {
	only := f.pullOnly()
	if only == nil {
		only = []string{} // none yet: pull nobody's pairs
	}
	err := f.pull(ctx, "local", only)
	file := f.File()
	f.mu.Lock()
	due := f.coordsAt.IsZero() || time.Since(f.coordsAt) >= max(CoordinatesEvery, coord.FleetViewEvery(len(file.Relays)))
	f.mu.Unlock()
	if !due {
		return err
	}
	var peers []fleet.Relay
	for _, r := range file.Relays {
		if r.Name != f.self && r.Admin != "" {
			peers = append(peers, r)
		}
	}
	if len(peers) == 0 {
		return err
	}
	f.mu.Lock()
	from := peers[f.coordsNext%len(peers)]
	f.coordsNext++
	f.mu.Unlock()
	_, coords, cerr := f.fetch(ctx, from, file.AdminToken, "coordinates")
	if cerr != nil {
		return errors.Join(err, fmt.Errorf("%s (%s), the fleet's coordinates: %w", from.Name, from.Admin, cerr))
	}
	f.mu.Lock()
	f.coordsAt = time.Now()
	for _, c := range coords {
		if c.Relay != f.self {
			f.relayedCoords[c.Relay] = c
		}
	}
	f.mu.Unlock()
	return err
}

// Run re-reads the file when it changes (checked every 2 s) and pulls the
// peers' measurements (Sync) every pull interval, until ctx ends. Events
// hear the outcome of every re-read (OnFile) and every pull (OnPull).
func (f *Fleet) Run(ctx context.Context) {
	reload := time.NewTicker(2 * time.Second)
	defer reload.Stop()
	pullT := time.NewTicker(f.pullEvery)
	defer pullT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload.C:
			f.reread()
		case <-pullT.C:
			err := f.Sync(ctx)
			if ctx.Err() == nil {
				f.onPull(err)
			}
		}
	}
}

// Refresh re-reads the file if it changed and pulls the relays'
// measurements once: a relay as Run does every pull interval (Sync), a
// reader such as relayctl what every relay knows (Pull "fleet"), so that one
// relay answering gives it the whole matrix. Events hear both outcomes, as
// in Run. It fails only when relays were asked and none answered: relays
// pull each other's measurements, so the others' errors matter only then.
func (f *Fleet) Refresh(ctx context.Context) error {
	f.reread()
	var err error
	if f.self == "" {
		err = f.Pull(ctx, "fleet")
	} else {
		err = f.Sync(ctx)
	}
	if ctx.Err() == nil {
		f.onPull(err)
	}
	if err == nil {
		return nil
	}
	relays, _ := f.Relays(ctx)
	if !slices.ContainsFunc(relays, func(r Relay) bool { return r.Health == "admin" }) {
		return fmt.Errorf("no relay's admin API answered: %w", err)
	}
	return nil
}

// Close releases nothing: a fleet file's relays serve their own
// measurements, so there is nothing to take back.
func (f *Fleet) Close(context.Context) error { return nil }

// reread re-reads the file if it changed and tells Events.OnFile: nil when
// the new file is used whole, its skipped entries, or why it was refused.
func (f *Fleet) reread() {
	switch changed, err := f.Reload(); {
	case err != nil:
		f.onFile(fmt.Errorf("fleet file %s: %w (keeping the last good one)", f.path, err))
	case changed:
		f.onFile(f.File().Problems())
	}
}

func (f *Fleet) onPull(err error) {
	if f.events.OnPull != nil {
		f.events.OnPull(err)
	}
}

func (f *Fleet) onFile(err error) {
	if f.events.OnFile != nil {
		f.events.OnFile(err)
	}
}
