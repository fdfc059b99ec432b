// Package registry is how relays and relayctl learn the fleet (which relays
// exist, where, whether healthy) and the RTTs the relays measured between
// each other. One interface, two backends: a fleet file (the embedded
// default, no other service) and Consul.
//
// The lifecycle is the same on both: Open picks the backend from Options
// and reads what needs no network; then either Run keeps the registry
// current until its context ends (a relay, for its whole life) or Refresh
// updates it once (a one-shot reader such as relayctl); Close, after Run
// has returned, takes a relay out of the registry. What only one backend
// has is reached through Options.Events and the optional interfaces
// FileBacked and Staleness, not through the backends' types.
package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/probe"
)

// Relay is one relay as the registry knows it.
type Relay struct {
	Name    string `json:"name"`
	Region  string `json:"region,omitempty"`
	SOCKS   string `json:"socks,omitempty"`
	HTTP    string `json:"http,omitempty"`
	Admin   string `json:"admin,omitempty"`
	Relay   string `json:"relay,omitempty"` // native relay listener ("": none)
	Healthy bool   `json:"healthy"`
	// Health says where Healthy comes from: "self" (the reader is this
	// relay), "admin" (its admin API answered), "probes" (a peer's probes
	// reach it), "consul" (its Consul health check), or "unknown" (nothing
	// reached it; Healthy is false).
	Health string `json:"health"`
}

