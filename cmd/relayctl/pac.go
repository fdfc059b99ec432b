package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// writePAC writes a PAC file sending hosts matching patterns to proxy (a
// SOCKS5 host:port), everything else direct. An empty proxy (the plan is
// direct) sends everything direct.
func writePAC(w io.Writer, header []string, patterns []string, proxy string) {
	for _, h := range header {
		fmt.Fprintf(w, "// %s\n", h)
	}
	fmt.Fprintln(w, "function FindProxyForURL(url, host) {")
	if proxy != "" && len(patterns) > 0 {
		var conds []string
		for _, p := range patterns {
			conds = append(conds, "shExpMatch(host, "+strconv.Quote(p)+")")
		}
		fmt.Fprintf(w, "  if (%s)\n", strings.Join(conds, " || "))
		// SOCKS5 for browsers that know it, SOCKS for the others; DIRECT
		// if the relay is down.
		fmt.Fprintf(w, "    return %s;\n", strconv.Quote("SOCKS5 "+proxy+"; SOCKS "+proxy+"; DIRECT"))
	}
	fmt.Fprintln(w, `  return "DIRECT";`)
	fmt.Fprintln(w, "}")
}

func pacCmd() *cobra.Command {
	var f planFlags
	var hosts []string
	var proxy string
	cmd := &cobra.Command{
		Use:   "pac --dst <region|relay|host:port> [--hosts PATTERN,...]",
		Short: "Print a PAC file that sends a destination's hosts to the planned entry relay",
		Long: `Plan the path to --dst (as relayctl plan does) and print a proxy
auto-config (PAC) file for browsers: hosts matching --hosts go through the
plan's first relay (its SOCKS5 front end), everything else directly. A
browser cannot carry a route itself, so a chain of more than one relay needs
that entry relay to run with routing: plan (it then plans the rest), or
--proxy pointing at a local ` + "`relayctl connect`" + ` listener. When the plan is direct
the file says so and sends everything directly.`,
		Example: `  relayctl pac --fleet fleet.yaml --dst tokyo --hosts '*.jp,*.example.jp' > relaymesh.pac
  relayctl pac --dst www.example.jp:443 --proxy 127.0.0.1:1080   # with relayctl connect`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			p, err := f.plan(ctx)
			if err != nil {
				return err
			}
			if len(hosts) == 0 {
				host, _, err := net.SplitHostPort(f.dst)
				if err != nil {
					return errors.New("--hosts: which hosts should take this plan? (e.g. --hosts '*.jp'); only a host:port --dst names its own host")
				}
				hosts = []string{host}
			}
			b := p.Result.Best
			header := []string{
				"relaymesh PAC for " + f.dst + ", written by relayctl pac on " + time.Now().UTC().Format(time.RFC3339),
				"plan: " + orDirect(b.Chain),
			}
			if len(b.Chain) > 0 {
				header = append(header, fmt.Sprintf("predicted %.1f Mbit/s, %.2fx direct", b.PredictedBps/1e6, b.Speedup))
				if proxy == "" {
					first := p.Relays[b.Chain[0]]
					if first.SOCKS == "" {
						return fmt.Errorf("relay %s has no SOCKS5 front end in the registry; give --proxy", first.Name)
					}
					proxy = first.SOCKS
					if len(b.Chain) > 1 {
						header = append(header, "the entry "+first.Name+" must run with routing: plan to carry the rest of the chain")
					}
				}
			} else {
				proxy = ""
			}
			writePAC(cmd.OutOrStdout(), header, hosts, proxy)
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "host patterns (shExpMatch) that take the plan, e.g. '*.jp' (default: --dst's host)")
	cmd.Flags().StringVar(&proxy, "proxy", "", "SOCKS5 host:port to send them to (default: the plan's first relay)")
	return cmd
}
