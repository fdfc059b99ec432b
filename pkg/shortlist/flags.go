package shortlist

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Defaults is the Config with every field a flag sets at its default: what
// relayctl plan and relayctl sim start from.
func Defaults() Config {
	return Config{
		Landmarks: DefaultLandmarks, Neighbours: DefaultNeighbours, NeckPlans: DefaultNeckPlans, Rounds: DefaultRounds,
		ExplorePerRound: DefaultExplorePerRound, Optimism: DefaultOptimism, PerSite: DefaultPerSite,
		SiteRadius: DefaultSiteRadius, InFlight: DefaultInFlight,
		FirstQuorum: DefaultFirstQuorum, Quorum: DefaultQuorum, LaterQuorum: DefaultLaterQuorum,
		Caution: DefaultCaution, YoungFor: DefaultYoungFor, YoungOptimism: DefaultYoungOptimism,
		SearchBudget: DefaultSearchBudget, Handshakes: DefaultHandshakes,
		VerifyHandshakes: DefaultVerifyHandshakes, VerifyPasses: DefaultVerifyPasses, VerifyMargin: DefaultVerifyMargin,
	}
}

// FlagPrefixPlan is what relayctl plan (and connect, bench, pac) put before
// a field's flag name: --shortlist-rounds. The simulator puts nothing:
// --rounds.
const FlagPrefixPlan = "shortlist-"

// flagField is one Config field as a command-line flag. Its help may name
// another field's flag as {name}, which AddFlags writes with the prefix.
type flagField struct {
	name string
	// plan: relayctl plan has the flag; the rest tune the search, and
	// only the simulator, which measures what they do, has them.
	plan  bool
	help  string
	int   func(*Config) *int
	float func(*Config) *float64
	dur   func(*Config) *time.Duration
}

// flagFields are the Config's flags, in the order --help lists them.
var flagFields = []flagField{
	{name: "landmarks", plan: true, int: func(c *Config) *int { return &c.Landmarks },
		help: "relays spread over the fleet that place this host and the destination (two probes each)"},
	{name: "first-cut", plan: true, int: func(c *Config) *int { return &c.FirstCut },
		help: "relays whose ends are measured first (0: " + grownWithTheFleet(DefaultFirstCut, DefaultFirstCutShare) + "; -1: the candidates only)"},
	{name: "candidates", plan: true, int: func(c *Config) *int { return &c.Candidates },
		help: "relays the planner sees, the first cut's best (0: " + grownWithTheFleet(DefaultCandidates, DefaultCandidatesShare) + ")"},
	{name: "neighbours", int: func(c *Config) *int { return &c.Neighbours },
		help: "relays near each end of a ranked plan's longest segment tried in its place (-1: none)"},
	{name: "neck-plans", int: func(c *Config) *int { return &c.NeckPlans },
		help: "ranked plans, the best first, whose bottlenecks' neighbourhoods a round searches (1: the best)"},
	{name: "rounds", plan: true, int: func(c *Config) *int { return &c.Rounds },
		help: "most rounds of targeted probes after the ends are measured (-1: none, plan on estimates)"},
	{name: "explore", int: func(c *Config) *int { return &c.ExplorePerRound },
		help: "at most this many probes a planning round"},
	{name: "optimism", float: func(c *Config) *float64 { return &c.Optimism },
		help: "rounds also probe pairs whose estimate times this beats the best plan (1: trust estimates)"},
	{name: "young-for", dur: func(c *Config) *time.Duration { return &c.YoungFor },
		help: "a relay whose coordinate is younger than this takes {young-optimism} (negative: none is young)"},
	{name: "young-optimism", float: func(c *Config) *float64 { return &c.YoungOptimism },
		help: "{optimism} for a young relay's pairs"},
	{name: "per-site", int: func(c *Config) *int { return &c.PerSite },
		help: "relays of one site the first cut and the candidates take before the rest (-1: no limit)"},
	{name: "site-radius", float: func(c *Config) *float64 { return &c.SiteRadius },
		help: "a site's radius, as a share of the direct path's RTT"},
	{name: "in-flight", plan: true, int: func(c *Config) *int { return &c.InFlight },
		help: "most requests in flight at once (fewer: gentler on a small NAT, slower plans)"},
	{name: "first-quorum", plan: true, float: func(c *Config) *float64 { return &c.FirstQuorum },
		help: "{quorum} for the first round, the landmarks' (1: it waits for its last)"},
	{name: "quorum", plan: true, float: func(c *Config) *float64 { return &c.Quorum },
		help: "the second round (the first cut's ends) ends once this share has answered (1: all)"},
	{name: "later-quorum", plan: true, float: func(c *Config) *float64 { return &c.LaterQuorum },
		help: "{quorum} for the rounds after the first two (1: each waits for its last)"},
	{name: "settle", plan: true, float: func(c *Config) *float64 { return &c.Settle },
		help: "end the rounds once a measured chain is within this share of the best estimated plan (0: never)"},
	{name: "deadline", plan: true, dur: func(c *Config) *time.Duration { return &c.Deadline },
		help: "make no round of targeted probes ending past this much of the plan's time (e.g. 2s; 0: none)"},
	{name: "search-budget", plan: true, dur: func(c *Config) *time.Duration { return &c.SearchBudget },
		help: "make no round of targeted probes ending this long after the first cut's ends (0: none)"},
	{name: "handshakes", int: func(c *Config) *int { return &c.Handshakes },
		help: "TCP handshakes each probe times, their median its RTT"},
	{name: "verify-handshakes", int: func(c *Config) *int { return &c.VerifyHandshakes },
		help: "handshakes of the re-probes of the deciding bottlenecks, their median (1: no re-probes)"},
	{name: "verify-passes", plan: true, int: func(c *Config) *int { return &c.VerifyPasses },
		help: "most passes of re-probes of the answer and its close runners-up"},
	{name: "verify-margin", float: func(c *Config) *float64 { return &c.VerifyMargin },
		help: "re-probe the segments of runners-up predicted within this share of the answer too"},
	{name: "explore-bar", int: func(c *Config) *int { return &c.ExploreBar },
		help: "what a chain through an explored pair must beat: 0 the best measured chain, 1 the best plan"},
	{name: "caution", float: func(c *Config) *float64 { return &c.Caution },
		help: "estimated relay pairs count this many times their estimate in the second ranking (1: as is)"},
}

