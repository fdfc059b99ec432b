package registry

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/registry/consultest"
)

// envConsulCosts names the file TestConsulReadCosts writes its table to;
// unset, the test skips (it is a benchmark: make bench-consul-costs).
const envConsulCosts = "RELAYMESH_CONSUL_COSTS"

// TestConsulReadCosts measures, against a real Consul agent, what the
// reads a relay and a planner make cost at 10, 100, 1,000 and 5,000
// relays: the bytes of one answer on the wire (gzip, as Go's client asks
// for it, and plain), headers included. The relays are registered by
// Register, as relayd registers (passing, so each instance carries its
// check's output), and publish a coordinate and 12 pairs each, as in
// probe mode coordinates.
func TestConsulReadCosts(t *testing.T) {
	out := os.Getenv(envConsulCosts)
	if out == "" {
		t.Skipf("a benchmark: set $%s to the file to write its table to (make bench-consul-costs)", envConsulCosts)
	}
	agent := consultest.Start(t, "../../bin/consul")
	healthz := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) }))
	defer healthz.Close()
	c, err := newConsul(ConsulOptions{Addr: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	name := func(i int) string { return fmt.Sprintf("r%04d", i) }
	now := time.Now().UTC()
	host := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256) }
	publish := func(i, n int) {
		cc := coordinate.NewCoordinate(coordinate.DefaultConfig())
		for d := range cc.Vec {
			cc.Vec[d] = rnd.NormFloat64() * 0.05
		}
		cc.Height, cc.Error, cc.Adjustment = 0.002*rnd.Float64(), 0.1+rnd.Float64(), 0.001*rnd.NormFloat64()
		kvPut(t, c, ConsulCoordinatesPrefix+name(i), Coordinate{Relay: name(i), Coord: cc, UpdatedAt: now})
		pairs := make([]Pair, 12)
		for k := range pairs {
			ms := 5 + 200*rnd.Float64()
			pairs[k] = Pair{From: name(i), To: name(rnd.IntN(n)), RTTMs: ms, MinMs: ms * 0.97, P90Ms: ms * 1.1, Samples: 12, UpdatedAt: now}
		}
		kvPut(t, c, ConsulKVPrefix+name(i), pairs)
	}
	// r0000 registers with the agent as relayd does, started critical:
	// its first passing status reaches the catalogue with the check's
	// output at once (an agent syncs an output alone only every few
	// minutes).
	c.opts.Self = &SelfRegistration{
		Name: name(0), Region: "region-00",
		SOCKS: host(0) + ":1080", HTTP: host(0) + ":8080", Admin: host(0) + ":9090", Relay: host(0) + ":7000",
		CheckURL: healthz.URL + "/healthz", CheckInterval: time.Second, StartCritical: true,
	}
	if err := c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	var tmpl *api.ServiceEntry
	eventually(t, time.Minute, "r0000 registered, its check passing", func() bool {
		entries, _, err := c.client.Health().Service(ConsulService, "", true, nil)
		if err != nil || len(entries) != 1 {
			return false
		}
		tmpl = entries[0]
		return true
	})
	publish(0, 10)
	// The others are copies of its catalogue entry, each on a node of its
	// own as in a fleet (a relay host runs its agent): own name, ID and
	// addresses, the agent's Serf check and the relay's HTTP check.
	registered := 1
	var b strings.Builder
	fmt.Fprintf(&b, "| relays | all instances with health (`/v1/health/service/relaymesh`) | all instances without (`/v1/catalog/service/relaymesh`) · the checks not passing (`/v1/health/state/any?filter=`, none here) | every relay's coordinate (`/v1/kv/relaymesh/coordinates/?recurse`) | one relay's coordinate | every relay's pairs (`/v1/kv/relaymesh/measurements/?recurse`) | one instance (`RelayOf`) | a planner's three whole reads (instances, coordinates, pairs) one after another on loopback, gzip / plain | relayctl's read before a plan (`RefreshBeforePairs`, then the relays, coordinates and measured pairs from its cache), plain as it reads an agent on loopback: relays and coordinates in · measured pairs in | the same, gzip | before (`Refresh`, all four reads at once, then the cache), plain |\n")
	fmt.Fprintf(&b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range []int{10, 100, 1000, 5000} {
		for ; registered < n; registered++ {
			i := registered
			node, h := fmt.Sprintf("relay-host-%04d", i), host(i)
			svc := *tmpl.Service
			svc.ID, svc.Address, svc.Tags = ConsulServiceIDPrefix+name(i), h, []string{fmt.Sprintf("region:region-%02d", i%40)}
			svc.Meta = map[string]string{"name": name(i), "region": fmt.Sprintf("region-%02d", i%40),
				"socks": h + ":1080", "http": h + ":8080", "admin": h + ":9090", "relay": h + ":7000"}
			svc.TaggedAddresses, svc.CreateIndex, svc.ModifyIndex = nil, 0, 0
			var checks api.HealthChecks
			for _, chk := range tmpl.Checks {
				cc := *chk
				cc.Node, cc.CreateIndex, cc.ModifyIndex = node, 0, 0
				if cc.ServiceID != "" {
					cc.ServiceID, cc.CheckID = svc.ID, "relaymesh-"+name(i)+"-healthz"
					cc.Definition.HTTP = "http://" + h + ":9090/healthz"
					cc.Output = "HTTP GET http://" + h + ":9090/healthz: 200 OK Output: ok\n"
				}
				checks = append(checks, &cc)
			}
			reg := &api.CatalogRegistration{
				ID:   fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rnd.Uint32(), rnd.Uint32()&0xffff, rnd.Uint32()&0xffff, rnd.Uint32()&0xffff, rnd.Uint64()&0xffffffffffff),
				Node: node, Address: h, Datacenter: tmpl.Node.Datacenter, NodeMeta: tmpl.Node.Meta,
				TaggedAddresses: map[string]string{"lan": h, "lan_ipv4": h, "wan": h, "wan_ipv4": h},
				Service:         &svc, Checks: checks, SkipNodeUpdate: false,
			}
			if _, err := c.client.Catalog().Register(reg, nil); err != nil {
				t.Fatal(err)
			}
			publish(i, n)
		}
		services := readCost(t, agent.HTTP, "/v1/health/service/"+ConsulService)
		catalogue := readCost(t, agent.HTTP, "/v1/catalog/service/"+ConsulService)
		failing := readCost(t, agent.HTTP, "/v1/health/state/any?filter="+url.QueryEscape(failingChecksFilter))
		coords := readCost(t, agent.HTTP, "/v1/kv/"+ConsulCoordinatesPrefix+"?recurse")
		one := readCost(t, agent.HTTP, "/v1/kv/"+ConsulCoordinatesPrefix+name(0))
		pairs := readCost(t, agent.HTTP, "/v1/kv/"+ConsulKVPrefix+"?recurse")
		inst := readCost(t, agent.HTTP, "/v1/health/service/"+ConsulService+"?filter="+url.QueryEscape(relayFilter(name(n-1))))
		// A plan's read as newConsul reads this agent (plain:
		// loopbackAgent) and with gzip as it reads an agent on another
		// host, and the whole read at once as before a plan it was, in
		// turn.
		if !loopbackAgent(agent.HTTP) {
			t.Fatalf("the agent at %s is not on loopback", agent.HTTP)
		}
		var plain, gzipped, whole planReads
		for k := range 27 {
			reads := []*planReads{&plain, &gzipped, &whole}[k%3]
			reads.time(t, ctx, agent.HTTP, k%3 == 1, k%3 == 2)
		}
		fmt.Fprintf(&b, "| %d | %s | %s · %s | %s | %s | %s | %s | %.0f ms / %.0f ms | %s | %s | %.0f ms |\n", n, services, catalogue, failing, coords, one, pairs, inst,
			services.gzipMs+coords.gzipMs+pairs.gzipMs, services.plainMs+coords.plainMs+pairs.plainMs,
			plain, gzipped, median(whole.pairsMs))
		t.Logf("%d relays: services %s, coordinates %s, one coordinate %s, pairs %s, one instance %s", n, services, coords, one, pairs, inst)
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func kvPut(t *testing.T, c *Consul, key string, v any) {
	t.Helper()
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.KV().Put(&api.KVPair{Key: key, Value: body}, nil); err != nil {
		t.Fatal(err)
	}
}

// cost is one answer's size on the wire: status line, headers and body,
// gzipped as Go's client asks, and plain.
type cost struct {
	gzipBytes, plainBytes int
	// The read's time on loopback, request to last byte, median of 5,
	// gzip and plain.
	gzipMs, plainMs float64
}

func (c cost) String() string {
	if c.gzipBytes == c.plainBytes {
		return humanBytes(c.plainBytes)
	}
	return humanBytes(c.gzipBytes) + " / " + humanBytes(c.plainBytes)
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0f KB", float64(n)/1e3)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func readCost(t *testing.T, addr, path string) cost {
	t.Helper()
	var out cost
	var gzipMs, plainMs []float64
	for _, enc := range []string{"gzip", "identity", "gzip", "identity", "gzip", "identity", "gzip", "identity", "gzip", "identity"} {
		start := time.Now()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", enc) // set by hand: the transport then leaves the body as sent
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %v", path, resp.Status, err)
		}
		n := len(resp.Proto) + len(resp.Status) + 3 + len(body) + 2
		for k, vs := range resp.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if enc == "gzip" {
			gzipMs = append(gzipMs, float64(time.Since(start))/1e6)
			out.gzipBytes = n
			if resp.Header.Get("Content-Encoding") == "gzip" {
				if _, err := gzip.NewReader(strings.NewReader(string(body))); err != nil {
					t.Fatalf("%s: gzip: %v", path, err)
				}
			}
		} else {
			plainMs = append(plainMs, float64(time.Since(start))/1e6)
			out.plainBytes = n
		}
	}
	slices.Sort(gzipMs)
	slices.Sort(plainMs)
	out.gzipMs, out.plainMs = gzipMs[len(gzipMs)/2], plainMs[len(plainMs)/2]
	return out
}

