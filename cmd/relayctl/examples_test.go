package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/relaymesh/relaymesh/pkg/clicheck"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/fleetsim"
)

// Every relayctl command line in relayctl's own help (Example, and Long's
// indented lines)
// names commands, flags and arguments relayctl takes.
func TestHelpExamplesParse(t *testing.T) {
	n := 0
	for _, c := range clicheck.Commands(rootCmd()) {
		for _, inv := range clicheck.Find(clicheck.Indented(c.Long)+c.Example, "relayctl") {
			n++
			if err := clicheck.Check(rootCmd, inv.Args); err != nil {
				t.Errorf("%s --help: %q: %v", c.CommandPath(), inv.Line, err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d example command lines: the test no longer reads the help", n)
	}
	// Examples that were once in the help and failed: the check refuses them.
	for _, bad := range [][]string{
		{"lab", "run", "world", "--", "relayctl", "plan", "--dst", "tokyo"},
		{"lab", "run", "-t", "world", "sh"},
		{"bench", "--transfers"},
		{"connect", "--dst"},
	} {
		if err := clicheck.Check(rootCmd, bad); err == nil {
			t.Errorf("relayctl %q: accepted", bad)
		}
	}
}

// The same for every relayctl command line in the README and the docs.
func TestDocCommandLinesParse(t *testing.T) {
	docs := docFiles(t)
	n := 0
	for _, path := range docs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, inv := range clicheck.FindInMarkdown(string(data), "relayctl") {
			n++
			if err := clicheck.Check(rootCmd, inv.Args); err != nil {
				t.Errorf("%s: %q: %v", path, inv.Line, err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d command lines in %v: the test no longer reads the docs", n, docs)
	}
}

// docFiles are the README and the markdown under docs/ and configs/.
func docFiles(t *testing.T) []string {
	files := []string{"../../README.md"}
	for _, pat := range []string{"../../docs/*.md", "../../configs/*/README.md", "../../configs/*.md"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// Every run of the simulator's experiments (bench/sim-experiments.txt,
// bench/run-sim.sh) is a relayctl sim command line that parses, its
// variants included: an experiment that would fail after the runs before
// it took half an hour fails here first.
func TestSimExperimentsParse(t *testing.T) {
	data, err := os.ReadFile("../../bench/sim-experiments.txt")
	if err != nil {
		t.Fatal(err)
	}
	runs, experiments := 0, 0
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			experiments++
			continue
		case strings.TrimSpace(line) == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, "report "):
			continue
		}
		name, flags, _ := strings.Cut(line, " ")
		invs := clicheck.Find("relayctl sim "+flags, "relayctl")
		if len(invs) != 1 {
			t.Errorf("%s: not one command line: %q", name, line)
			continue
		}
		runs++
		args := invs[0].Args
		if err := clicheck.Check(rootCmd, args); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for i, a := range args {
			if a == "--variant" && i+1 < len(args) {
				if _, err := parseSimVariant(args[i+1], fleetsim.Planning{Shortlist: shortlist.Defaults()}); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	if experiments < 10 || runs < experiments {
		t.Fatalf("read %d experiments, %d runs: the test no longer reads the manifest", experiments, runs)
	}
}

// A variant starts from the flags as given, so a search budget of 0 (none)
// on the command line is a variant's none too, not a value it refuses.
func TestSimVariantKeepsNoSearchBudget(t *testing.T) {
	var o simOptions
	fl := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	o.register(fl)
	if err := fl.Parse([]string{"--search-budget", "0", "--variant", "r=--rounds 3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.configure(); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if len(o.cfg.Variants) != 1 || o.cfg.Variants[0].Shortlist.SearchBudget != o.cfg.Shortlist.SearchBudget {
		t.Errorf("variants %+v; the flags' search budget %v", o.cfg.Variants, o.cfg.Shortlist.SearchBudget)
	}
}
