// Package adminapi is the contract of a relay's admin API: its paths, what
// its JSON answers hold (Info, the probe answers, the tunnel records), and
// Client, the one way to reach it. relayd serves these types and its
// clients (the survey, relayctl, the fleet registry, other relays) decode
// them, so a field is declared once. /v1/measurements' answer is
// registry.Measurements (the registry's own pairs and coordinates), and
// /v1/capacity's packettrain.Answer.
package adminapi

// The admin API's paths. Every one but PathHealthz needs the admin token
// (or a fleet member's client certificate).
const (
	PathHealthz = "/healthz" // "ok", open to anyone (load balancers, Docker)
	PathMetrics = "/metrics" // Prometheus
	// PathInfo answers Info: identity, chain, socket limits, and what the
	// relay learnt of its path to the asker.
	PathInfo = "/v1/info"
	// PathMeasurements answers the relay's measurements of its peers
	// (?scope=local, fleet or coordinates).
	PathMeasurements = "/v1/measurements"
	// PathProbe answers ProbeAnswer: the relay's RTT to each ?target=.
	PathProbe = "/v1/probe"
	// PathTunnels answers Tunnels: the last ended tunnels' socket
	// statistics.
	PathTunnels = "/v1/tunnels"
	// PathCapacity answers the relay's send capacity towards ?to=
	// (packettrain.Answer); its two sub-paths are between relays.
	PathCapacity         = "/v1/capacity"
	PathCapacityExpect   = "/v1/capacity/expect"
	PathCapacityArrivals = "/v1/capacity/arrivals"
	// PathTraffic is the prefix of the benchmark source and sink
	// (GET PathTraffic+"/bytes/N", POST PathTraffic+"/upload").
	PathTraffic = "/v1/traffic"
)
