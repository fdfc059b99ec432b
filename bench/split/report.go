package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

var implStyle = map[string]series{
	implDirect:     {name: "direct", color: "#555555", marker: "diamond"},
	implRelayd:     {name: "relayd (SOCKS5)", color: "#1f77b4", marker: "circle", dx: -5, z: 3},
	implRelaydHTTP: {name: "relayd (HTTP CONNECT)", color: "#9467bd", marker: "circle", dx: 5, z: 4},
	implDante:      {name: "dante", color: "#ff7f0e", marker: "square", dx: -5, z: 1},
	implSquid:      {name: "squid", color: "#2ca02c", marker: "triangle", dx: 5, z: 2},
}

func mbit(bps float64) float64 { return bps * 8 / 1e6 }

// ideal is the window-limited bound: direct RTT over the longest segment.
func ideal(t *TopoResult) float64 {
	mx := 0.0
	for _, r := range t.SegmentRTTms {
		mx = math.Max(mx, r)
	}
	if mx == 0 {
		return 0
	}
	return t.DirectRTTms / mx
}

func invalid(t *TopoResult) bool { return t.Valid != nil && !*t.Valid }

func checkCell(t *TopoResult) string {
	switch {
	case t.Valid == nil:
		s := "not read"
		if t.Error != "" {
			s += "; error: " + t.Error
		}
		return s
	case !*t.Valid:
		return "**INVALID**: " + strings.Join(t.Problems, "; ")
	case t.Error != "":
		return "ok; error: " + t.Error
	}
	return "ok"
}

func byKind(r *Results, kind string) []*TopoResult {
	var out []*TopoResult
	for _, t := range r.Topos {
		if t.Kind == kind {
			out = append(out, t)
		}
	}
	if kind == "segments" {
		sort.SliceStable(out, func(i, j int) bool { return out[i].Segments < out[j].Segments })
	} else {
		sort.SliceStable(out, func(i, j int) bool { return firstRTT(out[i]) < firstRTT(out[j]) })
	}
	return out
}

func firstRTT(t *TopoResult) float64 {
	if len(t.SegmentRTTms) == 0 {
		return 0
	}
	return t.SegmentRTTms[0]
}

func cellMbit(t *TopoResult, impl string) string {
	ir := t.Impls[impl]
	if ir == nil {
		return "–"
	}
	if ir.OK == 0 {
		if ir.Failed > 0 {
			return fmt.Sprintf("FAILED (%d/%d)", ir.Failed, len(ir.Samples))
		}
		return "–"
	}
	s := fmt.Sprintf("%.1f", mbit(ir.MedianBps))
	if ir.Failed > 0 {
		s += fmt.Sprintf(" (%d failed)", ir.Failed)
	}
	if invalid(t) {
		s += " INVALID"
	}
	return s
}

func cellRatio(t *TopoResult, impl string) string {
	ir := t.Impls[impl]
	if ir == nil || ir.Ratio == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ir.Ratio)
}

func publishedCell(r *Results, n int) string {
	if p, ok := r.Published.RangePct[strconv.Itoa(n)]; ok {
		return fmt.Sprintf("%.2f–%.2f×", p[0]/100, p[1]/100)
	}
	if n == 1 {
		return "1×"
	}
	return "–"
}

func writeReports(dir string, r *Results) error {
	if err := os.WriteFile(filepath.Join(dir, "split.md"), []byte(markdown(r)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "split-segments.svg"), []byte(segmentsChart(r).svg()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "split-position.svg"), []byte(positionChart(r).svg()), 0o644)
}

