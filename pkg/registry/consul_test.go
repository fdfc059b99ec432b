package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/registry/consultest"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestCoordinateDistance(t *testing.T) {
	c := func(adj, height float64, vec ...float64) *coordinate.Coordinate {
		return &coordinate.Coordinate{Vec: vec, Adjustment: adj, Height: height}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, tc := range []struct {
		name string
		a, b *coordinate.Coordinate
		want float64 // ms
		ok   bool
	}{
		// 3-4-5 triangle of 10 ms units, plus heights 1 ms and 2 ms.
		{"euclid+heights", c(0, 0.001, 0.03, 0), c(0, 0.002, 0, 0.04), 53, true},
		{"adjustments added", c(0.005, 0, 0.01), c(0.002, 0, 0), 17, true},
		// A negative adjustment that would make the distance negative is
		// ignored, as Consul does.
		{"negative sum ignored", c(-0.02, 0, 0.01), c(-0.01, 0, 0), 10, true},
		{"negative adjustment kept when positive", c(-0.002, 0, 0.01), c(0, 0, 0), 8, true},
		{"same node", c(0, 0.00001, 0.01, 0.02), c(0, 0.00001, 0.01, 0.02), 0.02, true},
		{"missing", nil, c(0, 0, 0), 0, false},
		{"dimensions differ", c(0, 0, 1, 2), c(0, 0, 1), 0, false},
		{"invalid", c(0, 0, math.NaN()), c(0, 0, 0), 0, false},
	} {
		d, ok := CoordinateDistance(tc.a, tc.b)
		if ok != tc.ok || math.Abs(ms(d)-tc.want) > 1e-6 {
			t.Errorf("%s: got %v ms ok=%v, want %v ms ok=%v", tc.name, ms(d), ok, tc.want, tc.ok)
		}
		if ok {
			// The same as serf's own, which Consul uses.
			if want := tc.a.DistanceTo(tc.b); d != want {
				t.Errorf("%s: %v, serf says %v", tc.name, d, want)
			}
		}
	}
}

