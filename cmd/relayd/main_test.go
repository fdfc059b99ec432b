package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/relaymesh/relaymesh/relay"
)

// Every flag of relayd run reaches the config (or is one of the few
// handled apart), and the overlay names no flag that does not exist: a
// flag left out of the overlay used to be ignored without a word.
func TestEveryFlagApplies(t *testing.T) {
	cmd := runCmd()
	cmd.InitDefaultHelpFlag()
	var f, cfg relay.Config
	overlay := flagOverlay(&f, &cfg)
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if _, ok := overlay[fl.Name]; !ok && !slices.Contains(flagsApart, fl.Name) {
			t.Errorf("--%s is neither in flagOverlay nor in flagsApart: it would be ignored", fl.Name)
		}
	})
	for name := range overlay {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("flagOverlay names --%s, which run does not have", name)
		}
	}
}

// runErr runs relayd with args and returns its error; every case here
// fails validation, before anything listens.
func runErr(t *testing.T, args ...string) error {
	t.Helper()
	root := rootCmd()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	if err == nil {
		t.Fatalf("relayd %v ran", args)
	}
	return err
}

// --probe-mode reaches probe.mode, over the config file's: the error of a
// mode that does not exist names the key and quotes the flag's value, and
// a valid flag replaces a file's bad mode (the run then fails only on what
// else is wrong).
func TestProbeModeFlag(t *testing.T) {
	if err := runErr(t, "run", "--probe-mode", "all"); !strings.Contains(err.Error(), `probe.mode: "all" is not mesh`) {
		t.Fatalf("--probe-mode all: %v, want an error naming probe.mode", err)
	}
	cfg := filepath.Join(t.TempDir(), "relayd.yaml")
	if err := os.WriteFile(cfg, []byte("probe: {mode: ring}\nlog: {level: loud}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runErr(t, "run", "--config", cfg); !strings.Contains(err.Error(), `probe.mode: "ring"`) {
		t.Fatalf("the file's mode: %v", err)
	}
	err := runErr(t, "run", "--config", cfg, "--probe-mode", "coordinates")
	if strings.Contains(err.Error(), "probe.mode") || !strings.Contains(err.Error(), "log.level") {
		t.Fatalf("--probe-mode coordinates over the file's ring: %v, want only the file's log.level refused", err)
	}
	if def := runCmd().Flags().Lookup("probe-mode").DefValue; def != relay.ProbeMesh {
		t.Fatalf("--probe-mode defaults to %q, want mesh", def)
	}
}

// check takes every flag run takes, with the same default, so that the
// command line of a unit's ExecStart checks as it runs (they share
// settings.addFlags; this keeps it so).
func TestCheckTakesRunFlags(t *testing.T) {
	run, check := runCmd(), checkCmd()
	run.Flags().VisitAll(func(fl *pflag.Flag) {
		c := check.Flags().Lookup(fl.Name)
		if c == nil {
			t.Errorf("relayd check has no --%s", fl.Name)
		} else if c.DefValue != fl.DefValue {
			t.Errorf("--%s defaults to %q in check, %q in run", fl.Name, c.DefValue, fl.DefValue)
		}
	})
}

// relayd --version names the build as the version command does.
func TestVersionFlag(t *testing.T) {
	var flag, cmd strings.Builder
	for _, c := range []struct {
		args []string
		out  *strings.Builder
	}{{[]string{"--version"}, &flag}, {[]string{"version"}, &cmd}} {
		root := rootCmd()
		root.SetArgs(c.args)
		root.SetOut(c.out)
		if err := root.Execute(); err != nil {
			t.Fatalf("relayd %v: %v", c.args, err)
		}
	}
	if !strings.HasPrefix(flag.String(), "relayd version ") || flag.String() != cmd.String() {
		t.Fatalf("relayd --version %q, relayd version %q", flag.String(), cmd.String())
	}
}
