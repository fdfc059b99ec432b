// Package registry is how relays and relayctl learn the fleet (which relays
// exist, where, whether healthy) and the RTTs the relays measured between
// each other. One interface, two backends: a fleet file (the embedded
// default, no other service) and Consul.
package registry

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

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
	// Health says where Healthy comes from: "admin" (its admin API
	// answered), "probes" (a peer's probes reach it), "consul" (its Consul
	// health check), or "unknown" (nothing reached it; Healthy is false).
	Health string `json:"health"`
}

// Pair is one relay's measurement of the RTT to another, summarised over
// its probe window. RTTMs is the median.
type Pair struct {
	From      string    `json:"from"`
	To        string    `json:"to"`
	RTTMs     float64   `json:"rtt_ms"`
	MinMs     float64   `json:"min_ms"`
	P90Ms     float64   `json:"p90_ms"`
	JitterMs  float64   `json:"jitter_ms"`
	Loss      float64   `json:"loss"`
	Samples   int       `json:"samples"`
	LastError string    `json:"last_error,omitempty"` // why the newest probe got no answer
	Estimated bool      `json:"estimated"`            // a prior (Consul coordinates), not probed
	UpdatedAt time.Time `json:"updated_at"`
}

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

// Registry is the contract both backends keep.
type Registry interface {
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

// newestPairs keeps the newest Pair per (from, to) as sets are added.
type newestPairs map[[2]string]Pair

func (n newestPairs) add(ps []Pair) {
	for _, p := range ps {
		k := [2]string{p.From, p.To}
		if old, ok := n[k]; !ok || p.UpdatedAt.After(old.UpdatedAt) {
			n[k] = p
		}
	}
}

// sorted returns the pairs ordered by (from, to).
func (n newestPairs) sorted() []Pair {
	out := make([]Pair, 0, len(n))
	for _, p := range n {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pair) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To))
	})
	return out
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
