// Command labengine compares the lab's packet engines side by side: for each
// link rate, one TCP download through a routed chain of emulated links
// (wanemu.MeasureChain) with each engine configuration in turn, repeated,
// and reports the load held valid (p99 lateness ≤ 0.5 ms, no drops by the
// emulator), the lateness, and the engine's CPU per emulated gigabit. Every
// measurement runs in a fresh child process, so one configuration's
// threads never share a process with another's.
//
// Needs root. Usage (bench/run-lab-engine-bench.sh builds the binaries):
//
//	labengine -relayctl bin/relayctl -rates 100,200,400 -runs 3 -out bench/results/lab-engine
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// configs are the engine settings compared, as environment for the child.
var configs = []struct{ name, env string }{
	{"thread", "RELAYMESH_WANEMU_ENGINE=thread RELAYMESH_WANEMU_KEEP_AWAKE=0"},
	{"thread+awake", "RELAYMESH_WANEMU_ENGINE=thread RELAYMESH_WANEMU_KEEP_AWAKE=1"},
	{"sched-no-offload", "RELAYMESH_WANEMU_ENGINE=sched RELAYMESH_WANEMU_OFFLOAD=0"},
	{"sched-no-standby", "RELAYMESH_WANEMU_ENGINE=sched RELAYMESH_WANEMU_STANDBY=0"},
	{"sched", "RELAYMESH_WANEMU_ENGINE=sched"},
}

func main() {
	var (
		relayctl   = flag.String("relayctl", "bin/relayctl", "relayctl binary (its `lab traffic` is the server)")
		rates      = flag.String("rates", "100,200,300,400,600,800", "link rates to measure, Mbit/s, comma-separated")
		which      = flag.String("configs", "", "comma-separated subset of: thread,thread+awake,sched-no-offload,sched-no-standby,sched (default all)")
		hops       = flag.Int("hops", 4, "links in the chain")
		rttMs      = flag.Float64("link-rtt-ms", 10, "RTT of each link, ms")
		runs       = flag.Int("runs", 2, "runs per configuration and rate")
		duration   = flag.Duration("duration", 5*time.Second, "measured time of each download")
		warmup     = flag.Duration("warmup", 2*time.Second, "download before measuring")
		out        = flag.String("out", "", "write OUT.json and OUT.md")
		extra      = flag.String("extra", "", "more configurations: NAME:ENV=V ENV=V;NAME:... (RELAYMESH_WANEMU_* variables)")
		busy       = flag.Bool("busy-loop", false, "run a competing `nice -n 19` busy loop (one CPU) during every measurement")
		reportOnly = flag.Bool("report-only", false, "rewrite OUT.md from OUT.json, measuring nothing")
		one        = flag.String("one", "", "internal: measure one run at this rate (Mbit/s) and print JSON")
	)
	flag.Parse()
	if *reportOnly {
		if err := rewriteReport(*out); err != nil {
			fmt.Fprintln(os.Stderr, "labengine:", err)
			os.Exit(1)
		}
		return
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "labengine: needs root (network namespaces, TUN devices)")
		os.Exit(1)
	}
	spec := wanemu.ChainSpec{Prefix: "le" + strconv.Itoa(os.Getpid()) + "-", Hops: *hops,
		ServerCmd: []string{*relayctl, "lab", "traffic"}, Warmup: *warmup, Duration: *duration}
	if *one != "" {
		os.Exit(measureOne(spec, *one, *rttMs))
	}
	ctx, stop := labpeer.CancelOnSignal()
	defer stop()
	if *busy {
		// A competing CPU load: one busy loop at the lowest priority.
		loop := exec.CommandContext(ctx, "nice", "-n", "19", "sh", "-c", "while :; do :; done")
		if err := loop.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "labengine: busy loop:", err)
			os.Exit(1)
		}
		defer func() { _ = loop.Process.Kill(); _ = loop.Wait() }()
	}
	for _, e := range strings.Split(*extra, ";") {
		if name, env, ok := strings.Cut(strings.TrimSpace(e), ":"); ok {
			configs = append(configs, struct{ name, env string }{name, env})
		}
	}
	var results []wanemu.ChainResult
	for _, r := range strings.Split(*rates, ",") {
		for run := 1; run <= *runs; run++ {
			for _, c := range configs {
				if *which != "" && !slices.Contains(strings.Split(*which, ","), c.name) {
					continue
				}
				if ctx.Err() != nil {
					os.Exit(130)
				}
				res, err := child(ctx, c.env, r, os.Args[1:])
				if err != nil {
					fmt.Fprintf(os.Stderr, "labengine: %s at %s Mbit/s: %v\n", c.name, r, err)
					os.Exit(1)
				}
				res.Engine = c.name
				results = append(results, res)
				fmt.Fprintf(os.Stderr, "%-17s rate %4s run %d: goodput %6.1f Mbit/s, links %6.0f Mbit/s %7.0f pps, p99 %.3f ms max %.3f ms, cpu %.2f s/Gbit, %s\n",
					c.name, r, run, res.GoodputMbit, res.LinkMbit, res.LinkPps, float64(res.P99LatenessNs)/1e6, float64(res.MaxLatenessNs)/1e6, res.CPUSecPerGbit, verdict(res))
			}
		}
	}
	if *out != "" {
		if err := write(*out, results, os.Args); err != nil {
			fmt.Fprintln(os.Stderr, "labengine:", err)
			os.Exit(1)
		}
	}
}

func verdict(r wanemu.ChainResult) string {
	if r.Valid() {
		return "valid"
	}
	return "INVALID"
}

func measureOne(spec wanemu.ChainSpec, rate string, rttMs float64) int {
	mbit, err := strconv.ParseFloat(rate, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labengine: -one:", err)
		return 2
	}
	c, err := wanemu.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "labengine:", err)
		return 2
	}
	wanemu.Configure(c)
	wanemu.QuietGC(2 << 30)
	// Queue: one path BDP at the link rate, so cubic's window, halved at
	// a loss, still fills the path: the first link stays busy at its rate.
	pathRTTs := rttMs / 1e3 * float64(spec.Hops)
	spec.Link = wanemu.Params{DelayNs: int64(rttMs * 1e6 / 2), RateBps: int64(mbit * 1e6),
		QueueBytes: max(64<<10, int(mbit*1e6/8*pathRTTs))}
	res, err := wanemu.MeasureChain(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "labengine:", err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func child(ctx context.Context, env, rate string, args []string) (wanemu.ChainResult, error) {
	var res wanemu.ChainResult
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, self, append(slices.Clone(args), "-one", rate)...)
	cmd.Env = append(os.Environ(), strings.Fields(env)...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return res, err
	}
	err = json.Unmarshal(stdout.Bytes(), &res)
	return res, err
}

func rewriteReport(out string) error {
	data, err := os.ReadFile(out + ".json")
	if err != nil {
		return err
	}
	var f struct {
		Command string               `json:"command"`
		Results []wanemu.ChainResult `json:"results"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	return os.WriteFile(out+".md", []byte(report(f.Results, strings.Fields(f.Command))), 0o644)
}

func write(out string, results []wanemu.ChainResult, argv []string) error {
	data, err := json.MarshalIndent(map[string]any{"machine": labpeer.MachineInfo(), "command": strings.Join(argv, " "), "results": results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out+".json", append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(out+".md", []byte(report(results, argv)), 0o644)
}