// Pair is one relay's measurement of the RTT to another, summarised over
// its probe window. RTTMs is the median.
type Pair struct {
	From     string  `json:"from"`
	To       string  `json:"to"`
	RTTMs    float64 `json:"rtt_ms"`
	MinMs    float64 `json:"min_ms"`
	P90Ms    float64 `json:"p90_ms"`
	JitterMs float64 `json:"jitter_ms"`
	Loss     float64 `json:"loss"`
	// LossLearnt says Loss is the share of what From's tunnels sent To
	// that went again (TCP retransmissions, learnt from traffic in the
	// last 10 minutes), not the probes' unanswered share, which random
	// loss below a few per cent barely moves.
	LossLearnt bool   `json:"loss_learnt,omitempty"`
	Samples    int    `json:"samples"`
	LastError  string `json:"last_error,omitempty"` // why the newest probe got no answer
	Estimated  bool   `json:"estimated"`            // a prior (Consul coordinates), not probed
	// SendBps is the best rate From's tunnels to To sustained while the
	// path held them back, bits/s, learnt from traffic in the last 10
	// minutes, or else the capacity From's probe measured in the last
	// hour (SendSource); 0 = none learnt.
	SendBps float64 `json:"send_bps,omitempty"`
	// SendAt is when the newest tunnel that taught SendBps ended (or
	// when the probe measured it).
	SendAt time.Time `json:"send_at,omitzero"`
	// SendSource says what taught SendBps: "" its tunnels, SendFromProbe
	// a capacity probe (trains of datagrams: the bottleneck's capacity,
	// used only where no tunnel taught a rate).
	SendSource string    `json:"send_source,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// SendFromProbe is Pair.SendSource for a rate a capacity probe measured
// (relay/capacityprobe.go, pkg/packettrain).
const SendFromProbe = "probe"

// Answering says whether To's service answered From's newest probe (a
// refused connect measures the path but means the relay is down).
func (p Pair) Answering() bool { return p.Samples > 0 && p.Loss < 1 && p.LastError == "" }

// Age is how old the measurement is at now.
func (p Pair) Age(now time.Time) time.Duration { return now.Sub(p.UpdatedAt) }

// PairsFrom turns a prober's snapshot into pairs measured by from. Peers
// never answered are kept, with loss 1 and no RTT: the planner must see
// that a pair is unreachable, not miss it.
func PairsFrom(from string, snap map[string]probe.Summary) []Pair {
	out := make([]Pair, 0, len(snap))
	for to, s := range snap {
		if s.Samples == 0 {
			continue
		}
		out = append(out, Pair{
			From: from, To: to, RTTMs: s.MedianMs, MinMs: s.MinMs, P90Ms: s.P90Ms, JitterMs: s.JitterMs,
			Loss: s.Loss, Samples: s.Samples, LastError: s.LastErr, UpdatedAt: s.LastAt,
		})
	}
	return out
}

// Store is what every backend answers: the fleet and its measurements.
// Relays and Pairs answer from what was last read, without waiting on the
// network, so they keep answering (with the last known data) while the
// source is down. Its methods are safe for concurrent use.
type Store interface {
	// Relays lists the fleet.
	Relays(ctx context.Context) ([]Relay, error)
	// Pairs returns the RTT measurements known, newest per (from, to).
	Pairs(ctx context.Context) ([]Pair, error)
	// Publish records the measurements relay from made (replacing its
	// earlier ones).
	Publish(ctx context.Context, from string, pairs []Pair) error
	// Watch signals (without blocking) when the fleet may have changed,
	// until ctx ends.
	Watch(ctx context.Context) <-chan struct{}
}

// MeasuredStore is a Store that can give the pairs its relays measured
// without the estimates it adds (Consul's, from its nodes' coordinates):
// a reader that uses only measurements asks for those alone.
type MeasuredStore interface {
	MeasuredPairs(ctx context.Context) ([]Pair, error)
}

// PairsLater is a Registry whose one-shot read can return before the
// measurements are in (Consul.RefreshBeforePairs): Pairs and
// MeasuredPairs wait for them.
type PairsLater interface {
	RefreshBeforePairs(ctx context.Context) error
}

// MeasuredPairs is the pairs s's relays measured: s's MeasuredPairs where
// it has one, else its Pairs less the estimated.
func MeasuredPairs(ctx context.Context, s Store) ([]Pair, error) {
	if ms, ok := s.(MeasuredStore); ok {
		return ms.MeasuredPairs(ctx)
	}
	ps, err := s.Pairs(ctx)
	return slices.DeleteFunc(ps, func(p Pair) bool { return p.Estimated }), err
}

// Registry is the contract both backends keep: a Store with its
// lifecycle. Open returns one.
type Registry interface {
	Store
	// Run keeps the registry current until ctx ends, and returns then:
	// with a fleet file it re-reads the file when it changes and pulls the
	// relays' measurements every Options.PullInterval; with Consul it
	// registers Options.Self and keeps blocking queries on the relays, the
	// measurements and the coordinates. Call it once, in its own goroutine.
	Run(ctx context.Context)
	// Refresh updates the registry once, synchronously (what a reader that
	// does not Run needs before reading). It fails when the registry could
	// not be read: Consul did not answer, or none of a fleet file's relays
	// did (the others' errors go to Options.Events, as Run's do).
	Refresh(ctx context.Context) error
	// Close releases the registry once Run has returned (or was never
	// started): with Consul and Options.Self it deregisters the relay and
	// deletes its measurements, so that peers stop using it now rather
	// than when its health check has failed. Nothing is to be used after.
	Close(ctx context.Context) error
}

// RelayReader is a registry that can read one relay's registration
// fresh, for readers whose Relays may lag (Consul.RelayOf).
type RelayReader interface {
	RelayOf(ctx context.Context, name string) (r Relay, ok bool, err error)
}

// FileBacked is implemented by backends read from a file (the fleet file).
type FileBacked interface {
	// Reload re-reads the file now if it changed (Run checks every 2 s).
	// On an error the last good file stays in use.
	Reload() (changed bool, err error)
	// Problems lists the entries of the file in use that were left out,
	// each naming its entry; nil when the file is used whole.
	Problems() []error
}

// Staleness is implemented by registries that can lose touch with their
// source (Consul): stale is true while it cannot be reached, and since is
// when it last answered (when the registry was opened if it never did).
type Staleness interface {
	Stale() (stale bool, since time.Time)
}

// Events hear what a backend does in the background (in Run, or in
// Refresh); a nil field is not called. Only the fleet file has these:
// Consul reports its outages and recoveries to ConsulOptions.Log.
type Events struct {
	// OnPull hears the outcome of every pull of the relays' measurements:
	// nil when every relay answered, else the relays that did not, each
	// named, joined.
	OnPull func(error)
	// OnFile hears every re-read of a changed file: nil when the new file
	// is used whole, the skipped entries (joined, each naming its entry)
	// when it is used without them, or why it was refused and the last good
	// one kept.
	OnFile func(error)
}

// DefaultPullInterval is how often Run pulls the relays' measurements from
// a fleet file's relays when Options.PullInterval is not set.
const DefaultPullInterval = 5 * time.Second

// Options choose a backend, by setting exactly one of Fleet and
// Consul.Addr, and configure it.
type Options struct {
	// Fleet is the path of a fleet file: the fleet-file backend.
	Fleet string
	// Consul configures the Consul backend; a non-empty Addr chooses it.
	// Its Self must be nil: the relay is described in Self below.
	Consul ConsulOptions
	// Self is the relay using the registry; nil for a reader such as
	// relayctl. With a fleet file only its Name counts (the file must list
	// it, and Publish takes only its measurements); with Consul, Run
	// registers it and Close deregisters it.
	Self *SelfRegistration
	// Admin reaches the relays' admin APIs, where a fleet file's
	// measurements are pulled from (a 3 s timeout suits the pulls).
	// Required with Fleet; unused with Consul.
	Admin *adminapi.Client
	// PullInterval is how often Run pulls the relays' measurements (fleet
	// file); 0 means DefaultPullInterval. With Consul the measurements are
	// watched and ConsulOptions.WatchCoalesce paces their reads instead.
	PullInterval time.Duration
	// Events hear what Run and Refresh do in the background.
	Events Events
	// PullOnly, with a fleet file, makes a relay's pulls sparse: each
	// pull interval it pulls the own measurements of only the relays
	// PullOnly names (a relay in probe mode coordinates: the peers it
	// probes), and every CoordinatesEvery the coordinates of the whole
	// fleet from one peer (rotating). Nil: every peer every interval.
	// Pairs of the peers not pulled are not known, nor is their health
	// (they read as unknown): for relays that do not route by plan.
	PullOnly func() []string
}

// CoordinatesEvery is how often a fleet-file relay with Options.PullOnly
// reads every relay's coordinate from a peer: enough for its ranking of
// the nearest peers, which it redoes at most once a minute.
const CoordinatesEvery = time.Minute

// Open returns the registry opts choose. It contacts nothing: a fleet file
// is read (so its relays are known at once), Consul is not asked until Run
// or Refresh. Errors say which option is wrong.
func Open(opts Options) (Registry, error) {
	self := ""
	if opts.Self != nil {
		if opts.Self.Name == "" {
			return nil, errors.New("registry: the relay using the registry (Self) needs a name")
		}
		self = opts.Self.Name
	}
	if opts.Consul.Self != nil {
		return nil, errors.New("registry: describe the relay in Options.Self, not Options.Consul.Self")
	}
	var chosen []backend
	for _, b := range backends {
		if b.chosenBy(opts) != "" {
			chosen = append(chosen, b)
		}
	}
	switch len(chosen) {
	case 0:
		var give []string
		for _, b := range backends {
			give = append(give, b.name+" ("+b.option+")")
		}
		return nil, fmt.Errorf("registry: none chosen: give %s", strings.Join(give, " or "))
	case 1:
		return chosen[0].open(opts, self)
	default:
		var named []string
		for _, b := range chosen {
			named = append(named, fmt.Sprintf("%s (%s)", b.label, b.chosenBy(opts)))
		}
		return nil, fmt.Errorf("registry: %s: choose one", strings.Join(named, " and "))
	}
}

// backend is one kind of registry: the option that chooses it and how it
// opens. Adding a backend is its entry in backends and its open.
type backend struct {
	name   string // in "give NAME (OPTION)"
	label  string // in "LABEL (VALUE) and ...: choose one"
	option string // the Options field that chooses it
	// chosenBy is the value of that option in opts; "": not chosen.
	chosenBy func(opts Options) string
	// open makes the registry; self names the relay using it ("": a
	// reader such as relayctl).
	open func(opts Options, self string) (Registry, error)
}

// backends are the registries, in the order errors list them.
var backends = []backend{
	{
		name: "a fleet file", label: "a fleet file", option: "Options.Fleet",
		chosenBy: func(o Options) string { return o.Fleet },
		open:     openFleetBackend,
	},
	{
		name: "a Consul address", label: "Consul", option: "Options.Consul.Addr",
		chosenBy: func(o Options) string { return o.Consul.Addr },
		open: func(opts Options, _ string) (Registry, error) {
			co := opts.Consul
			co.Self = opts.Self
			return newConsul(co)
		},
	},
}

// openFleetBackend opens the fleet file opts name, for the relay self.
func openFleetBackend(opts Options, self string) (Registry, error) {
	if opts.Consul.Token != "" {
		return nil, errors.New("registry: a Consul token without a Consul address")
	}
	if opts.Admin == nil {
		return nil, errors.New("registry: a fleet file needs an admin client (Options.Admin): its measurements are pulled from the relays' admin APIs")
	}
	f, err := openFleet(opts.Fleet, self, opts.Admin)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if opts.PullInterval > 0 {
		f.pullEvery = opts.PullInterval
	}
	f.events = opts.Events
	f.pullOnly = opts.PullOnly
	return f, nil
}

// newestPairs keeps the newest Pair per (from, to) as sets are added (of
// two as new, the first added). It holds them by From, so that sorted
// orders one relay's few dozen at a time: at 5,000 relays one map and one
// sort of every pair took over 0.1 s of a plan's registry read.
type newestPairs map[string][]Pair

func (n newestPairs) add(ps []Pair) {
	for _, p := range ps {
		n[p.From] = append(n[p.From], p)
	}
}

// sorted returns the newest of each pair, ordered by (from, to).
func (n newestPairs) sorted() []Pair {
	total := 0
	for _, ps := range n {
		total += len(ps)
	}
	out := make([]Pair, 0, total)
	for _, from := range slices.Sorted(maps.Keys(n)) {
		ps := n[from]
		slices.SortStableFunc(ps, func(a, b Pair) int {
			return cmp.Or(strings.Compare(a.To, b.To), b.UpdatedAt.Compare(a.UpdatedAt))
		})
		for i, p := range ps {
			if i == 0 || p.To != ps[i-1].To {
				out = append(out, p)
			}
		}
	}
	return out
}

// comparePairs orders pairs by (from, to).
func comparePairs(a, b Pair) int {
	return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To))
}

// watchers fans a change signal out to every Watch channel, without
// blocking: a channel holds one pending signal, so a slow reader sees "it
// changed" once, however often it did. The zero value is ready to use.
type watchers struct {
	mu    sync.Mutex
	chans []chan struct{}
}

// add returns a channel signalled on every notify until ctx ends.
func (w *watchers) add(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.chans = append(w.chans, ch)
	w.mu.Unlock()
	go func() {
		<-ctx.Done()
		w.mu.Lock()
		w.chans = slices.DeleteFunc(w.chans, func(c chan struct{}) bool { return c == ch })
		w.mu.Unlock()
	}()
	return ch
}

func (w *watchers) notify() {
	w.mu.Lock()
	chans := slices.Clone(w.chans)
	w.mu.Unlock()
	for _, ch := range chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
