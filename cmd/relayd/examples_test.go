package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/clicheck"
)

// Every relayd command line in relayd's help, the README and the docs
// names commands, flags and arguments relayd takes.
func TestCommandLinesParse(t *testing.T) {
	var found []clicheck.Invocation
	for _, c := range clicheck.Commands(rootCmd()) {
		found = append(found, clicheck.Find(clicheck.Indented(c.Long)+c.Example, "relayd")...)
	}
	help := len(found)
	files := []string{"../../README.md"}
	for _, pat := range []string{"../../docs/*.md", "../../configs/*/README.md"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, clicheck.FindInMarkdown(string(data), "relayd")...)
	}
	if help < 3 || len(found)-help < 3 {
		t.Fatalf("found %d command lines in the help and %d in the docs: the test no longer reads them", help, len(found)-help)
	}
	for _, inv := range found {
		if err := clicheck.Check(rootCmd, inv.Args); err != nil {
			t.Errorf("%q: %v", inv.Line, err)
		}
	}
}
