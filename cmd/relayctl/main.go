// Command relayctl plans, applies and benchmarks relaymesh chains.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/buildinfo"
)

func main() {
	root := &cobra.Command{
		Use:           "relayctl",
		Short:         "Plan, use and measure relaymesh relay chains",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), "relayctl", buildinfo.Version()) },
	})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "relayctl:", err)
		os.Exit(1)
	}
}
