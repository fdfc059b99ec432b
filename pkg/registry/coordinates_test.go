package registry

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

// vec is a coordinate at the given vector (seconds), height 0.1 ms.
func vec(v ...float64) *coordinate.Coordinate {
	return &coordinate.Coordinate{Vec: v, Error: 0.5, Height: 1e-4}
}

// scopedRelayAdmin serves /v1/measurements with a different answer per
// scope, as relayd does: its own ("local") or everything it knows
// ("fleet").
func scopedRelayAdmin(t *testing.T, token string, byScope map[string]Measurements) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, ok := byScope[r.URL.Query().Get("scope")]
		if r.Header.Get("Authorization") != "Bearer "+token || r.URL.Path != "/v1/measurements" || !ok {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(m)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// coordsByRelay indexes coordinates by relay.
func coordsByRelay(cs []Coordinate) map[string]Coordinate {
	out := map[string]Coordinate{}
	for _, c := range cs {
		out[c.Relay] = c
	}
	return out
}

// checkAge fails unless c is about want old on this clock.
func checkAge(t *testing.T, c Coordinate, want time.Duration) {
	t.Helper()
	if age := c.Age(time.Now()); age < want-time.Second || age > want+2*time.Second {
		t.Errorf("%s's coordinate is %v old, want ~%v", c.Relay, age, want)
	}
}

// Coordinates travel through /v1/measurements as pairs do: a relay's own
// in scope=local, every one it knows in scope=fleet, as ages rebased on the
// reader's clock; a relay that claims another's coordinate in its own
// scope, an impossible coordinate and an age in the future are dropped.
// A relay keeps the newest per relay, and reads the coordinates of peers it
// cannot reach from one that can; relayctl (Refresh) gets every one.
func TestFleetCoordinatesRoundTrip(t *testing.T) {
	now := time.Now()
	// b's clock is an hour off: only ages cross.
	bNow := now.Add(time.Hour)
	bOwn := Coordinate{Relay: "b", Coord: vec(0.01, 0.02), UpdatedAt: bNow.Add(-3 * time.Second), MeasuredForS: 30}
	cAsBKnows := Coordinate{Relay: "c", Coord: vec(0.03, 0), UpdatedAt: bNow.Add(-7 * time.Second)}
	local := Serve("b", "osaka", nil, bNow)
	local.Coordinates = ServeCoordinates([]Coordinate{bOwn, cAsBKnows}, bNow)
	fleet := Serve("b", "osaka", nil, bNow)
	fleet.Coordinates = ServeCoordinates([]Coordinate{
		bOwn, cAsBKnows,
		{Relay: "d", Coord: &coordinate.Coordinate{Vec: []float64{0.01}, Height: -1}, UpdatedAt: bNow},
		{Relay: "e", Coord: vec(0.01), UpdatedAt: bNow.Add(time.Minute)},
		{Relay: "f", Coord: vec(1e6), UpdatedAt: bNow},
	}, bNow)
	// ServeCoordinates leaves out what it must not serve; the rest goes
	// to the wire, and the reader checks again.
	if len(fleet.Coordinates) != 3 {
		t.Fatalf("served %+v, want b's, c's and e's (d's and f's are impossible)", fleet.Coordinates)
	}
	fleet.Coordinates = append(fleet.Coordinates, ServedCoordinate{Coordinate: Coordinate{Relay: "g", Coord: vec(1e6)}, AgeS: 1})
	b := scopedRelayAdmin(t, "tok", map[string]Measurements{"local": local, "fleet": fleet})
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, `admin_token: tok
relays:
  - {name: a, admin: 127.0.0.1:1}
  - {name: b, admin: `+strings.TrimPrefix(b.URL, "http://")+`}
  - {name: c, admin: 127.0.0.1:1}
`)
	f, err := openFleet(path, "a", adminapi.NewClient(3*time.Second, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mine := vec(0, 0.005)
	if err := f.PublishCoordinate(ctx, "a", mine); err != nil {
		t.Fatal(err)
	}
	mine.Vec[0] = 1 // the registry keeps its own copy
	if err := f.PublishCoordinate(ctx, "b", vec(0)); err == nil {
		t.Fatal("a published b's coordinate")
	}
	if err := f.PublishCoordinate(ctx, "a", &coordinate.Coordinate{Vec: []float64{math.Inf(1)}}); err == nil {
		t.Fatal("an infinite coordinate was published")
	}

	// A pull of every peer's own: b's coordinate, not the one b claims
	// for c.
	_ = f.Pull(ctx, "local")
	cs, _ := f.Coordinates(ctx)
	if len(cs) != 2 || cs[0].Relay != "a" || cs[1].Relay != "b" {
		t.Fatalf("after a local pull: %+v, want a's and b's", cs)
	}
	if cs[0].Coord.Vec[0] != 0 || cs[0].Coord.Vec[1] != 0.005 {
		t.Fatalf("a's own coordinate %+v, want as published", cs[0].Coord)
	}
	checkAge(t, cs[0], 0)
	checkAge(t, cs[1], 3*time.Second)
	// b had measured its coordinate 30 s when it published it, 3 s ago;
	// a's, since its registry started: even its first publication says
	// so (young), not 0 (not said).
	if got := cs[1].MeasuredFor(time.Now()); got < 33*time.Second || got > 35*time.Second {
		t.Errorf("b's coordinate measured for %v, want 33 s (30 s when published, 3 s ago)", got)
	}
	first := cs[0].MeasuredForS
	if first <= 0 || first > 5 {
		t.Errorf("a's first coordinate measured for %v s: want since its registry started, a moment ago", first)
	}
	time.Sleep(20 * time.Millisecond)
	if err := f.PublishCoordinate(ctx, "a", vec(0, 0.005)); err != nil {
		t.Fatal(err)
	}
	if cs, _ := f.Coordinates(ctx); cs[0].MeasuredForS < first+0.02 || cs[0].MeasuredForS > 5 {
		t.Errorf("a's second coordinate measured for %v s, want 20 ms more than its first's %v s", cs[0].MeasuredForS, first)
	}
	if got := cs[1].Coord.Vec; len(got) != 2 || got[0] != 0.01 || got[1] != 0.02 {
		t.Fatalf("b's coordinate %v after the round trip, want [0.01 0.02]", got)
	}
	cs[1].Coord.Vec[0] = 9 // a copy: the registry's stays
	if cs, _ := f.Coordinates(ctx); cs[1].Coord.Vec[0] != 0.01 {
		t.Fatal("Coordinates handed out the registry's own coordinate")
	}

	// c does not answer a: a reads c's coordinate from b ("fleet").
	_ = f.Sync(ctx)
	got := coordsByRelay(func() []Coordinate { cs, _ := f.Coordinates(ctx); return cs }())
	if len(got) != 3 {
		t.Fatalf("after a sync: %+v, want a's, b's and c's (relayed by b)", got)
	}
	checkAge(t, got["c"], 7*time.Second)

	// relayctl: one read of "fleet" from every relay that answers.
	reader, err := Open(Options{Fleet: path, Admin: adminapi.NewClient(3*time.Second, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	rc, ok := reader.(Coordinates)
	if !ok {
		t.Fatal("the fleet backend does not carry coordinates")
	}
	cs, _ = rc.Coordinates(ctx)
	if len(cs) != 2 || cs[0].Relay != "b" || cs[1].Relay != "c" {
		t.Fatalf("relayctl's coordinates %+v, want b's and c's: not d's (negative height), e's (from the future), g's (impossible)", cs)
	}
	checkAge(t, cs[0], 3*time.Second)
	checkAge(t, cs[1], 7*time.Second)
}

// The newest coordinate per relay wins, whoever carried it.
func TestNewestCoords(t *testing.T) {
	at := time.Unix(1000, 0)
	n := newestCoords{}
	n.add(Coordinate{Relay: "b", Coord: vec(1), UpdatedAt: at})
	n.add(Coordinate{Relay: "b", Coord: vec(2), UpdatedAt: at.Add(time.Second)}, Coordinate{Relay: "a", Coord: vec(3), UpdatedAt: at})
	n.add(Coordinate{Relay: "b", Coord: vec(4), UpdatedAt: at.Add(-time.Second)}, Coordinate{Relay: "", Coord: vec(5)}, Coordinate{Relay: "c"})
	cs := n.sorted()
	if len(cs) != 2 || cs[0].Relay != "a" || cs[1].Relay != "b" || cs[1].Coord.Vec[0] != 2 {
		t.Fatalf("%+v, want a's and b's newest", cs)
	}
}

// A relay with PullOnly (probe mode coordinates, not routing by plan)
// pulls the own measurements of only the peers it names, and the fleet's
// coordinates from one peer at most every CoordinatesEvery, rotating.
func TestFleetSparsePulls(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	asked := map[string][]string{} // relay → scopes asked, in order
	serve := func(name string) *httptest.Server {
		local := Serve(name, "r-"+name, []Pair{{From: name, To: "a", RTTMs: 5, Samples: 3, UpdatedAt: now}}, now)
		local.Coordinates = ServeCoordinates([]Coordinate{{Relay: name, Coord: vec(0.01), UpdatedAt: now}}, now)
		coords := Serve(name, "r-"+name, nil, now)
		coords.Coordinates = ServeCoordinates([]Coordinate{
			{Relay: "b", Coord: vec(0.02), UpdatedAt: now},
			{Relay: "c", Coord: vec(0.03), UpdatedAt: now},
			{Relay: "d", Coord: vec(0.04), UpdatedAt: now},
		}, now)
		srv := scopedRelayAdmin(t, "tok", map[string]Measurements{"local": local, "coordinates": coords})
		inner := srv.Config.Handler
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked[name] = append(asked[name], r.URL.Query().Get("scope"))
			mu.Unlock()
			inner.ServeHTTP(w, r)
		})
		return srv
	}
	b, c, d := serve("b"), serve("c"), serve("d")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, `admin_token: tok
relays:
  - {name: a, admin: 127.0.0.1:1}
  - {name: b, admin: `+strings.TrimPrefix(b.URL, "http://")+`}
  - {name: c, admin: `+strings.TrimPrefix(c.URL, "http://")+`}
  - {name: d, admin: `+strings.TrimPrefix(d.URL, "http://")+`}
`)
	reg, err := Open(Options{Fleet: path, Self: &SelfRegistration{Name: "a"}, Admin: adminapi.NewClient(3*time.Second, nil),
		PullOnly: func() []string { return []string{"c"} }})
	if err != nil {
		t.Fatal(err)
	}
	f := reg.(*Fleet)
	ctx := context.Background()
	for range 2 {
		if err := f.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	got := map[string][]string{"b": asked["b"], "c": asked["c"], "d": asked["d"]}
	mu.Unlock()
	// Two syncs: c's own measurements each time; the coordinates once,
	// from the first peer in the rotation.
	want := map[string][]string{"b": {"coordinates"}, "c": {"local", "local"}, "d": nil}
	for name := range want {
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("%s was asked for scopes %q, want %q", name, got[name], want[name])
		}
	}
	pairs, _ := f.Pairs(ctx)
	if len(pairs) != 1 || pairs[0].From != "c" {
		t.Errorf("pairs %+v, want c's only", pairs)
	}
	cs, _ := f.Coordinates(ctx)
	if byRelay := coordsByRelay(cs); len(byRelay) != 3 || byRelay["d"].Coord == nil {
		t.Errorf("coordinates %+v, want b's, c's and d's", cs)
	}
	// Due again: the next peer in the rotation answers.
	f.mu.Lock()
	f.coordsAt = time.Now().Add(-CoordinatesEvery)
	f.mu.Unlock()
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(asked["c"], []string{"local", "local", "local", "coordinates"}) {
		t.Errorf("c was asked for %q: want its own three times, then the coordinates", asked["c"])
	}
}

// Pairs no relay measured are estimated from the relays' coordinates,
// marked so and as old as the older coordinate; measured pairs stay as
// they are.
func TestWithEstimates(t *testing.T) {
	now := time.Now()
	coords := []Coordinate{
		{Relay: "a", Coord: vec(0, 0), UpdatedAt: now.Add(-time.Second)},
		{Relay: "b", Coord: vec(0.03, 0), UpdatedAt: now.Add(-5 * time.Second)},
		{Relay: "c", Coord: &coordinate.Coordinate{Vec: []float64{math.NaN(), 0}}, UpdatedAt: now},
	}
	measured := []Pair{{From: "a", To: "b", RTTMs: 31, Samples: 5, UpdatedAt: now}}
	got, ok := WithEstimates(measured, coords)
	if !ok || len(got) != 2 {
		t.Fatalf("pairs %+v (ok %v): want a -> b measured and b -> a estimated (c's coordinate is invalid)", got, ok)
	}
	if got[0] != measured[0] {
		t.Errorf("the measured pair changed: %+v", got[0])
	}
	e := got[1]
	if e.From != "b" || e.To != "a" || !e.Estimated || math.Abs(e.RTTMs-30.2) > 0.01 || !e.UpdatedAt.Equal(now.Add(-5*time.Second)) {
		t.Errorf("estimate %+v: want b -> a, 30.2 ms (30 apart, heights 0.1 each), as old as b's coordinate", e)
	}
	many := make([]Coordinate, MaxEstimatedRelays+1)
	if _, ok := WithEstimates(nil, many); ok {
		t.Error("estimated the pairs of a fleet over the bound")
	}
}
