package main

import (
	"testing"

	"github.com/relaymesh/relaymesh/pkg/clicheck"
)

// Every flag of every relayd command has one short line of help; the detail
// is in the docs (docs/cli.md and the feature's own doc).
func TestFlagHelpIsShort(t *testing.T) {
	long, flags := clicheck.LongFlagHelp(rootCmd())
	for _, l := range long {
		t.Error(l)
	}
	if flags < 20 {
		t.Fatalf("read %d flags: the test no longer reads them", flags)
	}
}
