package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// report is the Markdown table: per configuration and rate, the runs'
// medians and how many were valid; then per configuration the highest
// rate at which every run was valid.
func report(results []wanemu.ChainResult, argv []string) string {
	var b strings.Builder
	b.WriteString("# Lab packet engines side by side\n\n")
	fmt.Fprintf(&b, "Made by `sudo bench/run-lab-engine-bench.sh` (`make bench-lab-engine`), which ran `bin/labengine %s` (each run a fresh process; configurations alternate at each rate).\n\n", strings.Join(argv[1:], " "))
	b.WriteString("One TCP download (cubic) through a routed chain of emulated links, every link shaped the same; a run is valid when the emulator's self-check passes on every link (no direction shows, at 99 % confidence, more than 1 % of its packets over 0.5 ms late, which for a busy direction is p99 lateness ≤ 0.5 ms; no packet 20 ms late; no emulator or TUN ring drops). Link Mbit/s and packets/s are summed over every link direction (data one way, ACKs the other). CPU is the engine threads' own time, kernel work done on them included, per emulated Gbit.\n\n")
	type key struct {
		engine string
		rate   float64
	}
	groups := map[key][]wanemu.ChainResult{}
	var engines []string
	var rates []float64
	for _, r := range results {
		k := key{r.Engine, r.RateMbit}
		groups[k] = append(groups[k], r)
		if !slices.Contains(engines, r.Engine) {
			engines = append(engines, r.Engine)
		}
		if !slices.Contains(rates, r.RateMbit) {
			rates = append(rates, r.RateMbit)
		}
	}
	b.WriteString("| link rate Mbit/s | engine | valid runs | goodput Mbit/s | links Mbit/s | links packets/s | p99 lateness ms | max lateness ms | CPU s/Gbit |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	type held struct {
		rate, linkMbit, pps float64
	}
	best := map[string]held{}
	broken := map[string]bool{} // a lower rate already had an invalid run
	alsoValid := map[string][]float64{}
	cpu := map[string][]float64{}
	slices.Sort(rates)
	for _, rate := range rates {
		for _, e := range engines {
			g := groups[key{e, rate}]
			if len(g) == 0 {
				continue
			}
			valid := 0
			for _, r := range g {
				if r.Valid() {
					valid++
				}
				cpu[e] = append(cpu[e], r.CPUSecPerGbit)
			}
			med := func(f func(wanemu.ChainResult) float64) float64 {
				v := make([]float64, len(g))
				for i, r := range g {
					v[i] = f(r)
				}
				slices.Sort(v)
				return v[len(v)/2]
			}
			link := med(func(r wanemu.ChainResult) float64 { return r.LinkMbit })
			pps := med(func(r wanemu.ChainResult) float64 { return r.LinkPps })
			fmt.Fprintf(&b, "| %.0f | %s | %d/%d | %.1f | %.0f | %.0f | %.3f | %.3f | %.2f |\n", rate, e, valid, len(g),
				med(func(r wanemu.ChainResult) float64 { return r.GoodputMbit }), link, pps,
				med(func(r wanemu.ChainResult) float64 { return float64(r.P99LatenessNs) / 1e6 }),
				med(func(r wanemu.ChainResult) float64 { return float64(r.MaxLatenessNs) / 1e6 }),
				med(func(r wanemu.ChainResult) float64 { return r.CPUSecPerGbit }))
			switch {
			case valid == len(g) && !broken[e]:
				best[e] = held{rate, link, pps}
			case valid == len(g):
				alsoValid[e] = append(alsoValid[e], rate)
			default:
				broken[e] = true
			}
		}
	}
	b.WriteString("\n## Held valid in every run\n\nThe highest link rate at which every run, at it and at every lower rate, was valid (0: none); rates above it where every run was valid again are listed apart.\n\n| engine | highest link rate Mbit/s | links Mbit/s | links packets/s | median CPU s/Gbit (all runs) | also valid at |\n|---|---:|---:|---:|---:|---|\n")
	for _, e := range engines {
		c := cpu[e]
		slices.Sort(c)
		h := best[e]
		var also []string
		for _, r := range alsoValid[e] {
			also = append(also, fmt.Sprintf("%.0f", r))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %s |\n", e, h.rate, h.linkMbit, h.pps, c[len(c)/2], strings.Join(also, ", "))
	}
	return b.String()
}