// grownWithTheFleet says "the larger of least and share of the placed
// relays", short enough for a flag's one line of help.
func grownWithTheFleet(least int, share float64) string {
	return fmt.Sprintf("max(%d, %.0f %% of placed relays)", least, 100*share)
}

// AddFlags registers the Config's flags on fs, into c, each named prefix
// and the field's name, with base's values as their defaults. With
// FlagPrefixPlan only the flags relayctl plan has; with any other prefix
// (the simulator's "") all of them. c starts as base, flags or not.
// Check the result with CheckFlags.
func AddFlags(fs *pflag.FlagSet, prefix string, c *Config, base Config) {
	*c = base
	for _, f := range flagFields {
		if prefix == FlagPrefixPlan && !f.plan {
			continue
		}
		name, help := prefix+f.name, f.helpWith(prefix)
		switch {
		case f.int != nil:
			fs.IntVar(f.int(c), name, *f.int(&base), help)
		case f.float != nil:
			fs.Float64Var(f.float(c), name, *f.float(&base), help)
		default:
			fs.DurationVar(f.dur(c), name, *f.dur(&base), help)
		}
	}
}

// helpWith is f's help with the flags it names written with prefix.
func (f flagField) helpWith(prefix string) string {
	help := f.help
	for _, other := range flagFields {
		help = strings.ReplaceAll(help, "{"+other.name+"}", "--"+prefix+other.name)
	}
	return help
}

// CheckFlags refuses what the flags (AddFlags, with prefix) set that no
// plan can run, naming the flag, and makes a search budget of 0, the
// flag's none, the Config's none.
func (c *Config) CheckFlags(prefix string) error {
	flag := func(name string) string { return "--" + prefix + name }
	switch {
	case c.ExploreBar != ExploreBarMeasured && c.ExploreBar != ExploreBarPlan:
		return fmt.Errorf("%s %d: want 0 (the best chain measured throughout) or 1 (the best plan, estimates and all)", flag("explore-bar"), c.ExploreBar)
	case c.Landmarks < 1:
		return fmt.Errorf("%s %d: want 1 or more (each costs two probes a plan)", flag("landmarks"), c.Landmarks)
	case c.Candidates < 0:
		return fmt.Errorf("%s %d: want 1 or more, or 0 for %s", flag("candidates"), c.Candidates,
			grownWithTheFleet(DefaultCandidates, DefaultCandidatesShare))
	case c.Handshakes < 0:
		return fmt.Errorf("%s %d: want 1 or more (0: %d)", flag("handshakes"), c.Handshakes, DefaultHandshakes)
	case c.Deadline < 0:
		return fmt.Errorf("%s %s: want a duration of 0 (none) or more, e.g. 2s", flag("deadline"), c.Deadline)
	case c.SearchBudget < 0:
		return fmt.Errorf("%s %s: want a duration of 0 (none) or more, e.g. 1.6s", flag("search-budget"), c.SearchBudget)
	case c.SearchBudget == 0:
		c.SearchBudget = -1
	}
	return nil
}
