package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/relay"
)

// rulesFlags are --rules and --geoip, as connect, pac and rules test take
// them.
type rulesFlags struct {
	file, geoip string
}

func (f *rulesFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.file, "rules", "", "rule file (docs/rules.md): per destination DIRECT, PLAN, CHAIN:r1,r2 or REJECT; first match wins")
	fl.StringVar(&f.geoip, "geoip", "", "MaxMind-format country database (e.g. GeoLite2-Country) for the rules' GEOIP lines")
}

// load reads and checks the rule file; nil without --rules.
func (f *rulesFlags) load(w io.Writer) (*rules.Set, error) {
	if f.file == "" {
		if f.geoip != "" {
			return nil, fmt.Errorf("--geoip serves a rule file's GEOIP lines: give --rules FILE too")
		}
		return nil, nil
	}
	set, err := rules.Load(f.file, rules.Options{GeoIPFile: f.geoip})
	if err != nil {
		return nil, fmt.Errorf("--rules: %w", err)
	}
	for _, warn := range set.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	return set, nil
}

// connectRouter is the router connect serves with: plan, under the rules
// when there are any. reg finds the relays of CHAIN rules (nil: the
// rules name none).
func connectRouter(set *rules.Set, plan relay.Router, srv *relay.Server, reg registry.Store, log *zap.Logger) (relay.Router, error) {
	if set == nil {
		return plan, nil
	}
	direct, err := srv.Chain(nil)
	if err != nil {
		return nil, err
	}
	var chains func(context.Context, []string) (*chain.Chain, error)
	if reg != nil {
		chains = rules.RegistryChains(reg, srv.Chain)
	}
	// connect has no metrics listener: a rejection is logged (info).
	return rules.NewRouter(rules.RouterConfig{Rules: set, Plan: plan, Direct: direct, Chain: chains, Log: log}), nil
}

// checkChainRelays warns of the relays the rules' CHAIN actions name that
// reg does not list (a tunnel by such a rule fails until it does).
func checkChainRelays(ctx context.Context, w io.Writer, set *rules.Set, reg registry.Store) {
	known, err := reg.Relays(ctx)
	if err != nil {
		return
	}
	for _, name := range set.Relays() {
		found := false
		for _, k := range known {
			found = found || k.Name == name && k.Relay != ""
		}
		if !found {
			fmt.Fprintf(w, "warning: --rules: CHAIN relay %s is not in the registry with a relay listener: tunnels by its rules fail until it is\n", name)
		}
	}
}

func rulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Check a rule file and see what it does with a destination",
		Long: `A rule file decides, per destination, between DIRECT, PLAN (relaymesh's
per-destination plan), CHAIN:r1,r2 (these relays, in order) and REJECT; the
first line that matches decides, as in mihomo/Clash. relayctl connect --rules,
relayctl pac --rules and relayd's planning.rules read the same file
(docs/rules.md).`,
	}
	cmd.AddCommand(rulesTestCmd())
	return cmd
}

func rulesTestCmd() *cobra.Command {
	var f rulesFlags
	cmd := &cobra.Command{
		Use:   "test HOST[:PORT]... --rules FILE",
		Short: "Say which rule matches each destination, and what connect, relays and PAC files do with it",
		Long: `Check the rule file (every bad line is named with its number) and, for each
destination, say which rule matches and what each consumer does: relayctl
connect, a relay with routing: plan, and a PAC file. HOST is a name as a
client asks for it, or a literal address (IPv6 in brackets with a port).
Without :PORT, DST-PORT rules cannot match, and the answer says so.`,
		Example: `  relayctl rules test --rules rules.txt www.example.co.jp:443 10.1.2.3:22
  relayctl rules test --rules rules.txt --geoip Country.mmdb '[2001:db8::1]:443'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.file == "" {
				return fmt.Errorf("--rules FILE: the rule file to test")
			}
			out := cmd.OutOrStdout()
			set, err := f.load(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: %d rules (%s)\n", f.file, len(set.Rules), set.Counts())
			for _, dst := range args {
				fmt.Fprintln(out)
				explain(out, dst, set.MatchAddr(dst))
			}
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

// explain writes what the rules decide for dst, and why, the way a user
// learns the rules from: the line, the action in each consumer, what was
// not checked.
func explain(w io.Writer, dst string, d rules.Decision) {
	fmt.Fprintln(w, dst)
	if d.Rule == nil {
		fmt.Fprintln(w, "  no rule matched: PLAN, the default (what relaymesh does without a rule file; end the file with MATCH,... to choose)")
	} else {
		fmt.Fprintf(w, "  line %d: %s\n", d.Rule.Line, d.Rule.Text)
	}
	for _, l := range consumerLines(d.Action) {
		fmt.Fprintln(w, "  "+l)
	}
	host := dst
	if h, _, err := net.SplitHostPort(dst); err == nil {
		host = h
	}
	if d.UnresolvedIPRules > 0 {
		fmt.Fprintf(w, "  not checked: %d IP rule(s) (IP-CIDR, IP-CIDR6, GEOIP) before it: %s is a name, and relaymesh never resolves a name to match a rule (that would send it to this host's resolver); add a domain rule for it\n",
			d.UnresolvedIPRules, strings.Trim(host, "[]"))
	}
	if d.NoPortRules > 0 {
		fmt.Fprintf(w, "  not checked: %d DST-PORT rule(s) before it: no port given (HOST:PORT)\n", d.NoPortRules)
	}
}

// consumerLines say what each consumer does with an action.
func consumerLines(a rules.Action) []string {
	switch a.Verb {
	case rules.Direct:
		return []string{
			"DIRECT: relayctl connect dials it from this host; a relay (routing: plan) dials it itself, if its policy allows it",
			"PAC file: DIRECT (the browser connects itself)",
		}
	case rules.Chain:
		return []string{
			"CHAIN through " + strings.Join(a.Relays, " -> ") + ", in this order, with the native protocol: from relayctl connect, or from a relay (routing: plan) on to them; the last relay's policy decides whether it may reach it",
			"PAC file: the proxy (which applies the same rules to choose the chain)",
		}
	case rules.Reject:
		return []string{
			"REJECT: relayctl connect and relays refuse it: SOCKS5 reply 0x02 (not allowed by ruleset), HTTP 403; logged, and counted by relayd in relaymesh_denials_total{reason=\"rule\"}",
			"PAC file: " + pacRejectProxy + " (nothing listens there: the browser fails the request without sending it anywhere)",
		}
	}
	return []string{
		"PLAN: relayctl connect routes it by its plan (direct until surveyed), or through --dst's chain; a relay (routing: plan) by its plan",
		"PAC file: the proxy",
	}
}

// rulesNote is connect's start line for its rules, when it has any.
func rulesNote(w io.Writer, set *rules.Set) {
	if set != nil {
		fmt.Fprintf(w, "relayctl connect: rules from %s: %d (%s); a destination no rule matches takes the plan\n", set.File, len(set.Rules), set.Counts())
	}
}
