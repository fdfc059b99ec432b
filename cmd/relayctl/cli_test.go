package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/testenv"
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

// Colour goes to a terminal unless $NO_COLOR is set or $TERM is dumb; the
// terminal is a pseudo-terminal the test opens (CI runs with no tty).
func TestColourOff(t *testing.T) {
	// Not a terminal: never colour.
	if colour(&bytes.Buffer{}) {
		t.Fatal("colour to a buffer")
	}
	tty := pseudoTerminal(t)
	t.Setenv("TERM", "xterm")
	t.Setenv("NO_COLOR", "")
	if !colour(tty) {
		t.Fatal("no colour to a terminal")
	}
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

// pseudoTerminal opens a pseudo-terminal and returns its terminal end,
// closed when the test ends: a terminal to write to that the test does not
// need to be run from (CI has none).
func pseudoTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testenv.Need(t, "no pseudo-terminals (/dev/ptmx: %v): mount devpts on /dev/pts (a container gets it by default)", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// --error-margin reaches the planner: on a matrix where a second relay adds
// 1 %, the default margin keeps one relay and 0 takes the faster chain; an
// impossible margin is refused.
func TestErrorMarginFlag(t *testing.T) {
	matrix := filepath.Join(t.TempDir(), "m.json")
	const m = `{"nodes": {"client": {"window_bytes": 1048576}, "srv": {"window_bytes": 1048576},
	  "b": {"relay": true, "window_bytes": 1048576}, "c": {"relay": true, "window_bytes": 1048576}},
	 "rtt_ms": [["client", "srv", 50], ["client", "b", 24.6], ["client", "c", 25.4], ["b", "c", 0.8],
	            ["b", "srv", 25.4], ["c", "srv", 24.6]]}`
	if err := os.WriteFile(matrix, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		c := rootCmd()
		var out bytes.Buffer
		c.SetArgs(append([]string{"plan", "--matrix", matrix, "--from", "client", "--dst", "srv", "-o", "json"}, args...))
		c.SetOut(&out)
		c.SetErr(&bytes.Buffer{})
		err := c.Execute()
		return out.String(), err
	}
	for _, tc := range []struct {
		args  []string
		chain []string
	}{
		{nil, []string{"b"}},
		{[]string{"--error-margin", "0"}, []string{"b", "c"}},
	} {
		out, err := run(tc.args...)
		var res struct {
			Chain []string `json:"chain"` // the plan to use
		}
		if err == nil {
			err = json.Unmarshal([]byte(out), &res)
		}
		if err != nil || !slices.Equal(res.Chain, tc.chain) {
			t.Errorf("plan %v: %v, chain %v, want %v", tc.args, err, res.Chain, tc.chain)
		}
	}
	if _, err := run("--error-margin", "1"); err == nil || !strings.Contains(err.Error(), "--error-margin 1") {
		t.Errorf("--error-margin 1: %v, want refused", err)
	}
}

// -t takes a file or a shipped topology's name.
func TestTopologyByName(t *testing.T) {
	topo, from, err := loadTopology("world")
	if err != nil || topo.Name != "world" || from != "world (built in)" {
		t.Fatalf("world: %v, %q, %v", topo, from, err)
	}
	topo, from, err = loadTopology("../../configs/lab/split2.yaml")
	if err != nil || topo.Name != "split2" || !filepath.IsAbs(from) {
		t.Fatalf("a file: %v, %q, %v", topo, from, err)
	}
	_, _, err = loadTopology("atlantis")
	for _, want := range []string{"not a shipped topology (", "plan-capacity, plan-detour", "split4", "world)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("an unknown name: %v, want an error listing the shipped ones (%q)", err, want)
		}
	}
}

// --dst completes to the fleet's relay names and regions, read from the
// fleet file alone.
func TestDstCompletion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	const file = "relays:\n  - {name: fra1, region: frankfurt, admin: 127.0.0.1:1}\n  - {name: tyo1, region: tokyo, admin: 127.0.0.1:2}\n  - {name: tyo2, region: tokyo, admin: 127.0.0.1:3}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	c := rootCmd()
	var out bytes.Buffer
	c.SetArgs([]string{"__complete", "plan", "--fleet", path, "--dst", ""})
	c.SetOut(&out)
	c.SetErr(&bytes.Buffer{})
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	want := []string{"fra1", "frankfurt", "tokyo", "tyo1", "tyo2", ":4"} // :4 = no file completion
	if !slices.Equal(got, want) {
		t.Errorf("completions %q, want %q", got, want)
	}
}

// connect takes relayd's flag names; the earlier ones still set the same
// settings, deprecated.
func TestConnectFlagAliases(t *testing.T) {
	connect, _, err := rootCmd().Find([]string{"connect"})
	if err != nil {
		t.Fatal(err)
	}
	connect.SetErr(&bytes.Buffer{})
	if err := connect.ParseFlags([]string{"--listen", "127.0.0.1:1999", "--http-listen", "", "--probe-every", "3s"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"socks": "127.0.0.1:1999", "http": "", "check-every": "3s"} {
		if got := connect.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q after the deprecated alias, want %q", name, got, want)
		}
	}
}

// Without --dst connect plans each destination on its own survey: the
// flags of a plan to one destination are refused, not silently ignored.
func TestConnectPerDestinationRefusesDstOnlyFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--min-gain", "0.2"}, {"--exclude", "a"}, {"--matrix", "m.json"}, {"--direction", "up"},
	} {
		c := rootCmd()
		c.SetArgs(append([]string{"connect"}, args...))
		c.SetOut(&bytes.Buffer{})
		c.SetErr(&bytes.Buffer{})
		err := c.Execute()
		if err == nil || !strings.Contains(err.Error(), args[0]+" applies only with --dst") {
			t.Errorf("connect %v: %v, want it refused without --dst", args, err)
		}
	}
}
