package main

import (
	"slices"
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
