package lab

import (
	"fmt"
	"slices"
	"strings"

	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// Check is how the lab's self-check judges what ran in it: by the effect
// the emulator's timing error can have on the figures measured
// (wanemu.Budget, the default), or by the absolute bounds (Strict: what
// `lab doctor` and benchmarks of the engine itself use).
type Check struct {
	Strict bool          `json:"strict"`
	Budget wanemu.Budget `json:"budget"`
}

// DefaultCheck judges by effect with the default budget.
var DefaultCheck = Check{Budget: wanemu.DefaultBudget}

func (c Check) String() string {
	if c.Strict {
		return fmt.Sprintf("strict: under 1 %% of a direction's packets over %.1f ms late, none over %.0f ms",
			float64(wanemu.MaxP99LatenessNs)/1e6, float64(wanemu.MaxLatenessNs)/1e6)
	}
	return "by effect: " + c.Budget.String()
}

// Verdict is the self-check of a lab so far: every link's effect on the
// figures, and the worst link.
type Verdict struct {
	Check    Check         `json:"check"`
	Valid    bool          `json:"valid"`
	Problems []string      `json:"problems,omitempty"`
	Links    []LinkVerdict `json:"links"`
	// Worst indexes the link whose error moves a figure most (-1: none).
	Worst int `json:"worst"`
}

// LinkVerdict is one link's part of a Verdict.
type LinkVerdict struct {
	Between [2]string         `json:"between"`
	Effect  wanemu.LinkEffect `json:"effect"`
	Problem string            `json:"problem,omitempty"`
	// Plumbing: a link the lab added to its own Consul agent (0.2 ms,
	// registry traffic only). No measured figure crosses it, so its timing
	// is reported but not judged; its drops are, as every link's.
	Plumbing bool `json:"plumbing,omitempty"`
}

// Verdict judges every link with the lab's Check.
func (l *Lab) Verdict() Verdict { return l.VerdictBy(l.opts.Check) }

// VerdictBy judges every link with c.
func (l *Lab) VerdictBy(c Check) Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.verdictLocked(c)
}

func (l *Lab) verdictLocked(c Check) Verdict {
	v := Verdict{Check: c, Valid: true, Worst: -1}
	for _, rl := range l.links {
		lv := LinkVerdict{Between: rl.cfg.Between, Plumbing: slices.Contains(rl.cfg.Between[:], ConsulNode)}
		e, err := rl.link.CheckEffect(v.Check.Budget)
		switch {
		case lv.Plumbing:
			err = rl.link.CheckDrops()
		case v.Check.Strict:
			err = rl.link.SelfCheck()
		}
		lv.Effect = e
		if err != nil {
			lv.Problem = err.Error()
			v.Valid = false
			v.Problems = append(v.Problems, fmt.Sprintf("link %s-%s: %v", rl.cfg.Between[0], rl.cfg.Between[1], err))
		}
		if !lv.Plumbing && (v.Worst < 0 || e.Moves > v.Links[v.Worst].Effect.Moves) {
			v.Worst = len(v.Links)
		}
		v.Links = append(v.Links, lv)
	}
	return v
}

// Summary is the verdict in a few lines for a person: the check used, the
// worst link against it, and every problem.
func (v Verdict) Summary() string {
	var b strings.Builder
	word := "valid"
	if !v.Valid {
		word = "FAILED, this run's results are invalid"
	}
	fmt.Fprintf(&b, "self-check %s (%s)", word, v.Check)
	if v.Worst >= 0 {
		w := v.Links[v.Worst]
		fmt.Fprintf(&b, "\n  worst link %s-%s: %s", w.Between[0], w.Between[1], w.Effect)
	}
	for _, p := range v.Problems {
		fmt.Fprintf(&b, "\n  %s", strings.ReplaceAll(p, "\n", "\n    "))
	}
	return b.String()
}