func markdown(r *Results) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Split experiment: relayd vs dante vs squid in the emulated WAN lab\n\n")
	w("One window-limited TCP download over a 50 ms path, direct and through relay chains that cut the path into shorter segments. ")
	w("A TCP flow moves at most window/RTT, and every relay terminates TCP, so each segment has its own window and its own (shorter) RTT: ")
	w("with n equal segments a chain can reach up to n× the direct throughput. ")
	w("This reproduces the published split experiment (dante and squid chains) in our lab, with relayd, dante and squid side by side on the same relay nodes.\n\n")

	w("## How to re-run\n\n")
	w("```sh\n")
	w("sudo make bench-split        # as root, ~40 min: installs squid if missing, make build, all 9 topologies\n")
	w("sudo ./bench/run-split-bench.sh -topologies split2 -runs 1 -size 8388608 -out /tmp/split-smoke   # quick smoke run\n")
	w("sudo ./bench/run-split-bench.sh -topologies split3,split4   # re-measure a subset at the same -size: merged into split.json\n")
	w("go run ./bench/split -plot-only   # regenerate split.md and the SVG plots from split.json\n")
	w("```\n\n")
	w("Driver: `bench/split` (Go). Raw samples, versions and self-check verdicts: [`split.json`](split.json).\n\n")

	w("## Run\n\n")
	w("- date: %s\n", r.Date.Format("2006-01-02T15:04:05Z"))
	w("- command: `%s`\n", r.Command)
	w("- machine: nproc %d, kernel %s, %s, %s\n", r.Machine.Nproc, r.Machine.Kernel, r.Machine.CPU, r.Machine.Go)
	var keys []string
	for k := range r.Versions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("- %s: %s\n", k, r.Versions[k])
	}
	w("- transfer: %d bytes (%.0f MiB) per run, %d round(s) per topology, medians shown\n\n", r.SizeBytes, float64(r.SizeBytes)/(1<<20), r.Runs)

	w("## What is measured\n\n")
	w("- Lab: `configs/lab/split{1,2,3,4}.yaml` and `sweep-*.yaml`, brought up with `bin/relayctl lab up`. ")
	w("Every node (client, relays, server) has `tcp_rmem` max 256 KiB (about 160 KiB effective window) and cubic, so every TCP connection is window-limited by its RTT. ")
	w("The client has a direct 50 ms link to the server and a relay path whose segments add up to 50 ms.\n")
	w("- direct: `curl http://server:8000/bytes/N` from the client over the direct link.\n")
	w("- relayd: `curl -x socks5h://r1:1080`; relayd as the lab runs it, chained per the topology (`next:`, `next_protocol:`; without `next_protocol` r1 sends one native header naming r2, r3 and the server over its warm relay links).\n")
	w("- relayd-http: `curl -p -x http://r1:8080` (HTTP CONNECT, as squid is entered), the same relayd chain.\n")
	w("- dante: `curl -x socks5h://<r1 addr>:1081`; danted (dante-server) on every relay node, `route { ... via: <next relay>:1081 proxyprotocol: socks_v5 }` on every relay with a next hop, the same chain as relayd.\n")
	w("- squid: `curl -p -x http://r1:3128` (HTTP CONNECT tunnel); squid on every relay node, `cache_peer <next relay> parent 3128` + `never_direct allow all`, the same chain.\n")
	w("- Method: %s.\n", r.Method)
	w("- Mbit/s = median of curl's `speed_download` (payload bytes / total time, connection setup included) × 8 / 10⁶. ")
	w("Ratios (×) are to the direct median in the same lab. Ideal = direct RTT / longest segment RTT (the window-limited bound; n× for n equal segments).\n")
	if r.CheckWindow != "" {
		w("- Self-check: `relayctl lab status -o json` after the runs, by effect: valid when no link's timing error (its mean and p99 lateness against its RTT, its longest stall against the shortest download, %s: -size at %.0f Mbit/s, above every topology's window bound) can move a figure by more than 5 %%, with no TUN ring drops and every service running. A topology measured on an invalid lab is marked INVALID.\n\n", r.CheckWindow, peakBps/1e6)
	} else {
		w("- Self-check: `relayctl lab status -o json` after the runs, by effect, with its default budget (a stall weighed against 1 s). A topology measured on an invalid lab is marked INVALID.\n\n")
	}

	w("## (a) Number of segments (50 ms path split equally)\n\n")
	w("| segments | topology | direct Mbit/s | %s | ideal | published (dante/squid) | self-check |\n", relayHeads())
	w("|---|---|---|%s---|---|---|\n", strings.Repeat("---|", 2*len(relayImpls)))
	for _, t := range byKind(r, "segments") {
		w("| %d | %s | %s | %s | %.2f× | %s | %s |\n", t.Segments, t.Name,
			cellMbit(t, implDirect), relayCells(t), ideal(t), publishedCell(r, t.Segments), checkCell(t))
	}
	w("\n![throughput vs number of segments](split-segments.svg)\n\n")

	w("## (b) Split position (one relay, first segment RTT varied, total 50 ms)\n\n")
	w("| first segment RTT | segments ms | topology | direct Mbit/s | %s | ideal | self-check |\n", relayHeads())
	w("|---|---|---|---|%s---|---|\n", strings.Repeat("---|", 2*len(relayImpls)))
	for _, t := range byKind(r, "position") {
		var segs []string
		for _, s := range t.SegmentRTTms {
			segs = append(segs, strconv.FormatFloat(s, 'g', 4, 64))
		}
		w("| %g ms | %s | %s | %s | %s | %.2f× | %s |\n", firstRTT(t), strings.Join(segs, " + "), t.Name,
			cellMbit(t, implDirect), relayCells(t), ideal(t), checkCell(t))
	}
	w("\n![throughput vs split position](split-position.svg)\n\n")

	writeSetupTable(w, r)

	w("## Reading\n\n")
	for _, line := range reading(r) {
		w("- %s\n", line)
	}
	if len(r.Notes) > 0 {
		w("\nNotes (observations added after the run, not generated from the samples above):\n\n")
		for _, n := range r.Notes {
			w("- %s\n", n)
		}
	}
	w("\nPublished figures (dante/squid chains, 50 ms path, equal split, windows limited), in %% of direct: ")
	var ps []string
	for _, n := range []string{"2", "3", "4"} {
		if p, ok := r.Published.RangePct[n]; ok {
			ps = append(ps, fmt.Sprintf("%s segments %.0f–%.0f %%", n, p[0], p[1]))
		}
	}
	w("%s.\n\n", strings.Join(ps, ", "))

	w("## All samples (Mbit/s, in round order)\n\n")
	w("| topology | implementation | samples | min–max | runs ok |\n|---|---|---|---|---|\n")
	for _, t := range r.Topos {
		for _, impl := range allImpls {
			ir := t.Impls[impl]
			if ir == nil {
				continue
			}
			var ss []string
			for _, s := range ir.Samples {
				if s.OK {
					v := fmt.Sprintf("%.1f", mbit(s.BytesPerS))
					if s.Attempts > 1 {
						v += " (retried)"
					}
					ss = append(ss, v)
				} else {
					ss = append(ss, "FAILED: "+strings.ReplaceAll(s.Error, "|", "/"))
				}
			}
			w("| %s | %s | %s | %.1f–%.1f | %d/%d |\n", t.Name, impl, strings.Join(ss, ", "), mbit(ir.MinBps), mbit(ir.MaxBps), ir.OK, len(ir.Samples))
		}
		if len(t.Warmup) > 0 {
			w("| %s | warm-up | %s | | |\n", t.Name, strings.ReplaceAll(strings.Join(t.Warmup, "; "), "|", "/"))
		}
	}
	return b.String()
}

