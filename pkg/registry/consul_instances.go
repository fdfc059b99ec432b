package registry

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/consul/api"
)

// failingChecksFilter selects, of every check in the datacenter, those not
// passing of the relaymesh service and of the nodes (a node's own checks
// have no service).
var failingChecksFilter = fmt.Sprintf(`Status != %q and (ServiceName == %q or ServiceID == "")`, api.HealthPassing, ConsulService)

// fetchInstances is fetchServices for a one-shot read: the instances from
// the catalogue, without their checks, and beside them the checks that
// are not passing, of the relaymesh service and of the nodes. A relay is
// healthy when none of its own or its node's is among them: when all of
// them pass, as fetchServices judges. In a healthy fleet the failing
// checks are a few bytes, and the instances without their checks are
// less than half of the health read (docs/registry.md, "Traffic cost").
func (c *Consul) fetchInstances(ctx context.Context, q func() *api.QueryOptions) error {
	var (
		services         []*api.CatalogService
		failing          api.HealthChecks
		svcErr, checkErr error
		wg               sync.WaitGroup
	)
	wg.Go(func() {
		services, _, svcErr = c.client.Catalog().Service(ConsulService, "", q())
	})
	wg.Go(func() {
		fq := q()
		fq.Filter = failingChecksFilter
		failing, _, checkErr = c.client.Health().State(api.HealthAny, fq)
	})
	wg.Wait()
	if svcErr != nil {
		return fmt.Errorf("reading service %s: %w", ConsulService, svcErr)
	}
	if checkErr != nil {
		return fmt.Errorf("reading the failing checks: %w", checkErr)
	}
	c.setRelays(ctx, relaysFrom(entriesOf(services, failing)))
	return nil
}

// entriesOf is the service entries fetchServices would read: each
// instance with its node's failing checks and its own (the passing ones
// left out change no relay's health).
func entriesOf(services []*api.CatalogService, failing api.HealthChecks) []*api.ServiceEntry {
	type owner struct{ node, serviceID string }
	byOwner := map[owner]api.HealthChecks{}
	for _, chk := range failing {
		if chk != nil {
			k := owner{chk.Node, chk.ServiceID}
			byOwner[k] = append(byOwner[k], chk)
		}
	}
	entries := make([]*api.ServiceEntry, 0, len(services))
	for _, s := range services {
		if s == nil {
			continue
		}
		checks := append(append(api.HealthChecks{}, byOwner[owner{s.Node, ""}]...), byOwner[owner{s.Node, s.ServiceID}]...)
		entries = append(entries, &api.ServiceEntry{
			Node: &api.Node{Node: s.Node, Address: s.Address},
			Service: &api.AgentService{ID: s.ServiceID, Service: s.ServiceName, Tags: s.ServiceTags, Meta: s.ServiceMeta,
				Address: s.ServiceAddress, Port: s.ServicePort},
			Checks: checks,
		})
	}
	return entries
}
