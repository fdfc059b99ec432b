package fleetsim

// registryReads are relayctl's whole reads of a Consul registry before a
// plan (the instances, the pairs and the coordinates, at once, plain as
// it reads an agent on loopback), by fleet size, ms: measured against one
// Consul agent on the same host (docs/defaults.md#what-a-registry-read-costs).
// Sorted by relays.
var registryReads = []struct {
	relays int
	ms     float64
}{{10, 3}, {100, 15}, {1000, 111}, {5000, 499}}

// RegistryReadMs is what a planner's read of the registry costs before a
// plan at this many relays, ms: registryReads, linear between its fleet
// sizes and beyond them along the nearest segment, at least 0. It is a
// floor for a real fleet: the agent on the planner's host read from its
// servers over loopback, not over a WAN.
func RegistryReadMs(relays int) float64 {
	k := 1
	for k < len(registryReads)-1 && relays > registryReads[k].relays {
		k++
	}
	a, b := registryReads[k-1], registryReads[k]
	slope := (b.ms - a.ms) / float64(b.relays-a.relays)
	return max(0, a.ms+slope*float64(relays-a.relays))
}
