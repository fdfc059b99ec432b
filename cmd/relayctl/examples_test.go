package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/clicheck"
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