func TestMaterial(t *testing.T) {
	p := func(to string, rtt, loss float64) Pair {
		return Pair{From: "a", To: to, RTTMs: rtt, Loss: loss, Samples: 10}
	}
	base := []Pair{p("b", 10, 0), p("c", 0.2, 0)}
	for _, tc := range []struct {
		name  string
		fresh []Pair
		want  bool
	}{
		{"same", []Pair{p("b", 10, 0), p("c", 0.2, 0)}, false},
		{"loopback wobble", []Pair{p("b", 10.4, 0), p("c", 0.6, 0)}, false},
		{"rtt +20%", []Pair{p("b", 12, 0), p("c", 0.2, 0)}, true},
		{"loss", []Pair{p("b", 10, 0.1), p("c", 0.2, 0)}, true},
		{"stopped answering", []Pair{p("b", 10, 0), {From: "a", To: "c", RTTMs: 0.2, Samples: 10, LastError: "refused"}}, true},
		{"peer gone", []Pair{p("b", 10, 0)}, true},
		{"peer replaced", []Pair{p("b", 10, 0), p("d", 0.2, 0)}, true},
		{"window filling", []Pair{p("b", 10, 0), {From: "a", To: "c", RTTMs: 0.2, Samples: 20}}, true},
	} {
		if got := material(base, tc.fresh); got != tc.want {
			t.Errorf("%s: material = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFillHost(t *testing.T) {
	for _, tc := range []struct{ addr, host, want string }{
		{"0.0.0.0:1080", "10.0.0.5", "10.0.0.5:1080"},
		{"[::]:1080", "10.0.0.5", "10.0.0.5:1080"},
		{":1080", "fd00::1", "[fd00::1]:1080"},
		{"127.0.0.1:1080", "10.0.0.5", "127.0.0.1:1080"},
		{"0.0.0.0:1080", "", "0.0.0.0:1080"},
		{"", "10.0.0.5", ""},
	} {
		if got := fillHost(tc.addr, tc.host); got != tc.want {
			t.Errorf("fillHost(%q, %q) = %q, want %q", tc.addr, tc.host, got, tc.want)
		}
	}
	if h, p := splitListen("0.0.0.0:1080"); h != "" || p != 1080 {
		t.Errorf("splitListen: %q %d", h, p)
	}
}

// eventually polls cond every 100 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsulRegistry runs the backend against a real Consul agent: a relay
// registers with a health check, publishes, is read by another client,
// watches fire, an agent crash and restart (which loses everything in -dev
// mode) is ridden out and repaired, and deregistering removes it all.
func TestConsulRegistry(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			fmt.Fprintln(w, "ok")
			return
		}
		http.NotFound(w, r)
	}))
	defer health.Close()
	admin := health.Listener.Addr().String()

	core, logs := observer.New(zap.InfoLevel)
	a, err := newConsul(ConsulOptions{
		Addr: agent.HTTP, Log: zap.New(core), PublishEvery: time.Second, WatchCoalesce: 100 * time.Millisecond,
		Self: &SelfRegistration{Name: "a", Region: "tokyo", SOCKS: "0.0.0.0:1080", HTTP: "127.0.0.1:8080", Admin: admin},
	})
	if err != nil {
		t.Fatal(err)
	}
	var runWG sync.WaitGroup
	runWG.Add(1)
	go func() { defer runWG.Done(); a.Run(ctx) }()
	defer func() { cancel(); runWG.Wait() }()

	// The service as Consul stores it: name, tag, meta, address, check.
	client, err := api.NewClient(&api.Config{Address: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a registered and healthy", func() bool {
		rs, _ := a.Relays(ctx)
		return len(rs) == 1 && rs[0].Healthy
	})
	rs, _ := a.Relays(ctx)
	// The wildcard SOCKS host is filled in with the node's address.
	if r := rs[0]; r.Name != "a" || r.Region != "tokyo" || r.Health != "consul" || r.SOCKS != "127.0.0.1:1080" || r.HTTP != "127.0.0.1:8080" || r.Admin != admin {
		t.Fatalf("relay: %+v", r)
	}
	svc, _, err := client.Agent().Service("relaymesh-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if svc.Service != "relaymesh" || len(svc.Tags) != 1 || svc.Tags[0] != "region:tokyo" || svc.Port != 1080 || svc.Meta["admin"] != admin {
		t.Fatalf("service: %+v", svc)
	}
	// Consul does not give the check's definition back; its output names
	// the URL it polls, once the first run (staggered up to the 5 s
	// interval) is done.
	eventually(t, 8*time.Second, "the agent polled /healthz", func() bool {
		checks, err := client.Agent().Checks()
		chk := checks["relaymesh-a-healthz"]
		return err == nil && chk != nil && chk.ServiceID == "relaymesh-a" && chk.Type == "http" &&
			chk.Status == api.HealthPassing && strings.Contains(chk.Output, "http://"+admin+"/healthz")
	})

	// A reader (relayctl) watching, and a's measurements published.
	reader, err := newConsul(ConsulOptions{Addr: agent.HTTP, WatchCoalesce: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go reader.Run(ctx)
	changed := reader.Watch(ctx)
	now := time.Now().Round(time.Millisecond)
	mine := []Pair{{From: "a", To: "b", RTTMs: 12.5, MinMs: 12, P90Ms: 14, Samples: 10, UpdatedAt: now}}
	if err := a.Publish(ctx, "a", mine); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "b", mine); err == nil {
		t.Fatal("a published for b")
	}
	kv, _, err := client.KV().Get("relaymesh/measurements/a", nil)
	if err != nil || kv == nil {
		t.Fatalf("kv: %v %v", kv, err)
	}
	var stored []Pair
	if err := json.Unmarshal(kv.Value, &stored); err != nil || len(stored) != 1 || stored[0].RTTMs != 12.5 || !stored[0].UpdatedAt.Equal(now) {
		t.Fatalf("stored: %s %v", kv.Value, err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader's watch did not fire on a publish")
	}
	eventually(t, 5*time.Second, "reader sees a's pair", func() bool {
		ps, _ := reader.Pairs(ctx)
		for _, p := range ps {
			if p.From == "a" && p.To == "b" && p.RTTMs == 12.5 && !p.Estimated {
				return true
			}
		}
		return false
	})
	// A one-shot reader (relayctl) sees the same.
	once, _ := newConsul(ConsulOptions{Addr: agent.HTTP})
	if err := once.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if rs, _ := once.Relays(ctx); len(rs) != 1 || rs[0].Name != "a" {
		t.Fatalf("one-shot relays: %+v", rs)
	}
	// A key may only speak for its own relay; garbage is ignored.
	if _, err := client.KV().Put(&api.KVPair{Key: "relaymesh/measurements/x", Value: []byte(`[{"from":"a","to":"c","rtt_ms":1}]`)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.KV().Put(&api.KVPair{Key: "relaymesh/measurements/y", Value: []byte(`not json`)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := once.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, _ := once.Pairs(ctx); len(ps) != 1 || ps[0].To != "b" {
		t.Fatalf("pairs with a forged and a broken key: %+v", ps)
	}
	if stale, _ := a.Stale(); stale {
		t.Fatal("stale while consul is up")
	}

	// The agent crashes: both keep answering with what they knew, and say
	// it is stale.
	agent.Kill()
	eventually(t, 10*time.Second, "a notices the outage", func() bool { s, _ := a.Stale(); return s })
	eventually(t, 10*time.Second, "the reader notices the outage", func() bool { s, _ := reader.Stale(); return s })
	if rs, _ := a.Relays(ctx); len(rs) != 1 || rs[0].Name != "a" {
		t.Fatalf("relays during the outage: %+v", rs)
	}
	if ps, _ := reader.Pairs(ctx); len(ps) == 0 {
		t.Fatal("the reader forgot the measurements during the outage")
	}
	// The warning is written just after the state Stale reads, outside
	// its lock: under the race detector a check in between saw none.
	eventually(t, 5*time.Second, "a logs the outage", func() bool { return logs.FilterMessageSnippet("consul unreachable").Len() > 0 })
	if n := logs.FilterMessageSnippet("consul unreachable").Len(); n != 1 {
		t.Fatalf("outage logged %d times, want once", n)
	}
	mine[0].RTTMs = 30 // measured during the outage; written once Consul is back
	_ = a.Publish(ctx, "a", mine)

	// It comes back empty (-dev keeps nothing): a registers again and
	// rewrites its measurements within the 10 s catch-up target.
	agent.Restart(t)
	back := time.Now()
	eventually(t, 10*time.Second, "a re-registered and republished", func() bool {
		if _, _, err := client.Agent().Service("relaymesh-a", nil); err != nil {
			return false
		}
		kv, _, err := client.KV().Get("relaymesh/measurements/a", nil)
		return err == nil && kv != nil && bytes.Contains(kv.Value, []byte(`"rtt_ms":30`))
	})
	eventually(t, 10*time.Second-time.Since(back), "both current again", func() bool {
		sa, _ := a.Stale()
		sr, _ := reader.Stale()
		ps, _ := reader.Pairs(ctx)
		rs, _ := reader.Relays(ctx)
		return !sa && !sr && len(ps) == 1 && ps[0].RTTMs == 30 && len(rs) == 1 && rs[0].Name == "a"
	})
	// Logged just after the state Stale reads, as the outage is.
	eventually(t, 5*time.Second, "a logs the recovery", func() bool { return logs.FilterMessageSnippet("consul reachable again").Len() > 0 })

	// Deregistering removes the service and the measurements.
	if err := a.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.Agent().Service("relaymesh-a", nil); err == nil {
		t.Fatal("still registered")
	}
	if kv, _, _ := client.KV().Get("relaymesh/measurements/a", nil); kv != nil {
		t.Fatal("measurements still there")
	}
}

// TestConsulCoordinatesPrior: a pair nobody measured gets the coordinate
// estimate, marked Estimated, and a measurement replaces it.
func TestConsulCoordinatesPrior(t *testing.T) {
	c, err := newConsul(ConsulOptions{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c.relays = []consulRelay{{Relay: Relay{Name: "a"}, node: "n1"}, {Relay: Relay{Name: "b"}, node: "n2"}, {Relay: Relay{Name: "c"}, node: "n3"}}
	c.coords = map[string]*coordinate.Coordinate{
		"n1": {Vec: []float64{0, 0}}, "n2": {Vec: []float64{0.03, 0.04}}, // n3: none
	}
	c.measured = map[string][]Pair{"b": {{From: "b", To: "a", RTTMs: 49, Samples: 5}}}
	ps, _ := c.Pairs(context.Background())
	if len(ps) != 2 {
		t.Fatalf("pairs: %+v", ps)
	}
	if p := ps[0]; p.From != "a" || p.To != "b" || !p.Estimated || math.Abs(p.RTTMs-50) > 1e-9 || p.Samples != 0 {
		t.Fatalf("estimated: %+v", p)
	}
	if p := ps[1]; p.From != "b" || p.To != "a" || p.Estimated || p.RTTMs != 49 {
		t.Fatalf("measured: %+v", p)
	}
}

// A reply with a nil entry, or an entry without a service, is dropped, not
// dereferenced (it used to panic relayd in the sort).
func TestRelaysFromHostileEntries(t *testing.T) {
	entries := []*api.ServiceEntry{
		nil,
		{Service: &api.AgentService{ID: ConsulServiceIDPrefix + "b", Meta: map[string]string{"name": "b", "relay": ":7000"}, Address: "10.0.0.2"}},
		{Node: &api.Node{Node: "n"}},
		nil,
		{Service: &api.AgentService{ID: ConsulServiceIDPrefix + "a", Meta: map[string]string{"name": "a", "relay": ":7000"}, Address: "10.0.0.1"}},
	}
	got := relaysFrom(entries)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("relaysFrom = %+v, want relays a and b", got)
	}
}

// TestConsulRelayCoordinates runs the relays' own coordinates against a
// real Consul agent: a relay writes its coordinate to
// relaymesh/coordinates/<relay> (once more only after PublishEvery),
// readers see it, one-shot and watching, a forged or broken key is
// ignored, a key lost is written again, and deregistering deletes it.
func TestConsulRelayCoordinates(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := api.NewClient(&api.Config{Address: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}

	a, err := newConsul(ConsulOptions{
		Addr: agent.HTTP, PublishEvery: time.Hour, WatchCoalesce: 100 * time.Millisecond,
		Self: &SelfRegistration{Name: "a", Admin: "127.0.0.1:1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.relayCoordsEvery = 100 * time.Millisecond
	var runWG sync.WaitGroup
	defer func() { cancel(); runWG.Wait() }()

	first := &coordinate.Coordinate{Vec: []float64{0.01, 0.02}, Error: 0.5, Height: 1e-4}
	if err := a.PublishCoordinate(ctx, "a", first); err != nil {
		t.Fatal(err)
	}
	if err := a.PublishCoordinate(ctx, "b", first); err == nil {
		t.Fatal("a published b's coordinate")
	}
	kv, _, err := client.KV().Get("relaymesh/coordinates/a", nil)
	if err != nil || kv == nil {
		t.Fatalf("relaymesh/coordinates/a: %v %v", kv, err)
	}
	var stored Coordinate
	if err := json.Unmarshal(kv.Value, &stored); err != nil || stored.Relay != "a" || len(stored.Coord.Vec) != 2 ||
		stored.Coord.Vec[1] != 0.02 || stored.Coord.Height != 1e-4 || time.Since(stored.UpdatedAt) > time.Minute {
		t.Fatalf("stored: %s %v", kv.Value, err)
	}
	// Within PublishEvery a new coordinate is kept, not written: one write
	// per relay per PublishEvery, whatever it probes.
	if err := a.PublishCoordinate(ctx, "a", &coordinate.Coordinate{Vec: []float64{0.05, 0}, Error: 0.4}); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := client.KV().Get("relaymesh/coordinates/a", nil); again == nil || again.ModifyIndex != kv.ModifyIndex {
		t.Fatal("a second coordinate within PublishEvery was written")
	}
	if cs, _ := a.Coordinates(ctx); len(cs) != 1 || cs[0].Coord.Vec[0] != 0.05 || stored.MeasuredForS <= 0 || cs[0].MeasuredForS <= stored.MeasuredForS {
		t.Fatalf("a's own coordinates %+v (the first as stored measured for %v s), want its newest, written or not, measured longer than the first", cs, stored.MeasuredForS)
	}

	// Another relay's key that names a third, and a key that is no JSON.
	for key, val := range map[string]string{
		"relaymesh/coordinates/x": `{"relay":"b","coord":{"Vec":[0.01,0.01]},"updated_at":"2030-01-01T00:00:00Z"}`,
		"relaymesh/coordinates/y": `not json`,
		"relaymesh/coordinates/z": `{"relay":"z","coord":{"Vec":[0.01,0.01],"Height":0},"updated_at":"` + time.Now().Add(-5*time.Second).Format(time.RFC3339Nano) + `"}`,
	} {
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	once, _ := newConsul(ConsulOptions{Addr: agent.HTTP})
	if err := once.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var reg Registry = once
	cs, _ := reg.(Coordinates).Coordinates(ctx)
	if len(cs) != 2 || cs[0].Relay != "a" || cs[0].Coord.Vec[0] != 0.01 || cs[1].Relay != "z" {
		t.Fatalf("one-shot reader: %+v, want a's as written and z's (not x's forged, not y's broken)", cs)
	}
	if age := cs[1].Age(time.Now()); age < 4*time.Second || age > time.Minute {
		t.Fatalf("z's coordinate %v old, want ~5 s", age)
	}

	// Lost (an agent restarted in -dev mode, or deleted by hand): a
	// running relay writes it again, its newest.
	runWG.Add(1)
	go func() { defer runWG.Done(); a.Run(ctx) }()
	// Registering writes the coordinate again too (an agent that lost
	// the service lost the KV store as well): delete it only after.
	eventually(t, 10*time.Second, "a registered", func() bool {
		_, _, err := client.Agent().Service("relaymesh-a", nil)
		return err == nil
	})
	if _, err := client.KV().Delete("relaymesh/coordinates/a", nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a's lost coordinate written again", func() bool {
		kv, _, err := client.KV().Get("relaymesh/coordinates/a", nil)
		return err == nil && kv != nil && bytes.Contains(kv.Value, []byte(`"Vec":[0.05,0]`))
	})

	// Deregistering deletes it with the measurements.
	cancel()
	runWG.Wait()
	if err := a.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	if kv, _, _ := client.KV().Get("relaymesh/coordinates/a", nil); kv != nil {
		t.Fatal("coordinate still there after deregistering")
	}
	a.opts.PublishEvery = time.Nanosecond // any publish would write now
	if err := a.PublishCoordinate(context.Background(), "a", first); err != nil {
		t.Fatal(err)
	}
	if kv, _, _ := client.KV().Get("relaymesh/coordinates/a", nil); kv != nil {
		t.Fatal("a deregistered relay wrote its coordinate again")
	}
}

// TestConsulCoordinatesOnly: a registry with CoordinatesOnly (a relay in
// probe mode coordinates, not routing by plan) watches the relays'
// coordinates but never reads another relay's pairs, while a reader
// without it, on the same agent, does.
func TestConsulCoordinatesOnly(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	ctx, cancel := context.WithCancel(context.Background())
	var runWG sync.WaitGroup
	defer func() { cancel(); runWG.Wait() }()
	client, err := api.NewClient(&api.Config{Address: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for key, val := range map[string]string{
		"relaymesh/measurements/w": `[{"from":"w","to":"v","rtt_ms":20,"samples":5,"updated_at":"` + now + `"}]`,
		"relaymesh/coordinates/w":  `{"relay":"w","coord":{"Vec":[0.01,0.02]},"updated_at":"` + now + `"}`,
	} {
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: []byte(val)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	run := func(opts ConsulOptions) *Consul {
		c, err := newConsul(opts)
		if err != nil {
			t.Fatal(err)
		}
		c.relayCoordsEvery = 100 * time.Millisecond
		runWG.Add(1)
		go func() { defer runWG.Done(); c.Run(ctx) }()
		return c
	}
	full := run(ConsulOptions{Addr: agent.HTTP, WatchCoalesce: 100 * time.Millisecond})
	only := run(ConsulOptions{Addr: agent.HTTP, WatchCoalesce: 100 * time.Millisecond, CoordinatesOnly: true})
	eventually(t, 10*time.Second, "both readers see w's coordinate, the full one its pairs", func() bool {
		fc, _ := full.Coordinates(ctx)
		oc, _ := only.Coordinates(ctx)
		fp, _ := full.Pairs(ctx)
		return len(fc) == 1 && len(oc) == 1 && oc[0].Relay == "w" && len(fp) == 1 && fp[0].RTTMs == 20
	})
	if ps, _ := only.Pairs(ctx); len(ps) != 0 {
		t.Errorf("the coordinates-only reader read pairs: %+v", ps)
	}
	// w moves. The full reader sees it within its 100 ms; the
	// coordinates-only one reads every relay's coordinate again only
	// after coord.FleetViewEvery (10 s for one relay), but reads w's alone, as
	// a relay does for the peer it probes, at once.
	moved := time.Now().UTC().Format(time.RFC3339Nano)
	if _, err := client.KV().Put(&api.KVPair{Key: "relaymesh/coordinates/w",
		Value: []byte(`{"relay":"w","coord":{"Vec":[0.03,0.04]},"updated_at":"` + moved + `"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	at := func(c *Consul) float64 {
		cs, _ := c.Coordinates(ctx)
		if len(cs) != 1 {
			return 0
		}
		return cs[0].Coord.Vec[0]
	}
	eventually(t, 5*time.Second, "the full reader sees w move", func() bool { return at(full) == 0.03 })
	if got := at(only); got != 0.01 {
		t.Errorf("the coordinates-only reader read every coordinate again within %v: w at %v", coord.FleetViewEvery(1), got)
	}
	rc, ok, err := only.CoordinateOf(ctx, "w")
	if err != nil || !ok || rc.Coord.Vec[0] != 0.03 {
		t.Fatalf("CoordinateOf(w) = %+v, %v, %v: want its new coordinate", rc, ok, err)
	}
	if got := at(only); got != 0.03 {
		t.Errorf("after CoordinateOf(w), Coordinates has w at %v, want 0.03", got)
	}
	if _, ok, err := only.CoordinateOf(ctx, "nobody"); ok || err != nil {
		t.Errorf("CoordinateOf(nobody) = %v, %v: want none, no error", ok, err)
	}

	// A relay registers. The full reader lists it at once; the
	// coordinates-only one reads the instances as seldom as the
	// coordinates, but reads v alone when asked (RelayOf).
	if err := client.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: ConsulServiceIDPrefix + "v", Name: ConsulService,
		Meta: map[string]string{"name": "v", "admin": "192.0.2.7:9090"}, Address: "192.0.2.7"}); err != nil {
		t.Fatal(err)
	}
	listed := func(c *Consul) bool {
		rs, _ := c.Relays(ctx)
		return slices.ContainsFunc(rs, func(r Relay) bool { return r.Name == "v" })
	}
	eventually(t, 5*time.Second, "the full reader lists v", func() bool { return listed(full) })
	if listed(only) {
		t.Errorf("the coordinates-only reader read the instances again within %v", coord.FleetViewEvery(1))
	}
	r, ok, err := only.RelayOf(ctx, "v")
	if err != nil || !ok || r.Admin != "192.0.2.7:9090" {
		t.Fatalf("RelayOf(v) = %+v, %v, %v: want v with its admin address", r, ok, err)
	}
	if _, ok, err := only.RelayOf(ctx, "nobody"); ok || err != nil {
		t.Errorf("RelayOf(nobody) = %v, %v: want none, no error", ok, err)
	}
}

// TestConsulReadsAnAgentOnThisHostPlain: a read of an agent on loopback
// does not ask for gzip (compressing costs the agent more than the bytes
// cost on loopback), and still reads what the agent holds. The agent is
// real; a proxy in front of it records what each request asked for.
func TestConsulReadsAnAgentOnThisHostPlain(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	upstream, err := url.Parse("http://" + agent.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]string{} // path → Accept-Encoding
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	writer, err := newConsul(ConsulOptions{Addr: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	kvPut(t, writer, ConsulKVPrefix+"a", []Pair{{From: "a", To: "b", RTTMs: 12.5, Samples: 3, UpdatedAt: time.Now()}})
	reader, err := newConsul(ConsulOptions{Addr: front.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if pairs, err := reader.Pairs(ctx); err != nil || len(pairs) != 1 || pairs[0].RTTMs != 12.5 {
		t.Fatalf("read through the proxy: %+v, %v", pairs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 2 {
		t.Fatalf("reads made: %v", asked)
	}
	for path, enc := range asked {
		if strings.Contains(enc, "gzip") {
			t.Errorf("%s asked an agent on loopback for %q", path, enc)
		}
	}
}

func TestLoopbackAgent(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8500":          true,
		"127.0.0.53:8500":         true,
		"[::1]:8500":              true,
		"localhost:8500":          true,
		"http://127.0.0.1:8500":   true,
		"https://localhost:8501":  true,
		"127.0.0.1":               true,
		"10.0.0.5:8500":           false,
		"consul.example:8500":     false,
		"[2001:db8::1]:8500":      false,
		"unix:///run/consul.sock": false,
		"":                        false,
	} {
		if got := loopbackAgent(addr); got != want {
			t.Errorf("loopbackAgent(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestConsulEstimatesNoFleetAboveTheBound: a fleet larger than
// MaxEstimatedRelays whose relays' nodes all have coordinates gets its
// measured pairs from Pairs and no estimate: the estimates would be
// millions of pairs, built each time Pairs is asked.
func TestConsulEstimatesNoFleetAboveTheBound(t *testing.T) {
	c, err := newConsul(ConsulOptions{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	n := MaxEstimatedRelays + 1
	for i := range n {
		node := fmt.Sprintf("n%04d", i)
		c.relays = append(c.relays, consulRelay{Relay: Relay{Name: fmt.Sprintf("r%04d", i)}, node: node})
		c.coords[node] = &coordinate.Coordinate{Vec: []float64{float64(i) / 1e5, 0}}
	}
	c.measured = map[string][]Pair{"r0001": {{From: "r0001", To: "r0000", RTTMs: 3, Samples: 5}}}
	ps, _ := c.Pairs(context.Background())
	if len(ps) != 1 || ps[0].Estimated || ps[0].RTTMs != 3 {
		t.Fatalf("%d relays: want the one measured pair, got %d pairs (first %+v)", n, len(ps), ps[0])
	}
}

// TestConsulMeasuredPairs: MeasuredPairs gives what Pairs gives without
// the estimates, in a fleet small enough for them.
func TestConsulMeasuredPairs(t *testing.T) {
	c, err := newConsul(ConsulOptions{Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c.relays = []consulRelay{{Relay: Relay{Name: "a"}, node: "n1"}, {Relay: Relay{Name: "b"}, node: "n2"}}
	c.coords = map[string]*coordinate.Coordinate{"n1": {Vec: []float64{0, 0}}, "n2": {Vec: []float64{0.03, 0.04}}}
	c.measured = map[string][]Pair{"b": {{From: "b", To: "a", RTTMs: 49, Samples: 5}}}
	all, _ := c.Pairs(context.Background())
	measured, _ := MeasuredPairs(context.Background(), c)
	if len(all) != 2 || len(measured) != 1 || measured[0] != all[1] {
		t.Fatalf("pairs %+v, measured %+v", all, measured)
	}
}

// RefreshBeforePairs returns once the relays and their coordinates are
// read, with the measurements' read still held up by the agent; Pairs
// waits for that read, and gives its pairs once it ends.
func TestConsulRefreshBeforePairs(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	upstream, err := url.Parse("http://" + agent.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/kv/"+ConsulKVPrefix) {
			<-release // the measurements' read: held until the test lets it go
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	writer, err := newConsul(ConsulOptions{Addr: agent.HTTP, Self: &SelfRegistration{Name: "a", Relay: "127.0.0.1:7000"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := writer.Register(ctx); err != nil {
		t.Fatal(err)
	}
	kvPut(t, writer, ConsulKVPrefix+"a", []Pair{{From: "a", To: "b", RTTMs: 12.5, Samples: 3, UpdatedAt: time.Now()}})
	reader, err := newConsul(ConsulOptions{Addr: front.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.RefreshBeforePairs(ctx); err != nil {
		t.Fatalf("RefreshBeforePairs with the measurements' read held: %v", err)
	}
	if relays, _ := reader.Relays(ctx); len(relays) != 1 || relays[0].Name != "a" {
		t.Fatalf("relays before the measurements: %+v", relays)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if pairs, err := reader.MeasuredPairs(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("MeasuredPairs while the read is held: %+v, %v; want it to wait", pairs, err)
	}
	close(release)
	if pairs, err := reader.Pairs(ctx); err != nil || len(pairs) != 1 || pairs[0].RTTMs != 12.5 {
		t.Fatalf("Pairs once the read ends: %+v, %v", pairs, err)
	}
}

// fetchInstances (the catalogue and the failing checks) reads the relays
// as fetchServices (every instance with its checks) does: a relay is
// healthy when its node's checks and its own pass, whatever another
// service's checks on its node say.
func TestConsulInstancesReadAsTheHealthRead(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	c, err := newConsul(ConsulOptions{Addr: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, r := range []struct {
		name, nodeCheck, relayCheck, otherCheck string // "": none
	}{
		{"healthy", api.HealthPassing, api.HealthPassing, api.HealthCritical},
		{"relay-critical", api.HealthPassing, api.HealthCritical, ""},
		{"node-critical", api.HealthCritical, api.HealthPassing, ""},
		{"relay-warning", api.HealthPassing, api.HealthWarning, ""},
		{"no-checks", "", "", ""},
	} {
		node := "host-" + r.name
		id := ConsulServiceIDPrefix + r.name
		var checks api.HealthChecks
		add := func(status, checkID, serviceID string) {
			if status != "" {
				checks = append(checks, &api.HealthCheck{Node: node, CheckID: checkID, Name: checkID, Status: status, ServiceID: serviceID})
			}
		}
		add(r.nodeCheck, "node-alive", "")
		add(r.relayCheck, "relaymesh-"+r.name+"-healthz", id)
		reg := &api.CatalogRegistration{Node: node, Address: fmt.Sprintf("10.0.0.%d", i+1),
			Service: &api.AgentService{ID: id, Service: ConsulService, Port: 1080, Tags: []string{"region:r"},
				Meta: map[string]string{"name": r.name, "region": "r", "relay": ":7000", "admin": ":9090"}},
			Checks: checks}
		if _, err := c.client.Catalog().Register(reg, nil); err != nil {
			t.Fatal(err)
		}
		if r.otherCheck != "" { // another service on the relay's node, failing
			checks = nil
			add(r.otherCheck, "web-check", "web-"+r.name)
			other := &api.CatalogRegistration{Node: node, Address: reg.Address, Service: &api.AgentService{ID: "web-" + r.name, Service: "web", Port: 80}, Checks: checks}
			if _, err := c.client.Catalog().Register(other, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := func() *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
	if _, err := c.fetchServices(ctx, q()); err != nil {
		t.Fatal(err)
	}
	want, _ := c.Relays(ctx)
	c.relays = nil
	if err := c.fetchInstances(ctx, q); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Relays(ctx)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("from the catalogue and the failing checks:\n%+v\nfrom the health read:\n%+v", got, want)
	}
	var healthy []string
	for _, r := range got {
		if r.Healthy {
			healthy = append(healthy, r.Name)
		}
	}
	if !slices.Equal(healthy, []string{"healthy", "no-checks"}) {
		t.Fatalf("healthy: %v, want healthy and no-checks", healthy)
	}
}
