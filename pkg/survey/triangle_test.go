package survey

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/planner"
)

// fixedRegistry is a registry that only lists.
type fixedRegistry struct {
	relays []registry.Relay
	pairs  []registry.Pair
}

func (f fixedRegistry) Relays(context.Context) ([]registry.Relay, error) { return f.relays, nil }
func (f fixedRegistry) Pairs(context.Context) ([]registry.Pair, error)   { return f.pairs, nil }
func (f fixedRegistry) Publish(context.Context, string, []registry.Pair) error {
	return nil
}
func (f fixedRegistry) Watch(context.Context) <-chan struct{} { return nil }

// claimingAdmin is a relay's admin API that answers /v1/info and a
// /v1/probe claiming rttMs to any target.
func claimingAdmin(t *testing.T, rttMs float64) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/info":
			_, _ = w.Write([]byte(`{"limits":{"window_bytes_approx":160000,"tcp_wmem_max_bytes":4194304,"congestion_control":"cubic"},"capacity_bps":1e8,"congestion_control":"bbr","max_stripes":4}`))
		case "/v1/probe":
			_ = json.NewEncoder(w).Encode(map[string]any{"summary": probe.Summary{Samples: 3, MedianMs: rttMs, MinMs: rttMs}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// A relay answering /v1/probe with 1 ms to a destination this host and two
// other relays see 190-200 ms away (and the liar 5-10 ms from them) is not
// believed: its segment is dropped (not rounded to the witnesses' floor,
// the best lie the check would still believe), with a note. The honest
// relays' claims pass.
func TestSurveyDoubtsDestinationClaim(t *testing.T) {
	now := time.Now()
	liar, a, c := claimingAdmin(t, 1), claimingAdmin(t, 190), claimingAdmin(t, 190)
	reg := fixedRegistry{
		relays: []registry.Relay{
			{Name: "liar", Admin: liar, Relay: "x:1", Healthy: true},
			{Name: "a", Admin: a, Relay: "x:2", Healthy: true},
			{Name: "c", Admin: c, Relay: "x:3", Healthy: true},
		},
		pairs: []registry.Pair{
			{From: "a", To: "liar", RTTMs: 5, Samples: 5, UpdatedAt: now},
			{From: "c", To: "liar", RTTMs: 5, Samples: 5, UpdatedAt: now},
		},
	}
	here := map[string]time.Duration{liar: 10 * time.Millisecond, a: 10 * time.Millisecond, c: 10 * time.Millisecond,
		"dst.example:443": 200 * time.Millisecond}
	sv := Survey{Reg: reg, ClientWindowBytes: 160000, Count: 1,
		Measure: func(_ context.Context, addr string) (time.Duration, error) { return here[addr], nil }}
	res, err := sv.Run(context.Background(), "dst.example:443")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Matrix.Pairs {
		if p.B != "dst.example:443" {
			continue
		}
		switch p.A {
		case "liar":
			t.Errorf("liar -> dst: %+v, want the claim dropped", p)
		case "a", "c":
			if p.Estimated || p.RTTMs != 190 {
				t.Errorf("%s -> dst: %+v, want its 190 ms", p.A, p)
			}
		}
	}
	// Floors: here 200/2-10, a and c 190/2-5: median 90.
	if !strings.Contains(strings.Join(res.Notes, "\n"), "liar -> dst.example:443: liar claims 1.00 ms, but what a, c, client measured allows no less than 90.00 ms (a detour more than 2x shorter than their own path); claim dropped") {
		t.Errorf("notes %q", res.Notes)
	}
	// Each relay's windows come from its /v1/info: the receive window it
	// reports, the send window from its tcp_wmem max; and its declared
	// capacity caps its segments; it sends with the congestion control
	// of its relay links, not the system default; it takes striped
	// segments of as many links as it says.
	for _, n := range res.Matrix.Nodes {
		if n.Relay && (n.WindowBytes != 160000 || n.SendWindowBytes != hostnet.SendWindowOfWmem(4194304) || n.LimitBps != 1e8 || n.CongestionControl != "bbr" || n.MaxStripes != 4) {
			t.Errorf("relay node %+v: want window 160000, send window %d, limit 1e8 bit/s, bbr, 4 stripes", n, hostnet.SendWindowOfWmem(4194304))
		}
	}
}

// One malformed registry entry (a relay name with a space) used to make
// planner.Search refuse the whole matrix, every plan with it; the survey
// now leaves it out with a note, and plans go on over the others.
func TestSurveyLeavesOutAMalformedRelay(t *testing.T) {
	a, bad := claimingAdmin(t, 100), claimingAdmin(t, 100)
	reg := fixedRegistry{relays: []registry.Relay{
		{Name: "a", Admin: a, Relay: "x:1", Healthy: true},
		{Name: "bad name", Admin: bad, Relay: "x:2", Healthy: true},
	}}
	here := map[string]time.Duration{a: 100 * time.Millisecond, bad: 100 * time.Millisecond, "dst.example:443": 200 * time.Millisecond}
	sv := Survey{Reg: reg, ClientWindowBytes: 160000, Count: 1,
		Measure: func(_ context.Context, addr string) (time.Duration, error) { return here[addr], nil }}
	res, err := sv.Run(context.Background(), "dst.example:443")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Relays["bad name"]; ok {
		t.Error("the malformed relay is still among the survey's relays")
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), `node "bad name" left out: name contains space`) {
		t.Errorf("notes %q", res.Notes)
	}
	r, err := planner.Search(res.Matrix, planner.Request{Client: ClientNode, Destination: res.Target.Name})
	if err != nil {
		t.Fatalf("Search over the survey: %v", err)
	}
	if !slices.Equal(r.Best.Chain, []string{"a"}) {
		t.Errorf("best %v, want a", r.Best.Chain)
	}
}
