package registry

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/coord"
)

// relayctl pulls scope=fleet from every relay. A relay used to be believed
// about every other relay, the newest figure winning: a compromised one
// passed on, freshly dated, 1 ms pairs and coordinates of its own making
// for relays that answered relayctl themselves. It now speaks for its
// own pairs and coordinate only; what it passes on of others counts only
// for relays that did not answer, where the highest RTT any carrier
// passes on wins, and a coordinate only where the carriers agree.
func TestFleetReaderBelievesARelayForItselfOnly(t *testing.T) {
	now := time.Now()
	pair := func(from, to string, ms float64, age time.Duration) Pair {
		return Pair{From: from, To: to, RTTMs: ms, Samples: 5, UpdatedAt: now.Add(-age)}
	}
	coordOf := func(relay string, x float64, age time.Duration) Coordinate {
		return Coordinate{Relay: relay, Coord: vec(x), UpdatedAt: now.Add(-age)}
	}
	// c answers: its own pair to b and its coordinate. d does not answer
	// relayctl: b and c pass on its pair to e and its coordinate.
	cAnswer := Serve("c", "", []Pair{pair("c", "b", 40, 10*time.Second), pair("d", "e", 50, 20*time.Second)}, now)
	cAnswer.Coordinates = ServeCoordinates([]Coordinate{coordOf("c", 0.04, 10*time.Second), coordOf("d", 0.05, 20*time.Second)}, now)
	// The liar b: its own pair to c (its word: it measured it), and,
	// newer than anyone's, c's pair to b (c's word, not b's), c's pair to
	// e, c's coordinate, a 1 ms d-e and another coordinate for d.
	bAnswer := Serve("b", "", []Pair{
		pair("b", "c", 41, time.Second), pair("c", "b", 1, 0),
		pair("c", "e", 1, 0), pair("d", "e", 1, 0),
	}, now)
	bAnswer.Coordinates = ServeCoordinates([]Coordinate{coordOf("b", 0.01, 0), coordOf("c", 0.001, 0), coordOf("d", 0.001, 0)}, now)
	b, c := fakeRelayAdmin(t, "tok", bAnswer), fakeRelayAdmin(t, "tok", cAnswer)
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, `admin_token: tok
relays:
  - {name: b, admin: `+strings.TrimPrefix(b.URL, "http://")+`}
  - {name: c, admin: `+strings.TrimPrefix(c.URL, "http://")+`}
  - {name: d, admin: 127.0.0.1:1}
  - {name: e, admin: 127.0.0.1:1}
`)
	reg, err := Open(Options{Fleet: path, Admin: adminapi.NewClient(3*time.Second, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := reg.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	pairs, _ := reg.Pairs(ctx)
	got := map[[2]string]float64{}
	for _, p := range pairs {
		got[[2]string{p.From, p.To}] = p.RTTMs
	}
	want := map[[2]string]float64{
		{"b", "c"}: 41, // b's own
		{"c", "b"}: 40, // c's own, not b's newer 1 ms for it
		{"d", "e"}: 50, // hearsay of relays that did not answer: the highest
	}
	if len(got) != len(want) {
		t.Errorf("pairs %v, want %v (not b's c-e, made up for c, which answered)", got, want)
	}
	for k, ms := range want {
		if got[k] != ms {
			t.Errorf("%s -> %s: %v ms, want %v", k[0], k[1], got[k], ms)
		}
	}
	cs, _ := reg.(Coordinates).Coordinates(ctx)
	byRelay := coordsByRelay(cs)
	if len(cs) != 2 || byRelay["b"].Coord.Vec[0] != 0.01 || byRelay["c"].Coord.Vec[0] != 0.04 {
		t.Errorf("coordinates %+v, want b's and c's own, and none for d (its carriers disagree)", cs)
	}
}

// A relay that publishes its coordinate with Error 0 asks for the whole
// weight of its readers' Vivaldi updates; a fleet pull believes its error
// no lower than coord.MinPeerError.
func TestFleetPullClampsACoordinatesError(t *testing.T) {
	now := time.Now()
	m := Serve("b", "", nil, now)
	zero := vec(0.01)
	zero.Error = 0
	m.Coordinates = ServeCoordinates([]Coordinate{{Relay: "b", Coord: zero, UpdatedAt: now}}, now)
	b := fakeRelayAdmin(t, "tok", m)
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "admin_token: tok\nrelays:\n  - {name: b, admin: "+strings.TrimPrefix(b.URL, "http://")+"}\n")
	reg, err := Open(Options{Fleet: path, Admin: adminapi.NewClient(3*time.Second, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	cs, _ := reg.(Coordinates).Coordinates(context.Background())
	if len(cs) != 1 || cs[0].Coord.Error != coord.MinPeerError {
		t.Fatalf("coordinates %+v, want b's with its error raised to %g", cs, coord.MinPeerError)
	}
}