// relayHeads and relayCells are the tables' Mbit/s and ×direct columns of
// every relay implementation, in relayImpls' order.
func relayHeads() string {
	var hs []string
	for _, impl := range relayImpls {
		hs = append(hs, impl+" Mbit/s", impl+" ×direct")
	}
	return strings.Join(hs, " | ")
}

func relayCells(t *TopoResult) string {
	var cs []string
	for _, impl := range relayImpls {
		cs = append(cs, cellMbit(t, impl), cellRatio(t, impl))
	}
	return strings.Join(cs, " | ")
}

// reading states, mechanically and plainly, which targets are met.
func reading(r *Results) []string {
	var out []string
	segs := byKind(r, "segments")
	pos := byKind(r, "position")
	if len(r.Topos) == 0 {
		return []string{"No results."}
	}
	// direct sanity
	var direct []string
	for _, t := range r.Topos {
		if d := t.Impls[implDirect]; d != nil && d.OK > 0 {
			direct = append(direct, fmt.Sprintf("%.1f", mbit(d.MedianBps)))
		}
	}
	if len(direct) > 0 {
		out = append(out, fmt.Sprintf("Direct (50 ms, window-limited) medians across labs: %s Mbit/s; about 160 KiB / 50 ms ≈ 26 Mbit/s is the window bound.", strings.Join(direct, ", ")))
	}
	// relayd targets
	for _, t := range segs {
		tgt, ok := targets[t.Segments]
		if !ok {
			continue
		}
		ir := t.Impls[implRelayd]
		if ir == nil || ir.Ratio == 0 {
			out = append(out, fmt.Sprintf("%d segments: relayd has no successful run, target %.2f× not shown.", t.Segments, tgt))
			continue
		}
		verdict := "meets"
		if ir.Ratio < tgt {
			verdict = "**misses**"
		}
		s := fmt.Sprintf("%d segments: relayd %.2f× direct %s the target %.2f× (ideal %.2f×).", t.Segments, ir.Ratio, verdict, tgt, ideal(t))
		if invalid(t) {
			s += " Measured on an INVALID lab: not trustworthy."
		}
		out = append(out, s)
	}
	// relayd vs peers, each entered the way the peer is
	var behind []string
	points := 0
	for _, t := range append(append([]*TopoResult{}, segs...), pos...) {
		for _, pair := range likeForLike {
			rd, p := t.Impls[pair.relayd], t.Impls[pair.peer]
			if rd == nil || rd.OK == 0 || p == nil || p.OK == 0 {
				continue
			}
			points++
			if rd.MedianBps < p.MedianBps {
				d := (1 - rd.MedianBps/p.MedianBps) * 100
				note := ""
				if rd.MaxBps >= p.MinBps {
					note = ", sample ranges overlap"
				}
				behind = append(behind, fmt.Sprintf("%s: %s %.2f < %s %.2f Mbit/s (−%.2f %%%s)", t.Name, pair.relayd, mbit(rd.MedianBps), pair.peer, mbit(p.MedianBps), d, note))
			}
		}
	}
	// How far apart the three relays are at all.
	spread, at := 0.0, ""
	for _, t := range append(append([]*TopoResult{}, segs...), pos...) {
		lo, hi := math.Inf(1), 0.0
		for _, impl := range relayImpls {
			if ir := t.Impls[impl]; ir != nil && ir.OK > 0 {
				lo, hi = math.Min(lo, ir.MedianBps), math.Max(hi, ir.MedianBps)
			}
		}
		if hi > 0 && (hi/lo-1)*100 > spread {
			spread, at = (hi/lo-1)*100, t.Name
		}
	}
	if at != "" {
		out = append(out, fmt.Sprintf("The relay chains' medians are within %.2f %% of each other at every point (largest gap at %s).", spread, at))
	}
	switch {
	case points == 0:
	case len(behind) == 0:
		out = append(out, fmt.Sprintf("relayd's median is at least as fast as dante's (both entered over SOCKS5) and squid's (both entered over HTTP CONNECT) at every measured point (%d comparisons).", points))
	default:
		out = append(out, fmt.Sprintf("relayd is **not** at least as fast as the peer entered the same way everywhere: behind at %d of %d comparisons: %s.", len(behind), points, strings.Join(behind, "; ")))
	}
	// peers vs published
	for _, t := range segs {
		p, ok := r.Published.RangePct[strconv.Itoa(t.Segments)]
		if !ok {
			continue
		}
		var parts []string
		for _, impl := range []string{implDante, implSquid} {
			if ir := t.Impls[impl]; ir != nil && ir.Ratio > 0 {
				rel := "within"
				if ir.Ratio*100 < p[0] {
					rel = "below"
				} else if ir.Ratio*100 > p[1] {
					rel = "above"
				}
				parts = append(parts, fmt.Sprintf("%s %.0f %% (%s)", impl, ir.Ratio*100, rel))
			}
		}
		if len(parts) > 0 {
			out = append(out, fmt.Sprintf("%d segments vs published %.0f–%.0f %%: %s.", t.Segments, p[0], p[1], strings.Join(parts, ", ")))
		}
	}
	// position sweep: best split
	if len(pos) > 0 {
		best, bestV := "", 0.0
		for _, t := range pos {
			if ir := t.Impls[implRelayd]; ir != nil && ir.Ratio > bestV {
				best, bestV = t.Name, ir.Ratio
			}
		}
		if best != "" {
			out = append(out, fmt.Sprintf("Split position: relayd is fastest at %s (%.2f× direct); the window-limited bound is highest for the equal split (25+25 ms) and falls as the longer segment grows.", best, bestV))
		}
	}
	// problems
	var bad, failed []string
	for _, t := range r.Topos {
		if invalid(t) {
			bad = append(bad, t.Name)
		}
		if t.Error != "" {
			failed = append(failed, t.Name+" ("+t.Error+")")
		}
		for _, impl := range allImpls {
			if ir := t.Impls[impl]; ir != nil && ir.Failed > 0 {
				failed = append(failed, fmt.Sprintf("%s/%s: %d failed run(s)", t.Name, impl, ir.Failed))
			}
		}
	}
	if len(bad) > 0 {
		out = append(out, "Lab self-check INVALID (emulator fell behind or dropped packets; numbers not trustworthy): "+strings.Join(bad, ", ")+".")
	} else {
		out = append(out, "Lab self-check: valid for every measured topology.")
	}
	if len(failed) > 0 {
		out = append(out, "Failures: "+strings.Join(failed, "; ")+".")
	} else {
		out = append(out, "No failed runs.")
	}
	return out
}

