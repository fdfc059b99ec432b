package clicheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestFind(t *testing.T) {
	text := `  # a comment: relayctl nodes
  sudo relayctl lab run -t world -- relayctl plan --dst tokyo
  RELAYD_PASSWORD=x ./bin/relayctl bench \
      --dst "tokyo city" | jq .
  bin/relayctl lab run -t w -- sh -c 'relayctl rtt -o json > /tmp/x && echo'`
	var got [][]string
	for _, inv := range Find(text, "relayctl") {
		got = append(got, inv.Args)
	}
	want := [][]string{
		{"lab", "run", "-t", "world", "--", "relayctl", "plan", "--dst", "tokyo"},
		{"plan", "--dst", "tokyo"},
		{"bench", "--dst", "tokyo city"},
		{"lab", "run", "-t", "w", "--", "sh", "-c", "relayctl rtt -o json > /tmp/x && echo"},
		{"rtt", "-o", "json"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	md := "Run `relayctl plan --dst tokyo` or `make demo`.\n```sh\nrelayctl nodes\n```\n`relayctl` alone is prose.\n"
	if n := len(FindInMarkdown(md, "relayctl")); n != 2 {
		t.Fatalf("markdown: %d invocations, want 2", n)
	}
}

func TestCheck(t *testing.T) {
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "prog", Version: "1"}
		run := &cobra.Command{Use: "run", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
		run.Flags().IntP("count", "n", 1, "")
		group := &cobra.Command{Use: "group"}
		group.AddCommand(run)
		root.AddCommand(group)
		return root
	}
	for _, tc := range []struct {
		args string
		want string // "" for accepted
	}{
		{"group run -n 3", ""},
		{"group run --help", ""},
		{"--version", ""},
		{"group", ""},
		{"group run --cont 3", "unknown flag"},
		{"group run -n three", "invalid argument"},
		{"group run extra", "unknown command"},
		{"group walk", "unknown command"},
	} {
		err := Check(newRoot, strings.Fields(tc.args))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// LongFlagHelp finds a long help on a subcommand's flag, and counts every
// flag it read.
func TestLongFlagHelp(t *testing.T) {
	root := &cobra.Command{Use: "prog"}
	sub := &cobra.Command{Use: "sub", Run: func(*cobra.Command, []string) {}}
	root.AddCommand(sub)
	root.PersistentFlags().Bool("short", false, "fine")
	sub.Flags().String("wordy", "", strings.Repeat("é", MaxFlagHelp+1))
	sub.Flags().String("edge", "", strings.Repeat("é", MaxFlagHelp))
	long, flags := LongFlagHelp(root)
	if len(long) != 1 || !strings.Contains(long[0], "prog sub --wordy") || flags != 3 {
		t.Errorf("long %q, %d flags; want only prog sub --wordy, of 3", long, flags)
	}
}
