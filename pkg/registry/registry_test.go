package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

// Open picks the backend the options name, and refuses options that name
// none, both, or a half-described one, saying which option is wrong.
func TestOpenPicksBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "relays:\n  - {name: a}\n  - {name: b, admin: 127.0.0.1:9}\n")
	admin := adminapi.NewClient(3*time.Second, nil)

	reg, err := Open(Options{Fleet: path, Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.(*Fleet); !ok {
		t.Fatalf("Fleet set: got %T, want *Fleet", reg)
	}
	if _, ok := reg.(FileBacked); !ok {
		t.Fatal("the fleet file backend is not FileBacked")
	}
	if _, ok := reg.(Staleness); ok {
		t.Fatal("the fleet file backend claims Staleness")
	}

	reg, err = Open(Options{Consul: ConsulOptions{Addr: "127.0.0.1:1"}, Self: &SelfRegistration{Name: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := reg.(*Consul)
	if !ok {
		t.Fatalf("Consul.Addr set: got %T, want *Consul", reg)
	}
	if c.selfName() != "a" {
		t.Fatalf("Consul's Self: %q, want Options.Self", c.selfName())
	}
	if _, ok := reg.(Staleness); !ok {
		t.Fatal("the Consul backend is not Staleness")
	}
	if _, ok := reg.(FileBacked); ok {
		t.Fatal("the Consul backend claims FileBacked")
	}

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"neither", Options{}, "registry: none chosen: give a fleet file (Options.Fleet) or a Consul address (Options.Consul.Addr)"},
		{"both", Options{Fleet: path, Admin: admin, Consul: ConsulOptions{Addr: "127.0.0.1:8500"}}, "registry: a fleet file (" + path + ") and Consul (127.0.0.1:8500): choose one"},
		{"fleet without admin client", Options{Fleet: path}, "a fleet file needs an admin client"},
		{"consul token with a fleet file", Options{Fleet: path, Admin: admin, Consul: ConsulOptions{Token: "t"}}, "a Consul token without a Consul address"},
		{"self without a name", Options{Fleet: path, Admin: admin, Self: &SelfRegistration{}}, "(Self) needs a name"},
		{"consul self", Options{Consul: ConsulOptions{Addr: "127.0.0.1:1", Self: &SelfRegistration{Name: "a"}}}, "not Options.Consul.Self"},
		{"fleet file missing", Options{Fleet: path + ".gone", Admin: admin}, "fleet: "},
		{"self not listed", Options{Fleet: path, Admin: admin, Self: &SelfRegistration{Name: "zz"}}, `fleet: ` + path + `: this relay ("zz") is not listed`},
	} {
		reg, err := Open(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, %v; want an error containing %q", tc.name, reg, err, tc.want)
		}
	}
}

// The fleet backend's lifecycle: Run pulls in the background and tells
// Events, Refresh updates at once, and after ctx ends and Close nothing of
// it is left running.
func TestFleetLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	now := time.Now()
	b := fakeRelayAdmin(t, "tok", Serve("b", "osaka", []Pair{
		{From: "b", To: "a", RTTMs: 10, Samples: 5, UpdatedAt: now},
	}, now))
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "admin_token: tok\nrelays:\n  - {name: a}\n  - {name: b, admin: "+strings.TrimPrefix(b.URL, "http://")+"}\n")

	pulls := make(chan error, 100)
	reg, err := Open(Options{
		Fleet: path, Self: &SelfRegistration{Name: "a"}, Admin: adminapi.NewClient(3*time.Second, nil),
		PullInterval: 50 * time.Millisecond, Events: Events{OnPull: func(err error) { pulls <- err }},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rs, _ := reg.Relays(context.Background()); len(rs) != 2 {
		t.Fatalf("relays right after Open: %+v, want the file's two", rs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	changed := reg.Watch(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); reg.Run(ctx) }()
	select {
	case err := <-pulls:
		if err != nil {
			t.Fatalf("Run's pull: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not pull")
	}
	if err := reg.Publish(ctx, "a", []Pair{{From: "a", To: "b", RTTMs: 11, Samples: 5, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if ps, _ := reg.Pairs(ctx); len(ps) != 2 {
		t.Fatalf("pairs after Refresh: %+v, want a's and b's", ps)
	}
	// Run re-reads a changed file (every 2 s) and Watch says so.
	writeFleet(t, path, "admin_token: tok\nrelays:\n  - {name: a}\n  - {name: b, admin: "+strings.TrimPrefix(b.URL, "http://")+"}\n  - {name: c}\n")
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not re-read the changed file")
	}
	if rs, _ := reg.Relays(ctx); len(rs) != 3 {
		t.Fatalf("relays after the re-read: %+v", rs)
	}

	cancel()
	wg.Wait()
	if err := reg.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The fake relay's connections hold goroutines of their own; close it
	// before counting what is left.
	b.Close()
}

// Refresh without Run, as relayctl reads: one relay answering is enough,
// and none answering is an error naming them.
func TestFleetRefreshReader(t *testing.T) {
	now := time.Now()
	b := fakeRelayAdmin(t, "tok", Serve("b", "osaka", []Pair{
		{From: "b", To: "c", RTTMs: 10, Samples: 5, UpdatedAt: now},
		{From: "c", To: "b", RTTMs: 12, Samples: 5, UpdatedAt: now},
	}, now))
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "admin_token: tok\nrelays:\n  - {name: b, admin: "+strings.TrimPrefix(b.URL, "http://")+"}\n  - {name: c, admin: 127.0.0.1:1}\n")
	var pulled []error
	reg, err := Open(Options{Fleet: path, Admin: adminapi.NewClient(3*time.Second, nil), Events: Events{OnPull: func(err error) { pulled = append(pulled, err) }}})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh with b answering: %v", err)
	}
	// c did not answer: Events hear it, Refresh does not fail for it. b's
	// "fleet" answer carries c's own pair too.
	if len(pulled) != 1 || pulled[0] == nil || !strings.Contains(pulled[0].Error(), "c (127.0.0.1:1)") {
		t.Fatalf("OnPull heard %v, want one error naming c", pulled)
	}
	if ps, _ := reg.Pairs(context.Background()); len(ps) != 2 {
		t.Fatalf("pairs %+v, want b's and c's from b", ps)
	}

	writeFleet(t, path, "admin_token: tok\nrelays:\n  - {name: c, admin: 127.0.0.1:1}\n")
	reg, err = Open(Options{Fleet: path, Admin: adminapi.NewClient(3*time.Second, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "no relay's admin API answered: c (127.0.0.1:1)") {
		t.Fatalf("Refresh with no relay answering: %v", err)
	}
}

// newestPairs keeps the newest of each (from, to), the first added of two
// as new, and sorts by (from, to); the caller's slices are not reordered.
func TestNewestPairs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	first := []Pair{{From: "b", To: "a", RTTMs: 1, UpdatedAt: t0}, {From: "a", To: "c", RTTMs: 2, UpdatedAt: t0}, {From: "a", To: "b", RTTMs: 3, UpdatedAt: t0}}
	second := []Pair{{From: "b", To: "a", RTTMs: 4, UpdatedAt: t0.Add(time.Second)}, {From: "a", To: "c", RTTMs: 5, UpdatedAt: t0}}
	n := newestPairs{}
	n.add(first)
	n.add(second)
	var got []string
	for _, p := range n.sorted() {
		got = append(got, fmt.Sprintf("%s>%s %g", p.From, p.To, p.RTTMs))
	}
	if want := []string{"a>b 3", "a>c 2", "b>a 4"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if first[0].From != "b" || first[2].To != "b" {
		t.Fatalf("the caller's slice was reordered: %+v", first)
	}
}
