// Package coord decides which peers a relay probes, and estimates the RTTs
// it does not probe, from network coordinates.
//
// Probing every peer costs each relay a handshake per peer per interval:
// N-1 probes, growing with the fleet. Here each relay has a fixed budget,
// Config.ProbesPerMinute handshakes a minute (default 12, one every 5 s),
// whatever the fleet size, spent on a small probe set:
//
//   - the Nearest peers (default 12), by RTT measured or else estimated,
//     PerRing (default 2) from each ring of RTT before the rest (below 4 ms,
//     4–8 ms, 8–16 ms, ...): the pairs a relay chain is most likely to
//     use, measured exactly, its city-mates and the next cities' relays,
//     and with twelve some six rings, out to 128 ms, so far peers too;
//   - Random peers (default 1), redrawn every RotateEvery (5 min), so that
//     new near ones are found;
//   - peers a plan asked for with Node.Want, for a while.
//
// Vivaldi's authors (Dabek et al. 2004) found that a node needs near as well
// as far neighbours for its coordinate to be right at every scale; Serf and
// Consul use the same system. Every answered probe moves the relay's
// coordinate (github.com/hashicorp/serf/coordinate: Vivaldi in 8 dimensions
// plus a height and an adjustment, as Consul runs it). Any two relays'
// coordinates then estimate the RTT between them (EstimateMs), and an
// endpoint that runs no Vivaldi (a client, a destination) is placed by Fit
// from RTTs to a few Landmarks.
//
// A peer measured at ShortcutRatio of its estimate or less is a shortcut:
// coordinates obey the triangle inequality and the internet does not, so
// the direct route between two hubs can be far faster than any embedding
// allows, and those are the long hops the best chains take. A relay may
// keep publishing its Shortcuts lowest-ratio shortcuts (none by default)
// for ShortcutMaxAge after their last probe, long after they left the
// probe set, so that planners can use them (pkg/shortlist ranks candidates
// by every published pair).
//
// Cost per relay per minute: ProbesPerMinute handshakes, O(len(fleet))
// work per probe to pick it (NextTarget), O(Window) per result (Observe);
// memory O(Nearest + Random + Shortcuts + peers probed within MaxAge).
// What a relay publishes (Measured) is at most Nearest + Random +
// Shortcuts + wanted entries.
//
// The package does no I/O and reads no clock: every function that needs the
// time takes now, and randomness comes from a *rand.Rand the caller seeds,
// so a simulation of thousands of relays is reproducible.
//
// Units: RTTs are float64 milliseconds (names end in Ms); durations are
// time.Duration; serf's Coordinate keeps its own unit, seconds.
package coord
