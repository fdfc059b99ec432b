package main

import (
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxFlagHelp is the most a flag's help in --help may be, in characters: one
// short line saying what the flag does. Detail (figures, trade-offs, how it
// works with other flags) goes in the docs: docs/cli.md and the feature's
// own doc.
const maxFlagHelp = 99

// Every flag of every relayd command has one short line of help.
func TestFlagHelpIsShort(t *testing.T) {
	n := 0
	walkCommands(rootCmd(), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			n++
			if l := utf8.RuneCountInString(f.Usage); l > maxFlagHelp {
				t.Errorf("%s --%s: help is %d characters, want at most %d: %q", c.CommandPath(), f.Name, l, maxFlagHelp, f.Usage)
			}
		})
	})
	if n < 20 {
		t.Fatalf("visited %d flags: the test no longer reads them", n)
	}
}

// walkCommands calls fn on c and each of its subcommands, recursively.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}
