package coord

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/serf/coordinate"
)

// Defaults of Config, used for its zero fields.
const (
	DefaultProbesPerMinute = 12
	// DefaultNearest and DefaultRandom: with the nearest two from each
	// ring of RTT first, twelve nearest reach some six rings, out to
	// 128 ms, and fit the coordinates to far peers better than random
	// ones do, on the same probes a minute. One random peer still finds
	// new near ones (docs/defaults.md#nearest-and-random-peers).
	DefaultNearest        = 12
	DefaultRandom         = 1
	DefaultRotateEvery    = 5 * time.Minute
	DefaultWindow         = 8
	DefaultMaxAge         = 10 * time.Minute
	DefaultShortcutMaxAge = time.Hour
	// DefaultPerRing: two nearest peers from each ring of RTT before the
	// rest, so that a relay in a city of many relays measures the next
	// cities' relays too, not its city-mates alone: its coordinate fits
	// better, and plans follow (docs/defaults.md#rings-of-rtt).
	DefaultPerRing = 2
)

// FleetViewEvery is how often a relay needs to read every relay's
// coordinate, for a fleet of relays: 0.6 s a relay, from 10 s to 10
// minutes. It reads them to choose whom to probe (its nearest peers by
// RTT, measured or estimated, NextTarget); each read carries every relay's,
// so reading them often costs megabytes a minute a relay in a large fleet,
// the registry's load growing with the square of the fleet. The coordinate
// of the peer it probes, which moves its own (Observe), it reads alone and
// fresh. Read this seldom, the fleet simulator measured the coordinates
// and the plans better, not worse, than with a view read every 30 s
// (docs/defaults.md#the-fleet-view).
func FleetViewEvery(relays int) time.Duration {
	return min(max(time.Duration(relays)*600*time.Millisecond, 10*time.Second), 10*time.Minute)
}

// ShortcutRatio: a peer whose measured RTT is at most this share of the
// coordinates' estimate is a shortcut (Config.Shortcuts). Coordinates obey
// the triangle inequality and the internet does not: a direct route
// between two hubs can be far faster than the embedding allows, and those
// are the long hops the best chains take.
const ShortcutRatio = 0.8

// Config sets one relay's probe budget and how it is spent. A zero field
// takes its default; a negative one is an error.
type Config struct {
	// ProbesPerMinute is the relay's probe budget, whatever the fleet
	// size: one probe (a TCP handshake) every minute/ProbesPerMinute.
	ProbesPerMinute int
	// Nearest is how many neighbours are kept probed: the peers with the
	// lowest RTT known (measured, else estimated from coordinates).
	Nearest int
	// Random is how many random peers are probed besides, redrawn every
	// RotateEvery, so that new near peers are found and the coordinate
	// stays right at a distance too.
	Random int
	// RotateEvery is how often the random peers are redrawn.
	RotateEvery time.Duration
	// Window is how many probe results (answered or failed) are kept per
	// measured peer; Measured publishes their median.
	Window int
	// MaxAge is how long a probe result counts: older ones are dropped, and
	// a peer with none left is forgotten.
	MaxAge time.Duration
	// Shortcuts is how many peers are kept and published, after they left
	// the probe set, because their measured RTT was at most ShortcutRatio
	// of the coordinates' estimate: the pairs a planner cannot estimate.
	// The lowest ratios are kept. 0 (the default): none. In the fleet
	// simulator they made no measurable difference to plan quality, for
	// more bytes a minute and up to Shortcuts more pairs in every relay's
	// publication (docs/defaults.md#shortcuts).
	Shortcuts int
	// ShortcutMaxAge is how long a shortcut is kept after its last probe.
	ShortcutMaxAge time.Duration
	// PerRing is how many of the Nearest peers each ring of RTT gives
	// before the rest: the rings are below 4 ms, 4–8 ms, 8–16 ms and so
	// on, doubling. The Nearest are each ring's PerRing lowest RTTs, the
	// lowest first, then the next lowest of every ring, so a fleet in
	// few rings (one data centre) still fills them. In a fleet of many
	// relays a city the Nearest peers by RTT alone are the relay's
	// city-mates, a few ms away: its coordinate then learns nothing of
	// the next cities, and it publishes no pair between cities, the
	// segments a chain is made of. 0 = DefaultPerRing; negative = no
	// rings, the Nearest lowest RTTs.
	PerRing int
	// Vivaldi tunes the coordinate (nil: coordinate.DefaultConfig(), as
	// Consul and Serf use it: 8 dimensions plus a height).
	Vivaldi *coordinate.Config
}

