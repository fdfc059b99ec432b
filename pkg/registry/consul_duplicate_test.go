package registry

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/relaymesh/relaymesh/pkg/registry/consultest"
)

// TestConsulDuplicateNameLowestIDWins runs against a real Consul agent:
// three instances on three nodes claim the relay name "dup" (in their
// meta), registered in no order. Every reader (the watched list, and RelayOf, which reads
// one relay alone) keeps the one with the lowest service ID, whatever
// order they were registered in and Consul answers in, so that relayd,
// relayctl and a survey agree on one address per name; when it goes, the
// next lowest takes its place.
func TestConsulDuplicateNameLowestIDWins(t *testing.T) {
	agent := consultest.Start(t, "../../bin/consul")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := api.NewClient(&api.Config{Address: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	// Each on a node of its own, the nodes' order the reverse of the IDs':
	// Consul answers by node, then by ID.
	register := func(node, id, admin string) {
		t.Helper()
		if _, err := client.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "192.0.2.1",
			Service: &api.AgentService{ID: ConsulServiceIDPrefix + id, Service: ConsulService,
				Meta: map[string]string{"name": "dup", "admin": admin}, Address: "192.0.2.1"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	register("node-1", "z", "192.0.2.30:9090")
	register("node-3", "m", "192.0.2.20:9090")
	register("node-2", "q", "192.0.2.25:9090")

	reader, err := newConsul(ConsulOptions{Addr: agent.HTTP, WatchCoalesce: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go reader.Run(ctx)
	dupAdmin := func() (listed, alone string) {
		rs, _ := reader.Relays(ctx)
		for _, r := range rs {
			if r.Name == "dup" {
				if listed != "" {
					t.Fatalf("the name dup listed twice: %+v", rs)
				}
				listed = r.Admin
			}
		}
		r, ok, err := reader.RelayOf(ctx, "dup")
		if err != nil || !ok {
			t.Fatalf("RelayOf(dup) = %v, %v", ok, err)
		}
		return listed, r.Admin
	}
	eventually(t, 10*time.Second, "the reader lists dup", func() bool { l, _ := dupAdmin(); return l != "" })
	if listed, alone := dupAdmin(); listed != "192.0.2.20:9090" || alone != "192.0.2.20:9090" {
		t.Fatalf("dup at %s (list) and %s (RelayOf), want both at 192.0.2.20:9090, relaymesh-m's (the lowest ID)", listed, alone)
	}
	if _, err := client.Catalog().Deregister(&api.CatalogDeregistration{Node: "node-3", ServiceID: ConsulServiceIDPrefix + "m"}, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the next lowest ID takes dup", func() bool { l, a := dupAdmin(); return l == "192.0.2.25:9090" && a == l })
}