func segmentsChart(r *Results) *chart {
	c := newChart()
	c.title = "Split experiment: throughput vs number of segments"
	c.subtitle = fmt.Sprintf("50 ms path split equally, window-limited TCP, %.0f MiB downloads, median of %d runs", float64(r.SizeBytes)/(1<<20), r.Runs)
	c.xlabel = "number of segments (relays + 1)"
	c.ylabel = "throughput, × direct"
	c.xmin, c.xmax = 0.7, 4.3
	c.xticks = []float64{1, 2, 3, 4}
	c.xtickLabel = func(v float64) string { return strconv.Itoa(int(v)) }
	c.ytickLabel = func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "×" }
	segs := byKind(r, "segments")
	ymax := 4.0
	idealS := series{name: "ideal n×", color: "#000000", marker: "none", dashed: true}
	for n := 1; n <= 4; n++ {
		idealS.pts = append(idealS.pts, point{x: float64(n), y: float64(n)})
	}
	for _, impl := range relayImpls {
		s := implStyle[impl]
		for _, t := range segs {
			if t.Segments == 1 {
				s.pts = append(s.pts, point{x: 1, y: 1, hollow: invalid(t)}) // no relay: direct
				continue
			}
			if ir := t.Impls[impl]; ir != nil && ir.Ratio > 0 {
				s.pts = append(s.pts, point{x: float64(t.Segments), y: ir.Ratio, hollow: invalid(t)})
				ymax = math.Max(ymax, ir.Ratio)
			}
		}
		c.series = append(c.series, s)
	}
	c.series = append(c.series, idealS)
	for n, p := range r.Published.RangePct {
		x, _ := strconv.Atoi(n)
		c.bands = append(c.bands, band{x: float64(x), lo: p[0] / 100, hi: p[1] / 100})
		ymax = math.Max(ymax, p[1]/100)
	}
	sort.Slice(c.bands, func(i, j int) bool { return c.bands[i].x < c.bands[j].x })
	c.bandLabel = "published range\n(dante/squid)"
	c.ymin, c.ymax = 0, math.Ceil(ymax*1.1*2)/2
	c.footnotes = []string{
		"1 segment = the direct path (1.0× by definition). Ratios are to the direct median measured in the same lab.",
		"Hollow markers: the lab's self-check was INVALID for that topology.",
		"The SOCKS5-entered chains (relayd, dante) are drawn 5 px left of their x and the HTTP-entered ones (relayd, squid) 5 px right, so that coinciding lines stay visible.",
	}
	return c
}

