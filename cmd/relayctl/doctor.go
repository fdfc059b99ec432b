package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

func labDoctorCmd() *cobra.Command {
	var output, save, topoDir string
	var saved bool
	var rates, loadRates []float64
	var hops int
	var duration time.Duration
	var relaydPath string
	var underLoad bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Measure what load this machine's link emulator holds, and which topologies fit",
		Long: `lab doctor measures what the packet engine holds on this machine and says
which topologies it runs faithfully:

  1. the wake-up latency of a sleeping real-time thread, with the CPUs left to
     idle and kept awake (the engine keeps them awake while links run);
  2. one TCP download through a chain of --hops emulated links (10 ms each),
     at rising per-link rates until a rate fails the strict self-check
     twice: the highest load the engine alone holds, summed over the
     links, in Mbit/s and packets/s;
  3. under load, as the tests and the demo run: a lab of three relays
     (TLS links, probing each other) in a 4 x 12.5 ms chain beside a direct
     50 ms link, a download through the relays and one direct at once, at
     rising per-link rates (--load-rates) until a rate fails the self-check
     by effect (a figure within 15 % over half the step) twice or its
     download falls short of the rate: the highest load a lab holds;
  4. for each topology in --topologies, the estimated peak of one download
     (the slowest segment's rate from link rates, windows and RTTs, times
     the links it crosses) against what step 3 held (step 2's without it).

The result is saved (--save) and lab up / lab run warn before starting a
topology whose peak is beyond it. Takes a few minutes; run it on a quiet
machine. Engine settings come from RELAYMESH_WANEMU_* (docs/lab.md).`,
		Example: `  sudo relayctl lab doctor
  sudo relayctl lab doctor --rates 100,200,400 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			var cal lab.Calibration
			if saved {
				if cal, err = lab.LoadCalibration(save); err != nil {
					return fmt.Errorf("no saved calibration (%w): run `sudo relayctl lab doctor` first", err)
				}
				save = ""
			} else {
				relayd := ""
				if underLoad {
					if relayd, err = findRelayd(relaydPath); err != nil {
						return fmt.Errorf("%w (or --under-load=false to measure the engine alone)", err)
					}
				}
				if cal, err = calibrate(cmd, lab.CalibrateOptions{RatesMbit: rates, Hops: hops, Duration: duration,
					RelaydPath: relayd, LoadRatesMbit: loadRates}); err != nil {
					return err
				}
			}
			fits := topologyFits(topoDir, cal)
			if save != "" {
				if err = lab.SaveCalibration(save, cal); err != nil {
					return err
				}
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"calibration": cal, "topologies": fits})
			}
			w := cmd.OutOrStdout()
			if cal.HeldLinkMbit == 0 {
				fmt.Fprintf(w, "\nThe packet engine (%s) held no tested load valid on this machine: lab runs here will be invalid.\n", cal.Engine)
			} else {
				fmt.Fprintf(w, "\nThe packet engine (%s) held %.0f Mbit/s and %.0f packets/s summed over links with every link valid (%d links at %.0f Mbit/s each; measured %s).\n",
					cal.Engine, cal.HeldLinkMbit, cal.HeldPps, cal.Hops, cal.HeldRateMbit, cal.At.Format("2006-01-02 15:04 MST"))
			}
			switch {
			case len(cal.UnderLoad) == 0:
				fmt.Fprintln(w, "Not measured under load (relays, a download through them and one direct): topologies are judged against the engine alone.")
			case cal.LoadHeldLinkMbit == 0:
				fmt.Fprintln(w, "Under load (3 relays, a download through them and one direct) no tested rate was valid by effect: lab runs here will be invalid.")
			default:
				fmt.Fprintf(w, "Under load (3 relays, a download through them and one direct) it held %.0f Mbit/s and %.0f packets/s summed, valid by effect (links at %.0f Mbit/s each): topologies are judged against that.\n",
					cal.LoadHeldLinkMbit, cal.LoadHeldPps, cal.LoadHeldRateMbit)
			}
			if len(fits) > 0 {
				fmt.Fprintf(w, "\nTopologies in %s, the estimated peak of one download:\n", topoDir)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TOPOLOGY\tPATH\tFLOW Mbit/s\tSUMMED Mbit/s\tVERDICT")
				for _, f := range fits {
					fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\n", f.Name, strings.Join(f.Demand.Path, "-"), f.Demand.FlowMbit, f.Demand.LinkMbit, f.Verdict)
				}
				tw.Flush()
			}
			if save != "" {
				fmt.Fprintf(w, "\nSaved to %s: lab up and lab run compare topologies against it.\n", save)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().BoolVar(&saved, "saved", false, "measure nothing: show the saved result (--save) against the topologies")
	cmd.Flags().StringVar(&save, "save", lab.DefaultCalibrationPath, `where to keep the result for lab up/run ("" to not save)`)
	cmd.Flags().StringVar(&topoDir, "topologies", "configs/lab", "directory of topology files to judge (skipped when missing)")
	cmd.Flags().Float64SliceVar(&rates, "rates", nil, "per-link rates to try, Mbit/s (default 100,200,300,400,500,600,800,1000)")
	cmd.Flags().IntVar(&hops, "hops", 4, "links in the measured chain")
	cmd.Flags().DurationVar(&duration, "duration", 3*time.Second, "measured time at each rate")
	cmd.Flags().BoolVar(&underLoad, "under-load", true, "also measure a lab with relays and downloads running (step 3)")
	cmd.Flags().Float64SliceVar(&loadRates, "load-rates", nil, "per-link rates to try under load, Mbit/s (default 50,100,200,300,400,600)")
	cmd.Flags().StringVar(&relaydPath, "relayd", "", "relayd binary for the run under load (default: next to relayctl, then $PATH)")
	return cmd
}

// calibrate runs the measurement with the environment's engine settings.
func calibrate(cmd *cobra.Command, o lab.CalibrateOptions) (lab.Calibration, error) {
	c, err := wanemu.ConfigFromEnv()
	if err != nil {
		return lab.Calibration{}, err
	}
	wanemu.Configure(c)
	wanemu.QuietGC(labHeapLimitBytes)
	self, err := os.Executable()
	if err != nil {
		return lab.Calibration{}, err
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "lab doctor: "+format+"\n", args...)
	}
	o.TrafficCmd, o.Progress = []string{self, "lab", "traffic"}, progress
	return lab.Calibrate(cmd.Context(), o)
}

// topologyFit is one topology's estimated peak against the calibration.
type topologyFit struct {
	Name    string     `json:"name"`
	File    string     `json:"file"`
	Demand  lab.Demand `json:"demand"`
	Verdict string     `json:"verdict"`
}

func topologyFits(dir string, cal lab.Calibration) []topologyFit {
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	slices.Sort(files)
	var out []topologyFit
	for _, f := range files {
		topo, err := topology.Load(f)
		if err != nil {
			continue
		}
		d := lab.EstimateDemand(topo)
		v := "fits"
		if held := cal.HeldForLabs(); d.LinkMbit > held {
			v = fmt.Sprintf("beyond (%.0f%% of what was held): downloads at full speed may be invalid", 100*d.LinkMbit/max(held, 1))
		}
		out = append(out, topologyFit{Name: topo.Name, File: f, Demand: d, Verdict: v})
	}
	return out
}
