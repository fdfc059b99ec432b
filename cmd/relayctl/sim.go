package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relaymesh/relaymesh/pkg/coord"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/sim/fleetsim"
	"github.com/relaymesh/relaymesh/planner"
)

// simOptions are relayctl sim's flags: the simulation's configuration,
// and how it is run and reported.
type simOptions struct {
	sizes    string
	cfg      fleetsim.Config
	output   string
	progress bool
	churn    bool
	detours  string
	variants []string
	profile  string
}

func simCmd() *cobra.Command {
	var o simOptions
	cmd := &cobra.Command{
		Use:   "sim [--relays 100,1000,5000]",
		Short: "Simulate the fleet's measurement and planning on a modelled internet of many relays",
		Long: `Run relaymesh's own measurement code (each relay a coordinate node
probing a bounded set of peers) and planning code (coordinates, then targeted
probes of a shortlist) against a modelled internet: relays in real cities,
RTTs from great-circle distance, route inflation, hub cities, bad routes and
loss. Nothing is sent on the network; a run is fixed by --seed (only the
planning compute time is measured on this machine).

For each fleet size it reports what measuring costs a relay (probes and bytes
per minute), how far the coordinates' estimates are from the true RTTs, and
plan quality: for random (client, destination) pairs, the chosen chain's true
bottleneck (its longest segment) against the best any chain of at most
--max-hops relays could have, as a ratio (1 = optimal), with the probes and
wall time each plan took; "15%" and "20%" are the shares within those of the
optimum (do the misses miss by little or by much). "By the model" judges the
chosen chain as the planner ranks chains: its bottleneck's rate less 2 % for
each relay (the measured cost of a relay; with --mixed-windows each segment's
rate at its receiver's window), against the best any chain has by that rule; the planner takes the chain with fewer relays among those within
its tie margin of the best (relayctl plan --error-margin, 2 %). "Candidates within 10%" is the share of pairs whose
candidates held a chain within 10 % of the optimum; "the planner on true RTTs"
the share for which the planner, given the true RTT of every pair among its
candidates, chooses one (by its rule), "on measured pairs" given those of the
pairs the plan measured alone: the gap from the first to the second is the
rule's, from the second to the third the pairs not measured, from the third to
the plans the probes' noise.
How it works and what it found: docs/planning.md; the model and its limits:
go doc ./pkg/sim/netsim.`,
		Example: `  relayctl sim --relays 1000
  relayctl sim --relays 100,1000,5000 --pairs 200 -o json
  relayctl sim --relays 1000 --candidates 48 --first-cut 192 --seed 7
  relayctl sim --relays 1000 --churn --pairs 50
  relayctl sim --relays 1000 --rejoin 100 --pairs 400
  relayctl sim --relays 1000 --replan --pairs 100
  relayctl sim --relays 1000 --variant 'tfo=--fast-open'
  relayctl sim --relays 1000 --variant 'https=--udp-ask=false'
  relayctl sim --relays 5000 --variant 'small=--first-cut 384 --candidates 192' --variant 'rounds-12=--rounds 12'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	o.register(cmd.Flags())
	return cmd
}

// register adds sim's flags to fl.
func (o *simOptions) register(fl *pflag.FlagSet) {
	fl.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the whole run to this file (the plans' samples labelled sim=plan)")
	fl.StringArrayVar(&o.variants, "variant", nil, "NAME=FLAGS: also plan the same pairs with these planning flags, side by side; repeatable")
	fl.StringVar(&o.sizes, "relays", "1000", "fleet sizes to simulate, comma-separated")
	fl.IntVar(&o.cfg.Pairs, "pairs", 200, "random (client, destination) pairs planned per fleet size")
	fl.DurationVar(&o.cfg.Warmup, "warmup", 30*time.Minute, "simulated time the relays measure before planning")
	fl.Uint64Var(&o.cfg.Seed, "seed", 1, "seed of the world and the run")
	fl.IntVar(&o.cfg.MaxHops, "max-hops", planner.DefaultMaxHops, "most relays in a chain")
	fl.DurationVar(&o.cfg.FleetViewEvery, "fleet-view-every", 0, "how often each relay reads every relay's coordinate (0: as relayd on Consul, by fleet size)")
	fl.IntVar(&o.cfg.Coord.ProbesPerMinute, "probes-per-minute", coord.DefaultProbesPerMinute, "each relay's probe budget (relayd probe.per_minute)")
	fl.IntVar(&o.cfg.Coord.Nearest, "nearest", coord.DefaultNearest, "peers each relay keeps probed by lowest RTT, measured or else estimated (relayd probe.nearest)")
	fl.IntVar(&o.cfg.Coord.Random, "random", coord.DefaultRandom, "other peers each relay probes besides, drawn again every 5 min (relayd probe.random)")
	fl.IntVar(&o.cfg.Coord.PerRing, "per-ring", coord.DefaultPerRing, "nearest peers taken from each ring of RTT before the rest (relayd probe.per_ring; -1: no rings)")
	fl.IntVar(&o.cfg.Coord.Shortcuts, "shortcuts", 0, "peers measured well below estimate each relay keeps publishing (relayd probe.shortcuts; 0: none)")
	simPlanningFlags(fl, &o.cfg.Planning, fleetsim.Planning{Shortlist: shortlist.Defaults(), UDPAsk: true, UDPLoss: true})
	fl.BoolVar(&o.cfg.DstRelays, "dst-relays", false, "each pair's destination is a relay's host, as plan --dst REGION (default: a random server)")
	fl.BoolVar(&o.cfg.Replan, "replan", false, "plan each pair again as relayctl connect replans, and report those plans")
	fl.BoolVar(&o.cfg.ReplanFresh, "replan-fresh", false, "with --replan: the second plans start afresh (over the kept connections), not from the first")
	fl.BoolVar(&o.cfg.ReplanCold, "replan-cold", false, "with --replan: the second plans open new connections, as a new relayctl plan process does")
	fl.IntVar(&o.cfg.Rejoin, "rejoin", 0, "restart at least this many relays (whole cities) before the plans; plan pairs that need them")
	fl.DurationVar(&o.cfg.RejoinAgo, "rejoin-ago", time.Minute, "with --rejoin: how long before the plans those relays restart (--warmup or more: never)")
	fl.BoolVar(&o.churn, "churn", false, "relays leave, fail and join; report how placed a joining relay is a minute later")
	fl.Float64Var(&o.cfg.World.NoiseTailShare, "noise-tail", 0, "share of probes whose queueing delay is heavy-tailed (Pareto, α 1.5; 0: none)")
	fl.Float64Var(&o.cfg.World.UnderShare, "under-reads", 0, "share of probes that read up to 10 % below the true RTT (0: none)")
	fl.BoolVar(&o.cfg.MixedWindows, "mixed-windows", false, "relays' windows differ (6, 16 or 64 MiB tcp_rmem): judge plans in throughput too")
	fl.StringVar(&o.detours, "detours", "model", "model (netsim's own routing effects) or king (fitted to the King data set's detours)")
	fl.Float64Var(&o.cfg.World.DriftShare, "drift", 0, "share of routes on a worse path (up to 30 % longer) at any moment, redrawn hourly (0: none)")
	fl.BoolVar(&o.progress, "progress", true, "print each phase to stderr")
	fl.StringVarP(&o.output, "output", "o", "text", "text or json")
}

// run simulates each fleet size in turn and reports them all at the end.
func (o *simOptions) run(cmd *cobra.Command) error {
	ns, err := o.configure()
	if err != nil {
		return err
	}
	if o.profile != "" {
		stop, err := startCPUProfile(o.profile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer stop()
	}
	reports, err := o.simulate(cmd, ns)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	if err := printSimTable(out, reports, len(o.cfg.Variants) > 0); err != nil {
		return err
	}
	for _, r := range reports {
		fmt.Fprintf(out, "%d relays: before each plan, reading the registry of %d alive relays takes %.0f ms, its measured pairs %.0f ms (read beside the first round; not in wall ms; as relayctl's read of a Consul agent on its own host); with it a plan takes %.0f ms at the median\n",
			r.Relays, r.AliveRelays, r.RegistryReadMs, r.RegistryPairsMs, r.Plans.WithReadMsMedian)
		o.printRounds(out, r.Relays, "planned by the flags", r.Plans)
		for _, v := range r.Variants {
			o.printRounds(out, r.Relays, "planned by "+v.Name, v.Plans)
		}
	}
	if o.cfg.Rejoin > 0 {
		o.printRejoined(out, reports)
	}
	if o.churn {
		printChurn(out, reports)
	}
	return nil
}

// configure checks the flags and completes the configuration from them
// (the variants, churn's rates); it returns the fleet sizes to simulate.
func (o *simOptions) configure() ([]int, error) {
	if o.output != "text" && o.output != "json" {
		return nil, fmt.Errorf("-o %q: want text or json", o.output)
	}
	// The variants start from the flags as given: CheckFlags turns a
	// search budget of 0 (none) into the Config's none, which a
	// variant's own check would refuse as a flag's value.
	given := o.cfg.Planning
	if err := o.cfg.Shortlist.CheckFlags(""); err != nil {
		return nil, err
	}
	for _, v := range o.variants {
		variant, err := parseSimVariant(v, given)
		if err != nil {
			return nil, err
		}
		o.cfg.Variants = append(o.cfg.Variants, variant)
	}
	var ns []int
	for _, f := range strings.Split(o.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > 10000 {
			return nil, fmt.Errorf("--relays %q: want a comma-separated list of fleet sizes, 2 to 10000 (e.g. 100,1000,5000)", o.sizes)
		}
		ns = append(ns, n)
	}
	switch o.detours {
	case "model":
	case "king":
		o.cfg.World = o.cfg.World.WithKingDetours()
	default:
		return nil, fmt.Errorf("--detours %q: want model (netsim's routing effects) or king (fitted to the King data set's detours)", o.detours)
	}
	if o.churn {
		// Each relay leaves or fails about once in two hours and
		// comes back after about two: a lively fleet.
		o.cfg.World.JoinPerHour, o.cfg.World.LeavePerHour, o.cfg.World.FailPerHour, o.cfg.World.InitialDownShare = 0.5, 0.25, 0.25, 0.1
	}
	return ns, nil
}

// startCPUProfile profiles this process's CPU into the file path until
// stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// simulate runs the simulation for each fleet size of ns.
func (o *simOptions) simulate(cmd *cobra.Command, ns []int) ([]*fleetsim.Report, error) {
	var reports []*fleetsim.Report
	for _, n := range ns {
		c := o.cfg
		c.Relays = n
		rep, err := fleetsim.Run(cmd.Context(), c, o.say(cmd.ErrOrStderr(), n))
		if err != nil {
			return nil, fmt.Errorf("%d relays: %w", n, err)
		}
		reports = append(reports, rep)
	}
	return reports, nil
}

// say is where a run of n relays says each phase it starts, with the
// time since the run started: w, with --progress; nil, without.
func (o *simOptions) say(w io.Writer, n int) func(string) {
	if !o.progress {
		return nil
	}
	t0 := time.Now()
	return func(s string) {
		fmt.Fprintf(w, "sim %d relays, %s: %s\n", n, time.Since(t0).Round(time.Second), s)
	}
}

// printSimTable writes the table of the reports: a row per fleet size,
// and with variants, the variants' rows under it, each named.
func printSimTable(out io.Writer, reports []*fleetsim.Report, variants bool) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if variants {
		fmt.Fprint(tw, "planned by\t")
	}
	fmt.Fprintln(tw, "relays\tprobes/relay/min\tKB/relay/min\tcoord err p50\tp90\tplans\twithin 10%\t95% CI\t15%\t20%\tby the model\tcandidates within 10%\tthe planner on true RTTs\ton measured pairs\tfirst cut\tits cities\tquality p50\tp5\tprobes/plan\twall ms p50\tp95\tcompute ms p95\t")
	for _, r := range reports {
		printSimRow(tw, variants, "the flags", r, r.Plans)
		for _, v := range r.Variants {
			printSimRow(tw, variants, v.Name, r, v.Plans)
		}
	}
	return tw.Flush()
}

// printSimRow writes the table's row of the plans p of r's fleet, named
// in the first column when named.
func printSimRow(tw io.Writer, named bool, name string, r *fleetsim.Report, p fleetsim.Plans) {
	by := ""
	if named {
		by = name + "\t"
	}
	fmt.Fprintf(tw, "%s%d\t%.1f\t%.1f\t%.1f%%\t%.1f%%\t%d\t%.0f%%\t%.0f–%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.0f%%\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t\n",
		by, r.Relays, r.ProbesPerMin, r.BytesPerMin/1000, 100*r.CoordErrMedian, 100*r.CoordErrP90,
		p.Count, 100*p.Within10, 100*p.Within10CI95[0], 100*p.Within10CI95[1], 100*p.Within15, 100*p.Within20, 100*p.ModelWithin10, 100*p.CandidatesWithin10, 100*p.TrueChoiceWithin10, 100*p.MeasuredChoiceWithin10, 100*p.FirstCutWithin10, 100*p.FirstCutCitiesWithin10, p.QualityMedian, p.QualityP5, p.ProbesMedian,
		p.WallMsMedian, p.WallMsP95, p.ComputeMsP95)
}

// printRounds writes how the plans p of a fleet of relays went, planned
// by name: their rounds, how they ended, and with --replan the replans.
func (o *simOptions) printRounds(out io.Writer, relays int, name string, p fleetsim.Plans) {
	fmt.Fprintf(out, "%d relays, %s: rounds of a plan (modelled, medians): the first (landmarks) %.0f ms, the second (the first cut's ends) %.0f ms, each later one %.0f ms\n",
		relays, name, p.FirstRoundMsMedian, p.SecondRoundMsMedian, p.LaterRoundMsMedian)
	if p.SettledShare > 0 {
		fmt.Fprintf(out, "%d relays, %s: %.0f%% of the plans ended their rounds with a chain measured throughout within --settle of the best on estimates\n", relays, name, 100*p.SettledShare)
	}
	if p.DeadlinedShare > 0 {
		fmt.Fprintf(out, "%d relays, %s: %.0f%% of the plans stopped their rounds at the deadline\n", relays, name, 100*p.DeadlinedShare)
	}
	if p.OutOfBudgetShare > 0 {
		fmt.Fprintf(out, "%d relays, %s: %.0f%% of the plans stopped their rounds at the search budget\n", relays, name, 100*p.OutOfBudgetShare)
	}
	if !o.cfg.Replan {
		return
	}
	how, conns := "from the first plan", "the connections kept"
	if o.cfg.ReplanFresh {
		how = "afresh"
	}
	if o.cfg.ReplanCold {
		conns = "new connections"
	}
	fmt.Fprintf(out, "%d relays, %s: each pair replanned %s over %s: %.0f%% within 10%% (%.0f%% by the model), %.0f probes in %.0f rounds, wall %.0f ms p50, %.0f ms p95 (the first plans: %.0f rounds)\n",
		relays, name, how, conns, 100*p.ReplanWithin10, 100*p.ReplanModelWithin10, p.ReplanProbesMedian, p.ReplanRoundsMedian, p.ReplanWallMsMedian, p.ReplanWallMsP95, p.RoundsMedian)
}

// printRejoined writes, per fleet size, which relays --rejoin restarted
// and which pairs were planned for it.
func (o *simOptions) printRejoined(out io.Writer, reports []*fleetsim.Report) {
	for _, r := range reports {
		when := fmt.Sprintf("restarted %s before the plans (new relayds: no coordinate, no measurements)", o.cfg.RejoinAgo)
		if r.Rejoined == 0 {
			when = "not restarted (they measured from the start)"
		}
		fmt.Fprintf(out, "%d relays: the %d relays of %d random cities %s; the pairs planned are %d of %d random ones, those whose every chain within 10%% of the optimum goes through one of them\n",
			r.Relays, r.RejoinedRelays, r.RejoinedCities, when, r.Plans.Count, r.RejoinDrawn)
	}
}

// printChurn writes, per fleet size, how --churn left the fleet and how
// well the relays that joined were placed.
func printChurn(out io.Writer, reports []*fleetsim.Report) {
	for _, r := range reports {
		fmt.Fprintf(out, "%d relays: %d alive at the end; %d joined, their coordinate's median error a minute later %.1f%%\n",
			r.Relays, r.AliveRelays, r.Joined, 100*r.JoinedErrMedian)
	}
}

// simPlanningFlags adds the flags of how pairs are planned to fs, into p,
// with base's values as their defaults: the command's, and a variant's.
func simPlanningFlags(fs *pflag.FlagSet, p *fleetsim.Planning, base fleetsim.Planning) {
	shortlist.AddFlags(fs, "", &p.Shortlist, base.Shortlist)
	fs.BoolVar(&p.FastOpen, "fast-open", base.FastOpen, "model TCP Fast Open to every relay: a new admin connection costs one round trip, not two")
	fs.BoolVar(&p.UDPAsk, "udp-ask", base.UDPAsk, "ask relays in one UDP datagram, as relayctl plan --udp-ask (false: over HTTPS connections)")
	fs.BoolVar(&p.UDPLoss, "udp-loss", base.UDPLoss, "with --udp-ask: lose asks and answers as the path loses packets (false: all get through)")
	fs.BoolVar(&p.FitDst, "fit-dst", base.FitDst, "with --dst-relays: place the destination by the landmarks' probes, not its relay's coordinate")
	fs.BoolVar(&p.RelaysProbeDst, "relays-probe-dst", base.RelaysProbeDst, "with --dst-relays: the first cut's relays probe the destination, not its relay them")
}

// parseSimVariant parses a --variant: NAME=FLAGS, the planning flags (and
// --fast-open, ...) over base (the command's).
func parseSimVariant(arg string, base fleetsim.Planning) (fleetsim.Variant, error) {
	name, args, ok := strings.Cut(arg, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fleetsim.Variant{}, fmt.Errorf("--variant %q: want NAME=FLAGS, e.g. 'rounds-12=--rounds 12'", arg)
	}
	v := fleetsim.Variant{Name: name, Planning: base}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	simPlanningFlags(fs, &v.Planning, base)
	if err := fs.Parse(strings.Fields(args)); err != nil {
		return v, fmt.Errorf("--variant %s: %w (planning flags only: --candidates, --first-cut, --rounds, ...)", name, err)
	}
	if fs.NArg() > 0 {
		return v, fmt.Errorf("--variant %s: unexpected %q: want planning flags only", name, fs.Args())
	}
	if err := v.Shortlist.CheckFlags(""); err != nil {
		return v, fmt.Errorf("--variant %s: %w", name, err)
	}
	return v, nil
}
