// Command relayctl plans, applies and benchmarks relaymesh chains.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/buildinfo"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code) // a command run in the lab: its own exit code
		}
		fmt.Fprintln(os.Stderr, "relayctl:", err)
		os.Exit(1)
	}
}

// rootCmd is relayctl with every command.
func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "relayctl",
		Short:         "Plan, use and measure relaymesh relay chains",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Describe(), // --version
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version: the release, else dev-<commit>[-dirty] and the commit's time; and the Go version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "relayctl version", buildinfo.Describe())
		},
	})
	root.AddCommand(labCmd(), nodesCmd(), rttCmd(), planCmd(), connectCmd(), envCmd(), benchCmd(), pacCmd(), rulesCmd(), caCmd(), simCmd())
	return root
}
