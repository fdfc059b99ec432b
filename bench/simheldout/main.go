// Command simheldout writes the Markdown table of run-sim-heldout.sh's
// JSON: per seed and pooled, the share of plans within 10 % of the optimum
// with its 95 % interval, and the plans' modelled wall time.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/relaymesh/relaymesh/pkg/sim/fleetsim"
)

// run is one member of the JSON: a relayctl sim run and its report.
type run struct {
	Command string             `json:"command"`
	Date    string             `json:"date"`
	Commit  string             `json:"commit"`
	Report  []*fleetsim.Report `json:"report"`
}

func main() {
	cmdline := flag.String("cmdline", "", "the command that made the runs, for the header")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: simheldout [-cmdline CMD] bench/results/sim-heldout.json")
		os.Exit(2)
	}
	if err := write(os.Stdout, flag.Arg(0), *cmdline); err != nil {
		fmt.Fprintln(os.Stderr, "simheldout:", err)
		os.Exit(1)
	}
}

func write(w io.Writer, path, cmdline string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var runs map[string]run
	if err := json.Unmarshal(b, &runs); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range runs {
			if !yield(k) {
				return
			}
		}
	})
	if len(names) == 0 {
		return fmt.Errorf("%s: no runs", path)
	}
	first := runs[names[0]]
	fmt.Fprintf(w, "# The planner on held-out seeds, in the harder world\n\n")
	fmt.Fprintf(w, "%s, commit %s, `%s`. Each row one `relayctl sim` run (its command below), a world and\n", first.Date, first.Commit, cmdline)
	fmt.Fprintf(w, "pairs drawn from a seed never used to choose a default. Within 10 %%: plans whose chain's bottleneck RTT\n")
	fmt.Fprintf(w, "is within 10 %% of the best chain's (the optimum: the lowest bottleneck RTT over every chain of up to the\n")
	fmt.Fprintf(w, "planner's hops through the relays alive, every relay's windows equal), with its 95 %% Wilson interval over the pairs. Wall time: the\n")
	fmt.Fprintf(w, "plan's rounds as the model times them plus its measured compute, median with its distribution-free 95 %%\n")
	fmt.Fprintf(w, "interval. With the read: the same, plus the registry read before the plan (relayctl's read of a Consul\n")
	fmt.Fprintf(w, "agent on its own host, interpolated between the fleet sizes it was measured at: a floor for a real fleet):\n")
	fmt.Fprintf(w, "the read until the relays and their coordinates are in, when the plan starts, and whatever of the\n")
	fmt.Fprintf(w, "measured pairs' read (\"pairs in\", from the read's start) the plan's first round did not cover.\n\n")
	fmt.Fprintf(w, "| seed | relays | alive | plans | within 10 %% | 95 %% interval | quality p5 | wall ms p50 | 95 %% interval | wall ms p95 | registry read ms, plan starts · pairs in | with the read, ms p50 | 95 %% interval |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---|\n")
	pooled := map[string]*pool{}
	var order []string
	for _, name := range names {
		for _, r := range runs[name].Report {
			seed := strings.TrimPrefix(name, "seed_")
			sets := append([]fleetsim.VariantPlans{{Plans: r.Plans}}, r.Variants...)
			for _, v := range sets {
				label := seed
				if v.Name != "" {
					label += ", " + v.Name
				}
				p := v.Plans
				fmt.Fprintf(w, "| %s | %d | %d | %d | %.1f %% | %.1f–%.1f %% | %.2f | %.0f | %.0f–%.0f | %.0f | %.0f · %.0f | %.0f | %.0f–%.0f |\n",
					label, r.Relays, r.AliveRelays, p.Count, 100*p.Within10,
					100*p.Within10CI95[0], 100*p.Within10CI95[1], p.QualityP5, p.WallMsMedian,
					p.WallMsMedianCI95[0], p.WallMsMedianCI95[1], p.WallMsP95,
					r.RegistryReadMs, r.RegistryPairsMs, p.WithReadMsMedian, p.WithReadMsMedianCI95[0], p.WithReadMsMedianCI95[1])
				if pooled[v.Name] == nil {
					pooled[v.Name] = &pool{}
					order = append(order, v.Name)
				}
				pooled[v.Name].add(p)
			}
		}
	}
	for _, name := range order {
		pooled[name].write(w, name)
	}
	writeLosses(w, names, runs)
	fmt.Fprintf(w, "\nCommands:\n\n")
	for _, name := range names {
		fmt.Fprintf(w, "- %s: `%s`\n", name, runs[name].Command)
	}
	return nil
}

// writeLosses is the table of where the plans that missed were lost:
// each column is the share of plans that could still be within 10 % of the
// optimum after one more of the planner's steps.
func writeLosses(w io.Writer, names []string, runs map[string]run) {
	fmt.Fprintf(w, "\nWhere the misses are lost, step by step (shares of the plans): the candidates hold a chain within 10 %%;\n")
	fmt.Fprintf(w, "the planner given the true RTT of every pair among them chooses one (the gap: its rule); given the true RTTs\n")
	fmt.Fprintf(w, "of the pairs the plan measured alone (the gap: pairs its rounds did not measure); the plan (the gap: the probes' noise).\n\n")
	fmt.Fprintf(w, "| seed | candidates | the planner on true RTTs | on the measured pairs | the plan |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|\n")
	for _, name := range names {
		for _, r := range runs[name].Report {
			seed := strings.TrimPrefix(name, "seed_")
			for _, v := range append([]fleetsim.VariantPlans{{Plans: r.Plans}}, r.Variants...) {
				label := seed
				if v.Name != "" {
					label += ", " + v.Name
				}
				p := v.Plans
				fmt.Fprintf(w, "| %s | %.1f %% | %.1f %% | %.1f %% | %.1f %% |\n", label,
					100*p.CandidatesWithin10, 100*p.TrueChoiceWithin10, 100*p.MeasuredChoiceWithin10, 100*p.Within10)
			}
		}
	}
}

// pool is the plans of one way of planning (the flags', or a variant's)
// over every seed.
type pool struct {
	within, count     int
	medians, withRead []float64
}

// add counts one seed's plans.
func (p *pool) add(pl fleetsim.Plans) {
	p.within += int(math.Round(pl.Within10 * float64(pl.Count)))
	p.count += pl.Count
	p.medians = append(p.medians, pl.WallMsMedian)
	p.withRead = append(p.withRead, pl.WithReadMsMedian)
}

// write is the pooled line, named for a variant (none: the flags').
func (p *pool) write(w io.Writer, variant string) {
	ci := fleetsim.Wilson95(p.within, p.count)
	slices.Sort(p.medians)
	slices.Sort(p.withRead)
	label := "Pooled"
	if variant != "" {
		label = "Pooled, " + variant + " (the same pairs)"
	}
	fmt.Fprintf(w, "\n%s: %d of %d plans within 10 %% (%.1f %%, 95 %% interval %.1f–%.1f %%); the seeds' median wall times %.0f–%.0f ms, %.0f–%.0f ms with the registry read.\n",
		label, p.within, p.count, 100*float64(p.within)/float64(p.count), 100*ci[0], 100*ci[1],
		p.medians[0], p.medians[len(p.medians)-1], p.withRead[0], p.withRead[len(p.withRead)-1])
}
