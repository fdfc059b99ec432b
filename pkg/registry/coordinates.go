package registry

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/serf/coordinate"

	"github.com/relaymesh/relaymesh/pkg/coord"
)

// Coordinate is a relay's network coordinate (pkg/coord's Vivaldi, in seconds as serf keeps it) and when it was published.
type Coordinate struct {
	Relay     string                 `json:"relay"`
	Coord     *coordinate.Coordinate `json:"coord"`
	UpdatedAt time.Time              `json:"updated_at"`
	// MeasuredForS is how long, seconds, the relay had been measuring
	// this coordinate when it published it: since its registry (its
	// relayd) started, so a relay that joins or restarts starts afresh.
	// 0: not said. A planner probes a young coordinate's pairs more readily.
	MeasuredForS float64 `json:"measured_for_s,omitempty"`
}

// ownCoordinate is relay's own coordinate c as published now by a registry
// that started at started: a copy, timestamped, and measured since then.
func ownCoordinate(relay string, c *coordinate.Coordinate, started time.Time) *Coordinate {
	now := time.Now()
	return &Coordinate{Relay: relay, Coord: c.Clone(), UpdatedAt: now, MeasuredForS: now.Sub(started).Seconds()}
}

// MeasuredFor is how long the relay had been measuring its coordinate at
// now (MeasuredForS plus the publication's age); 0 when not said.
func (c Coordinate) MeasuredFor(now time.Time) time.Duration {
	if !(c.MeasuredForS > 0 && c.MeasuredForS < 1e9) {
		return 0
	}
	return time.Duration(c.MeasuredForS*float64(time.Second)) + max(c.Age(now), 0)
}

// Coordinates is implemented by the backends that carry relays' own coordinates (both do).
type Coordinates interface {
	PublishCoordinate(ctx context.Context, relay string, c *coordinate.Coordinate) error
	Coordinates(ctx context.Context) ([]Coordinate, error) // newest per relay, sorted by relay
}

// CoordinateReader reads one relay's own coordinate as published now (ok
// false: none usable): for a reader that reads every relay's seldom (the
// Consul backend watching coordinates only, coord.FleetViewEvery) and needs one
// fresh, a relay the coordinate of the peer it just probed.
type CoordinateReader interface {
	CoordinateOf(ctx context.Context, relay string) (c Coordinate, ok bool, err error)
}

// Age is how old the coordinate is at now.
func (c Coordinate) Age(now time.Time) time.Duration { return now.Sub(c.UpdatedAt) }

// ServedCoordinate is a Coordinate with its age at serving time, as
// /v1/measurements carries it: readers rebase UpdatedAt on their own clock,
// as they do pairs.
type ServedCoordinate struct {
	Coordinate
	AgeS float64 `json:"age_s"`
}

// ServeCoordinates turns coordinates into what /v1/measurements carries
// besides the pairs, ages taken at now. Coordinates that are not possible
// (see saneCoord) are left out: JSON has no NaN, and one would make the
// whole answer unencodable.
func ServeCoordinates(coords []Coordinate, now time.Time) []ServedCoordinate {
	out := make([]ServedCoordinate, 0, len(coords))
	for _, c := range coords {
		if c.Relay == "" || !saneCoord(c.Coord) {
			continue
		}
		out = append(out, ServedCoordinate{Coordinate: c, AgeS: c.Age(now).Seconds()})
	}
	return out
}

// maxCoordDims bounds a coordinate's dimension: serf's default is 8, and a
// reader compares coordinates component by component.
const maxCoordDims = 64

// maxCoordSeconds bounds every component of a coordinate, in seconds: an
// RTT above 60 s is not believed either (sane).
const maxCoordSeconds = 60

// saneCoord says whether a coordinate read from elsewhere is possible: a
// dimension of 1 to maxCoordDims, every component finite and within
// ±maxCoordSeconds, a height not negative (it would make distances
// negative), an error (serf's confidence weight) not negative. An error
// below coord.MinPeerError is possible but not believed: a reader raises
// it to that floor (coord.Believed; pkg/coord does on every Vivaldi
// update). A coordinate of another dimension than the reader's own is
// still sane here: pkg/coord refuses to compare it.
func saneCoord(c *coordinate.Coordinate) bool {
	if c == nil || len(c.Vec) == 0 || len(c.Vec) > maxCoordDims || !c.IsValid() {
		return false
	}
	within := func(v float64) bool { return math.Abs(v) <= maxCoordSeconds }
	for _, v := range c.Vec {
		if !within(v) {
			return false
		}
	}
	return within(c.Adjustment) && c.Error >= 0 && within(c.Error) && c.Height >= 0 && within(c.Height)
}

// newestCoords keeps the newest Coordinate per relay as sets are added.
type newestCoords map[string]Coordinate

func (n newestCoords) add(cs ...Coordinate) {
	for _, c := range cs {
		if c.Relay == "" || c.Coord == nil {
			continue
		}
		if old, ok := n[c.Relay]; !ok || c.UpdatedAt.After(old.UpdatedAt) {
			n[c.Relay] = c
		}
	}
}

// sorted returns the coordinates ordered by relay, each a copy: callers
// may keep or change them.
func (n newestCoords) sorted() []Coordinate {
	out := make([]Coordinate, 0, len(n))
	for _, c := range n {
		c.Coord = c.Coord.Clone()
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Coordinate) int { return strings.Compare(a.Relay, b.Relay) })
	return out
}

// MaxEstimatedRelays bounds WithEstimates and Consul's estimates from its
// nodes' coordinates (Consul.Pairs): the matrix grows as the square of the
// fleet (a million pairs at 1,000 relays).
const MaxEstimatedRelays = 1000

// WithEstimates returns pairs and, for every ordered pair of relays in
// coords that pairs lack, the RTT their coordinates predict (Estimated:
// true, as old as the older coordinate): what a fleet in probe mode
// coordinates knows of the pairs no relay probed. A fleet of more than
// MaxEstimatedRelays relays gets none (ok false).
func WithEstimates(pairs []Pair, coords []Coordinate) (out []Pair, ok bool) {
	if len(coords) > MaxEstimatedRelays {
		return pairs, false
	}
	have := make(map[[2]string]bool, len(pairs))
	for _, p := range pairs {
		have[[2]string{p.From, p.To}] = true
	}
	out = slices.Clone(pairs)
	for _, a := range coords {
		for _, b := range coords {
			if a.Relay == b.Relay || have[[2]string{a.Relay, b.Relay}] {
				continue
			}
			ms, ok := coord.EstimateMs(a.Coord, b.Coord)
			if !ok {
				continue
			}
			at := a.UpdatedAt
			if b.UpdatedAt.Before(at) {
				at = b.UpdatedAt
			}
			out = append(out, Pair{From: a.Relay, To: b.Relay, RTTMs: ms, MinMs: ms, P90Ms: ms, Estimated: true, UpdatedAt: at})
		}
	}
	return out, true
}
