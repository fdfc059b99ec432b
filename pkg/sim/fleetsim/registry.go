package fleetsim

// registryReads are relayctl's reads of a Consul registry before a plan,
// plain as it reads an agent on loopback, by fleet size, ms from the
// read's start: relaysMs until the relays and their coordinates are in
// (the plan starts then), pairsMs until the measured pairs are too (the
// plan needs them once its first round is in). Measured against one
// Consul agent on the same host
// (docs/defaults.md#what-a-registry-read-costs). Sorted by relays.
var registryReads = []struct {
	relays            int
	relaysMs, pairsMs float64
}{{10, 4, 4}, {100, 13, 22}, {1000, 69, 155}, {5000, 321, 696}}

// RegistryRead is a planner's read of the registry before a plan, ms from
// its start: when the plan can start (RelaysMs) and when the relays'
// measured pairs are in (PairsMs).
type RegistryRead struct {
	RelaysMs, PairsMs float64
}

// RegistryReadAt is the read at this many relays: registryReads, linear
// between its fleet sizes and beyond them along the nearest segment, at
// least 0. It is a floor for a real fleet: the agent on the planner's
// host read from its servers over loopback, not over a WAN.
func RegistryReadAt(relays int) RegistryRead {
	k := 1
	for k < len(registryReads)-1 && relays > registryReads[k].relays {
		k++
	}
	a, b := registryReads[k-1], registryReads[k]
	along := func(am, bm float64) float64 {
		return max(0, am+(bm-am)/float64(b.relays-a.relays)*float64(relays-a.relays))
	}
	return RegistryRead{RelaysMs: along(a.relaysMs, b.relaysMs), PairsMs: along(a.pairsMs, b.pairsMs)}
}

// WithPlanMs is a plan's time with the read before it, ms: the read until
// the plan can start, the plan's wallMs, and whatever of the pairs' read
// its first round (firstRoundMs) did not cover: the plan waits for the
// pairs after that round.
func (r RegistryRead) WithPlanMs(wallMs, firstRoundMs float64) float64 {
	return r.RelaysMs + wallMs + max(0, r.PairsMs-r.RelaysMs-firstRoundMs)
}
