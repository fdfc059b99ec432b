package registry

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

// fakeRelayAdmin serves /v1/measurements like relayd's admin API does, with
// a token check, so the fleet backend's pull can be tested without relayd
// (the e2e tests run it against real relayd processes).
func fakeRelayAdmin(t *testing.T, token string, m Measurements) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "admin token required", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/v1/measurements" || r.URL.Query().Get("scope") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(m)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeFleet(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFleetPullHealthAndAge(t *testing.T) {
	now := time.Now()
	b := fakeRelayAdmin(t, "tok", Serve("b", "osaka", []Pair{
		{From: "b", To: "a", RTTMs: 10, Samples: 5, UpdatedAt: now.Add(-3 * time.Second)},
		{From: "b", To: "c", RTTMs: 20, Loss: 1, Samples: 5, UpdatedAt: now.Add(-3 * time.Second)},
	}, now))
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, `admin_token: tok
relays:
  - {name: a, region: tokyo, admin: 127.0.0.1:1}
  - {name: b, region: osaka, admin: `+strings.TrimPrefix(b.URL, "http://")+`}
  - {name: c, region: kyoto, admin: 127.0.0.1:1}
`)
	f, err := openFleet(path, "a", adminapi.NewClient(3*time.Second, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Publish(context.Background(), "a", []Pair{{From: "a", To: "b", RTTMs: 11, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Publish(context.Background(), "b", nil); err == nil {
		t.Fatal("publishing for another relay must fail")
	}
	// c's admin is unreachable: the error names it; b's pairs arrive.
	err = f.Pull(context.Background(), "fleet")
	if err == nil || !strings.Contains(err.Error(), "c (127.0.0.1:1)") {
		t.Fatalf("refresh error %v, want one naming c", err)
	}
	pairs, _ := f.Pairs(context.Background())
	if len(pairs) != 3 {
		t.Fatalf("pairs %+v", pairs)
	}
	for _, p := range pairs {
		if p.From == "b" && p.To == "a" {
			// Age rebased on our clock: ~3 s, whatever b's clock says.
			if age := p.Age(time.Now()); age < 2*time.Second || age > 5*time.Second {
				t.Fatalf("age %v, want ~3 s", age)
			}
		}
	}
	relays, _ := f.Relays(context.Background())
	health := map[string]string{}
	for _, r := range relays {
		health[r.Name] = r.Health
		if (r.Health == "unknown") == r.Healthy {
			t.Errorf("%s: healthy %v with health %q", r.Name, r.Healthy, r.Health)
		}
	}
	// a: itself; b: answered; c: unreachable, and b's probes to c were lost.
	if health["a"] != "self" || health["b"] != "admin" || health["c"] != "unknown" {
		t.Fatalf("health %v", health)
	}
}

func TestFleetReloadKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "relays:\n  - {name: a}\n")
	f, err := openFleet(path, "a", adminapi.NewClient(3*time.Second, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := f.Watch(ctx)
	writeFleet(t, path, "relays:\n  - {name: a}\n  - {name: b, admin: 127.0.0.1:9}\n")
	if ok, err := f.Reload(); !ok || err != nil {
		t.Fatalf("reload: %v %v", ok, err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("no change signalled")
	}
	if len(f.File().Relays) != 2 {
		t.Fatalf("relays %+v", f.File().Relays)
	}
	writeFleet(t, path, "relays:\n  - {name: a}\n  - {name: b, admin: 127.0.0.1:9}\n  - [\n")
	if _, err := f.Reload(); err == nil || !strings.Contains(err.Error(), "did not find expected") {
		t.Fatalf("reload of a file that is not YAML: %v", err)
	}
	if len(f.File().Relays) != 2 {
		t.Fatal("a bad file replaced the last good one")
	}
}

// One bad entry costs that entry, not the fleet: the others are used, and
// the error names the entry.
func TestFleetBadEntryRestKeepsWorking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "relays:\n  - {name: a}\n  - {name: b, admin: 127.0.0.1:9}\n  - {name: c, admin: 127.0.0.1:9}\n")
	got := make(chan error, 1)
	f, err := Open(Options{
		Fleet: path, Self: &SelfRegistration{Name: "a"}, Admin: adminapi.NewClient(3*time.Second, nil),
		PullInterval: time.Hour, Events: Events{OnFile: func(err error) { got <- err }},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFleet(t, path, "relays:\n  - {name: a}\n  - {name: b, admin: 127.0.0.1:9}\n  - {name: c, admin: 127.0.0.1}\n  - {name: d, admin: 127.0.0.1:9}\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	select {
	case err := <-got:
		want := `relays[2] (line 4, name "c"): admin: "127.0.0.1" is not host:port; entry skipped`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("onFile: %v, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the changed file was not re-read")
	}
	var names []string
	rs, _ := f.Relays(ctx)
	for _, r := range rs {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"a", "b", "d"}) {
		t.Fatalf("relays in use %v, want a, b, d", names)
	}
}

func TestOpenFleetOwnEntryInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "relays:\n  - {name: a, socks: 1080}\n  - {name: b}\n")
	if _, err := openFleet(path, "a", adminapi.NewClient(3*time.Second, nil)); err == nil || !strings.Contains(err.Error(), `own entry is invalid: `+path+`: relays[0] (line 2, name "a"): socks: "1080" is not host:port`) {
		t.Fatalf("err %v", err)
	}
}

func TestOpenFleetNotListed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, "relays:\n  - {name: a}\n")
	if _, err := openFleet(path, "zz", adminapi.NewClient(3*time.Second, nil)); err == nil || !strings.Contains(err.Error(), `("zz") is not listed`) {
		t.Fatalf("err %v", err)
	}
}

// A relay speaks only for itself, and impossible figures are dropped: a
// pair claimed for another relay, an age in the future (it would never go
// stale), an answered probe of 0 ms (it would pull every plan through the
// liar), loss over 1.
func TestFleetDropsLies(t *testing.T) {
	now := time.Now()
	b := fakeRelayAdmin(t, "tok", Serve("b", "osaka", []Pair{
		{From: "b", To: "a", RTTMs: 10, Samples: 5, UpdatedAt: now.Add(-time.Second)},
		{From: "c", To: "a", RTTMs: 0.5, Samples: 5, UpdatedAt: now.Add(-time.Second)},
		{From: "b", To: "c", RTTMs: 12, Samples: 5, UpdatedAt: now.Add(time.Hour)},
		{From: "b", To: "d", RTTMs: 0, Samples: 5, UpdatedAt: now},
		{From: "b", To: "e", RTTMs: 9, Loss: 2, Samples: 5, UpdatedAt: now},
	}, now))
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFleet(t, path, `admin_token: tok
relays:
  - {name: a, region: tokyo, admin: 127.0.0.1:1}
  - {name: b, region: osaka, admin: `+strings.TrimPrefix(b.URL, "http://")+`}
`)
	f, err := openFleet(path, "a", adminapi.NewClient(3*time.Second, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Pull(context.Background(), "local"); err != nil {
		t.Fatal(err)
	}
	pairs, _ := f.Pairs(context.Background())
	if len(pairs) != 1 || pairs[0].From != "b" || pairs[0].To != "a" {
		t.Fatalf("pairs %+v, want only b's own, possible one", pairs)
	}
}
