package main

import (
	"slices"
	"testing"
)

// The background lab process gets every flag its `lab up` was given: the
// links' transport and the self-check's budget were once dropped, so a
// lab asked for plain links ran TLS and judged itself by the default.
func TestLabDaemonGetsEveryFlag(t *testing.T) {
	stateRoot := "/run/relaymesh/lab"
	cmd := labUpCmd(&stateRoot)
	given := []string{"--topology=split4", "--transport=plain", "--window=4.5s", "--tolerance=10", "--strict=true",
		"--registry=consul", "--consul=/opt/consul", "--relayd=/opt/relayd", "--log-level=debug", "--calibration=/tmp/cal.json"}
	if err := cmd.ParseFlags(given); err != nil {
		t.Fatal(err)
	}
	args := labDaemonArgs(cmd, stateRoot)
	if want := []string{"lab", "--state-dir", stateRoot, "up", "--foreground", "--ready-fd", "3"}; !slices.Equal(args[:len(want)], want) {
		t.Fatalf("args %q, want them to start %q", args, want)
	}
	for _, g := range given {
		if !slices.Contains(args, g) {
			t.Errorf("%s not passed on: %q", g, args)
		}
	}
	if len(args) != 7+len(given) {
		t.Errorf("args %q: want the 7 fixed and the %d given", args, len(given))
	}
}
