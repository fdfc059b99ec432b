package survey

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/shortlist"
)

func TestReplansStartFromTheLastPlanUntilFreshEvery(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Replans{FreshEvery: 10 * time.Minute}
	if p, fresh := r.get("tokyo", t0); p != nil || !fresh.Equal(t0) {
		t.Fatalf("nothing kept yet: got %v from %v", p, fresh)
	}
	first := &shortlist.Prior{Chains: [][]string{{"a"}}}
	r.put("tokyo", first, t0, t0)
	// A replan a minute later starts from it, and its line began at t0.
	p, fresh := r.get("tokyo", t0.Add(time.Minute))
	if p != first || !fresh.Equal(t0) {
		t.Fatalf("a minute later: got %v from %v, want the first plan's from %v", p, fresh, t0)
	}
	second := &shortlist.Prior{Chains: [][]string{{"b"}}}
	r.put("tokyo", second, fresh, t0.Add(time.Minute))
	if p, _ := r.get("tokyo", t0.Add(9*time.Minute)); p != second {
		t.Fatalf("nine minutes on: got %v, want the replan's", p)
	}
	// Ten minutes after the fresh plan, whatever the replans since: afresh.
	now := t0.Add(10 * time.Minute)
	if p, fresh := r.get("tokyo", now); p != nil || !fresh.Equal(now) {
		t.Fatalf("ten minutes on: got %v from %v, want a fresh plan", p, fresh)
	}
	// A plan that learnt nothing forgets the destination.
	r.put("tokyo", nil, t0, t0.Add(2*time.Minute))
	if p, _ := r.get("tokyo", t0.Add(3*time.Minute)); p != nil {
		t.Fatalf("got %v after a plan without a prior", p)
	}
	// Negative: never.
	never := &Replans{FreshEvery: -1}
	never.put("tokyo", first, t0, t0)
	if p, _ := never.get("tokyo", t0.Add(time.Second)); p != nil {
		t.Fatalf("FreshEvery < 0 kept %v", p)
	}
	// A nil Replans is no replans.
	var none *Replans
	none.put("tokyo", first, t0, t0)
	if p, _ := none.get("tokyo", t0); p != nil {
		t.Fatal("a nil Replans kept a prior")
	}
}

func TestReplansKeepTheMostRecentDestinations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Replans{Destinations: 3}
	for i := range 5 {
		at := t0.Add(time.Duration(i) * time.Second)
		r.put(fmt.Sprintf("d%d", i), &shortlist.Prior{}, at, at)
	}
	now := t0.Add(time.Minute)
	for i := range 5 {
		p, _ := r.get(fmt.Sprintf("d%d", i), now)
		if kept := p != nil; kept != (i >= 2) {
			t.Errorf("d%d kept %v, want the 3 planned last", i, kept)
		}
	}
}

// What one process kept, the next reads back: relayctl plan and bench
// keep their plans between runs.
func TestReplansSaveAndLoad(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Replans{}
	c := coordinate.NewCoordinate(coordinate.DefaultConfig())
	c.Vec[0], c.Height, c.Error = 0.0123, 0.0004, 0.31
	prior := &shortlist.Prior{Client: c, Pairs: []shortlist.Measured{{A: "client", B: "r1", RTTMs: 12.5}}, Chains: [][]string{{"r1", "r2"}}}
	r.put("dst:tokyo", prior, t0, t0.Add(time.Minute))
	var buf bytes.Buffer
	if err := r.Save(&buf); err != nil {
		t.Fatal(err)
	}
	next := &Replans{}
	if err := next.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	got, fresh := next.get("dst:tokyo", t0.Add(2*time.Minute))
	if !reflect.DeepEqual(got, prior) || !fresh.Equal(t0) {
		t.Fatalf("loaded %+v from %v, want %+v from %v", got, fresh, prior, t0)
	}
	// Its age holds across processes: past FreshEvery, afresh.
	if p, _ := next.get("dst:tokyo", t0.Add(DefaultFreshEvery)); p != nil {
		t.Errorf("a plan kept %v ago started a replan", DefaultFreshEvery)
	}
	// Another format version is ignored; garbage is an error.
	other := &Replans{}
	if err := other.Load(strings.NewReader(`{"version": 99, "plans": {"dst:tokyo": {"prior": {}}}}`)); err != nil {
		t.Fatal(err)
	}
	if p, _ := other.get("dst:tokyo", t0); p != nil {
		t.Error("a file of another version was read")
	}
	if err := other.Load(strings.NewReader("not json")); err == nil {
		t.Error("garbage loaded without an error")
	}
}