// planReads are the times of relayctl's reads before a plan, ms from the
// read's start: until the relays and their coordinates are in
// (RefreshBeforePairs, then Relays and Coordinates from the cache), and
// until the measured pairs are too (MeasuredPairs).
type planReads struct{ relaysMs, pairsMs []float64 }

// time makes one read on fresh connections, as relayctl's one read,
// closed after it (the agent limits a client's connections): a plan's, or
// with whole the read before it (wholeRead).
func (p *planReads) time(t *testing.T, ctx context.Context, addr string, gzipped, whole bool) {
	t.Helper()
	reader, err := newConsul(ConsulOptions{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.Transport.DisableCompression = !gzipped
	if reader.client, err = api.NewClient(cfg); err != nil {
		t.Fatal(err)
	}
	defer cfg.Transport.CloseIdleConnections()
	start := time.Now()
	if whole {
		err = reader.wholeRead(ctx)
	} else {
		err = reader.RefreshBeforePairs(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, _ = reader.Relays(ctx)
	_, _ = reader.Coordinates(ctx)
	p.relaysMs = append(p.relaysMs, float64(time.Since(start))/1e6)
	if _, err := reader.MeasuredPairs(ctx); err != nil {
		t.Fatal(err)
	}
	p.pairsMs = append(p.pairsMs, float64(time.Since(start))/1e6)
}

// String is the medians, "relays · pairs ms".
func (p planReads) String() string {
	return fmt.Sprintf("%.0f · %.0f ms", median(p.relaysMs), median(p.pairsMs))
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// wholeRead is relayctl's read before a plan as it was until
// RefreshBeforePairs: every instance with its checks, the pairs, the
// relays' and the nodes' coordinates, all at once, the plan waiting for
// all four.
func (c *Consul) wholeRead(ctx context.Context) error {
	q := func() *api.QueryOptions { return (&api.QueryOptions{}).WithContext(ctx) }
	var wg sync.WaitGroup
	var servicesErr, kvErr error
	wg.Go(func() { _, servicesErr = c.fetchServices(ctx, q()) })
	wg.Go(func() { _, kvErr = c.fetchKV(ctx, q()) })
	wg.Go(func() { _, _ = c.fetchCoords(ctx, q()) })
	wg.Go(func() { _, _ = c.fetchRelayCoords(ctx, q()) })
	wg.Wait()
	return cmp.Or(servicesErr, kvErr)
}
