package shortlist

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// relayctl plan's flags are the --shortlist- ones it exposes, the
// simulator's all of them, without a prefix; both parse into the Config
// with Defaults for what is not given, and each help names the other flags
// as the command spells them.
func TestFlagsBothWays(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		flags  int
	}{{FlagPrefixPlan, 12}, {"", len(flagFields)}} {
		var c Config
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		AddFlags(fs, tc.prefix, &c, Defaults())
		n := 0
		fs.VisitAll(func(f *pflag.Flag) {
			n++
			if !strings.HasPrefix(f.Name, tc.prefix) || strings.ContainsAny(f.Usage, "{}") {
				t.Errorf("prefix %q: --%s: %s", tc.prefix, f.Name, f.Usage)
			}
			if strings.Contains(f.Usage, "--") && !strings.Contains(f.Usage, "--"+tc.prefix) {
				t.Errorf("prefix %q: --%s names another command's flag: %s", tc.prefix, f.Name, f.Usage)
			}
		})
		if n != tc.flags {
			t.Errorf("prefix %q: %d flags, want %d", tc.prefix, n, tc.flags)
		}
		if err := fs.Parse([]string{"--" + tc.prefix + "rounds", "3", "--" + tc.prefix + "deadline", "2s"}); err != nil {
			t.Fatal(err)
		}
		want := Defaults()
		want.Rounds, want.Deadline = 3, 2*time.Second
		if c != want {
			t.Errorf("prefix %q: parsed %+v, want %+v", tc.prefix, c, want)
		}
	}
}

// CheckFlags names the flag it refuses, as the command spells it, and
// makes a search budget of 0 none.
func TestCheckFlagsNamesTheFlag(t *testing.T) {
	for _, prefix := range []string{FlagPrefixPlan, ""} {
		for name, bad := range map[string]func(*Config){
			"landmarks":     func(c *Config) { c.Landmarks = 0 },
			"candidates":    func(c *Config) { c.Candidates = -1 },
			"deadline":      func(c *Config) { c.Deadline = -time.Second },
			"search-budget": func(c *Config) { c.SearchBudget = -time.Second },
		} {
			c := Defaults()
			bad(&c)
			if err := c.CheckFlags(prefix); err == nil || !strings.Contains(err.Error(), "--"+prefix+name+" ") {
				t.Errorf("%s%s: %v, want an error naming it", prefix, name, err)
			}
		}
		c := Defaults()
		c.SearchBudget = 0
		if err := c.CheckFlags(prefix); err != nil || c.PlanSearchBudget() != 0 {
			t.Errorf("%ssearch-budget 0: %v, plan keeps %s, want none", prefix, err, c.PlanSearchBudget())
		}
		if c := Defaults(); c.CheckFlags(prefix) != nil || c.PlanSearchBudget() != DefaultSearchBudget {
			t.Errorf("%s: the defaults do not pass, or lose the search budget", prefix)
		}
	}
}
