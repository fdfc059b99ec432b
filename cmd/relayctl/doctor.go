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
	"github.com/relaymesh/relaymesh/pkg/topology"
	"github.com/relaymesh/relaymesh/pkg/wanemu"
)

func labDoctorCmd() *cobra.Command {
	var output, save, topoDir string
	var saved bool
	var rates []float64
	var hops int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Measure what load this machine's link emulator holds, and which topologies fit",
		Long: `lab doctor measures what the packet engine holds on this machine and says
which topologies it runs faithfully:

  1. the wake-up latency of a sleeping real-time thread, with the CPUs left to
     idle and kept awake (the engine keeps them awake while links run);
  2. one TCP download through a chain of --hops emulated links (10 ms each),
     at rising per-link rates until a rate fails the self-check twice: the
     highest valid load, summed over the links, in Mbit/s and packets/s;
  3. for each topology in --topologies, the estimated peak of one download
     (the slowest segment's rate from link rates, windows and RTTs, times
     the links it crosses) against that load.

The result is saved (--save) and lab up / lab run warn before starting a
topology whose peak is beyond it. Takes about a minute; run it on a quiet
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
			} else if cal, err = calibrate(cmd, rates, hops, duration); err != nil {
				return err
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
	return cmd
}

// calibrate runs the measurement with the environment's engine settings.
func calibrate(cmd *cobra.Command, rates []float64, hops int, duration time.Duration) (lab.Calibration, error) {
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
	return lab.Calibrate(cmd.Context(), lab.CalibrateOptions{TrafficCmd: []string{self, "lab", "traffic"},
		RatesMbit: rates, Hops: hops, Duration: duration, Progress: progress})
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
		if d.LinkMbit > cal.HeldLinkMbit {
			v = fmt.Sprintf("beyond (%.0f%% of what was held): downloads at full speed may be invalid", 100*d.LinkMbit/max(cal.HeldLinkMbit, 1))
		}
		out = append(out, topologyFit{Name: topo.Name, File: f, Demand: d, Verdict: v})
	}
	return out
}