// WithDefaults returns c with its zero fields set to the defaults, or an
// error naming the first field that is wrong. The Vivaldi config is copied,
// so the caller may change its own afterwards.
func (c Config) WithDefaults() (Config, error) {
	for _, f := range []struct {
		name string
		v    int
		def  int
		dst  *int
	}{
		{"ProbesPerMinute", c.ProbesPerMinute, DefaultProbesPerMinute, &c.ProbesPerMinute},
		{"Nearest", c.Nearest, DefaultNearest, &c.Nearest},
		{"Random", c.Random, DefaultRandom, &c.Random},
		{"Window", c.Window, DefaultWindow, &c.Window},
	} {
		switch {
		case f.v < 0:
			return Config{}, fmt.Errorf("coord: %s is %d, must be > 0 (0 for the default %d)", f.name, f.v, f.def)
		case f.v == 0:
			*f.dst = f.def
		}
	}
	if c.Shortcuts < 0 {
		return Config{}, fmt.Errorf("coord: Shortcuts is %d, must be >= 0 (0: none)", c.Shortcuts)
	}
	switch {
	case c.PerRing == 0:
		c.PerRing = DefaultPerRing
	case c.PerRing < 0:
		c.PerRing = -1
	}
	for _, f := range []struct {
		name string
		v    time.Duration
		def  time.Duration
		dst  *time.Duration
	}{
		{"RotateEvery", c.RotateEvery, DefaultRotateEvery, &c.RotateEvery},
		{"MaxAge", c.MaxAge, DefaultMaxAge, &c.MaxAge},
		{"ShortcutMaxAge", c.ShortcutMaxAge, DefaultShortcutMaxAge, &c.ShortcutMaxAge},
	} {
		switch {
		case f.v < 0:
			return Config{}, fmt.Errorf("coord: %s is %v, must be > 0 (0 for the default %v)", f.name, f.v, f.def)
		case f.v == 0:
			*f.dst = f.def
		}
	}
	if c.ProbesPerMinute > int(time.Minute/time.Millisecond) {
		return Config{}, fmt.Errorf("coord: ProbesPerMinute is %d, more than one probe a millisecond", c.ProbesPerMinute)
	}
	// Every peer of a full probe set is probed once per cycle; results
	// that expire before the next cycle could never give a median.
	cycle := time.Minute / time.Duration(c.ProbesPerMinute) * time.Duration(c.Nearest+c.Random)
	if c.MaxAge < cycle {
		return Config{}, fmt.Errorf("coord: MaxAge %v is shorter than one cycle through the probe set (%d peers at %d a minute: %v)",
			c.MaxAge, c.Nearest+c.Random, c.ProbesPerMinute, cycle)
	}
	if c.Vivaldi == nil {
		c.Vivaldi = coordinate.DefaultConfig()
	} else {
		v := *c.Vivaldi
		c.Vivaldi = &v
	}
	v := c.Vivaldi
	switch {
	case v.Dimensionality == 0:
		return Config{}, fmt.Errorf("coord: Vivaldi.Dimensionality is 0, must be > 0")
	case !(v.VivaldiErrorMax > 0) || math.IsInf(v.VivaldiErrorMax, 0):
		return Config{}, fmt.Errorf("coord: Vivaldi.VivaldiErrorMax is %v, must be > 0", v.VivaldiErrorMax)
	case !(v.VivaldiCE > 0 && v.VivaldiCE <= 1):
		return Config{}, fmt.Errorf("coord: Vivaldi.VivaldiCE is %v, must be in (0, 1]", v.VivaldiCE)
	case !(v.VivaldiCC > 0 && v.VivaldiCC <= 1):
		return Config{}, fmt.Errorf("coord: Vivaldi.VivaldiCC is %v, must be in (0, 1]", v.VivaldiCC)
	case !(v.HeightMin >= 0) || math.IsInf(v.HeightMin, 0):
		// A negative height could make distances negative.
		return Config{}, fmt.Errorf("coord: Vivaldi.HeightMin is %v, must be >= 0", v.HeightMin)
	case v.LatencyFilterSize == 0:
		// Serf's latency filter would then index an empty window: a panic
		// on the first update.
		return Config{}, fmt.Errorf("coord: Vivaldi.LatencyFilterSize is 0, must be > 0")
	case !(v.GravityRho > 0) || math.IsInf(v.GravityRho, 0):
		// Serf divides by it: at 0 every update yields an invalid
		// coordinate, which Serf resets to the origin.
		return Config{}, fmt.Errorf("coord: Vivaldi.GravityRho is %v, must be > 0", v.GravityRho)
	}
	return c, nil
}

// Interval is the time between two probes: a minute / ProbesPerMinute
// (of c after WithDefaults).
func (c Config) Interval() time.Duration {
	if c.ProbesPerMinute <= 0 {
		return time.Minute / DefaultProbesPerMinute
	}
	return time.Minute / time.Duration(c.ProbesPerMinute)
}