func positionChart(r *Results) *chart {
	c := newChart()
	c.title = "Split experiment: throughput vs relay position"
	c.subtitle = fmt.Sprintf("one relay, 50 ms total, window-limited TCP, %.0f MiB downloads, median of %d runs", float64(r.SizeBytes)/(1<<20), r.Runs)
	c.xlabel = "first segment RTT, ms (client–relay; relay–server = 50 − x)"
	c.ylabel = "throughput, Mbit/s"
	c.xmin, c.xmax = 5, 45
	c.xticks = []float64{10, 20, 25, 30, 40}
	c.xtickLabel = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	c.ytickLabel = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	pos := byKind(r, "position")
	ymax := 10.0
	for _, impl := range allImpls {
		s := implStyle[impl]
		for _, t := range pos {
			if ir := t.Impls[impl]; ir != nil && ir.MedianBps > 0 {
				s.pts = append(s.pts, point{x: firstRTT(t), y: mbit(ir.MedianBps), hollow: invalid(t)})
				ymax = math.Max(ymax, mbit(ir.MedianBps))
			}
		}
		c.series = append(c.series, s)
	}
	// The window-limited bound, scaled from each lab's direct median.
	model := series{name: "window bound", color: "#000000", marker: "none", dashed: true}
	for _, t := range pos {
		if d := t.Impls[implDirect]; d != nil && d.MedianBps > 0 {
			y := mbit(d.MedianBps) * ideal(t)
			model.pts = append(model.pts, point{x: firstRTT(t), y: y})
			ymax = math.Max(ymax, y)
		}
	}
	c.series = append(c.series, model)
	step := niceStep(ymax*1.1, 6)
	c.ymin, c.ymax = 0, math.Ceil(ymax*1.1/step)*step
	c.footnotes = []string{
		"Dashed: the window-limited bound, each lab's direct median × direct RTT / longest segment RTT.",
		"Hollow markers: the lab's self-check was INVALID for that topology.",
		"The SOCKS5-entered chains (relayd, dante) are drawn 5 px left of their x and the HTTP-entered ones (relayd, squid) 5 px right, so that coinciding lines stay visible.",
	}
	return c
}

// writeSetupTable splits each median into the time to the first byte of
// the body and the streaming rate after it, so a gap between chains can be
// told apart: a slower setup costs a fixed time, a slower stream a share.
func writeSetupTable(w func(string, ...any), r *Results) {
	var rows []string
	for _, t := range r.Topos {
		for _, impl := range allImpls {
			ir := t.Impls[impl]
			if ir == nil || ir.MedianFirstByteMs <= 0 {
				continue
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %.1f | %.1f | %.1f |\n", t.Name, impl,
				ir.MedianFirstByteMs, mbit(ir.MedianStreamBps), mbit(ir.MedianBps)))
		}
	}
	if len(rows) == 0 {
		return // results from before the driver recorded it
	}
	w("## Setup and streaming (medians)\n\n")
	w("First byte = curl's `time_starttransfer` (TCP, proxy handshakes, the chain's set-up and the request); ")
	w("streaming = the body's bytes over the time after its first byte.\n\n")
	w("| topology | implementation | first byte ms | streaming Mbit/s | overall Mbit/s |\n|---|---|---|---|---|\n")
	for _, row := range rows {
		w("%s", row)
	}
	w("\n")
}
