package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad --output is refused before anything is read: here the fleet file
// does not exist, and the error must be about --output.
func TestOutputCheckedFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-fleet.yaml")
	for _, cmd := range [][]string{
		{"nodes", "--fleet", missing, "-o", "yaml"},
		{"rtt", "--fleet", missing, "-o", "yaml"},
		{"plan", "--fleet", missing, "--dst", "tokyo", "-o", "yaml"},
		{"bench", "--fleet", missing, "--dst", "tokyo", "-o", "yaml"},
	} {
		c := rootCmd()
		c.SetArgs(cmd)
		c.SetOut(&bytes.Buffer{})
		c.SetErr(&bytes.Buffer{})
		err := c.Execute()
		if err == nil || !strings.Contains(err.Error(), `--output "yaml": want table or json`) {
			t.Errorf("%v: %v, want the --output error first", cmd, err)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	c := rootCmd()
	var out bytes.Buffer
	c.SetArgs([]string{"--version"})
	c.SetOut(&out)
	if err := c.Execute(); err != nil || !strings.HasPrefix(out.String(), "relayctl version ") {
		t.Fatalf("--version: %q, %v", out.String(), err)
	}
}

func TestColourOff(t *testing.T) {
	// Not a terminal: never colour.
	if colour(&bytes.Buffer{}) {
		t.Fatal("colour to a buffer")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no terminal to test NO_COLOR and TERM=dumb against: %v", err)
	}
	defer tty.Close()
	t.Setenv("TERM", "xterm")
	t.Setenv("NO_COLOR", "1")
	if colour(tty) {
		t.Error("colour with NO_COLOR set")
	}
	t.Setenv("NO_COLOR", "")
	t.Setenv("TERM", "dumb")
	if colour(tty) {
		t.Error("colour with TERM=dumb")
	}
}
