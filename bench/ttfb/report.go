package main

import (
	"fmt"
	"sort"
	"strings"
)

// report renders ttfb.md from the results. The reading is written from the
// numbers, so a rerun stays consistent with its own table.
func report(r *Results) string {
	var p page
	p.header(r)
	p.results(r)
	p.expectations(r)
	if len(r.Throughput) > 0 {
		p.throughput(r)
	}
	p.projections(r)
	p.reading(r)
	return p.String()
}

// page is ttfb.md as it is written.
type page struct{ strings.Builder }

func (p *page) w(format string, args ...any) { fmt.Fprintf(&p.Builder, format, args...) }

// header writes the title, how and where the run ran, and what is
// measured.
func (p *page) header(r *Results) {
	p.w("# Time to first byte through a 4-segment 50 ms chain\n\n")
	p.w("Written by `bench/ttfb` (do not edit by hand; rerun `sudo make bench-ttfb`).\n\n")
	p.w("- Date: %s\n", r.Date.Format("2006-01-02 15:04 UTC"))
	p.w("- Command: `%s`\n", r.Command)
	p.w("- Topology: `%s` (lab `ttfb4`): client-r1-r2-r3-server, 4 segments of 12.5 ms RTT, plus a direct client-server link of 50 ms; cubic; receive buffers capped at 256 KiB (tcp_rmem max, ~160 KiB effective window) on every node\n", r.Topology)
	valid := "not read"
	if r.Valid != nil {
		valid = fmt.Sprint(*r.Valid)
	}
	if r.TTFBValid != nil {
		p.w("- Lab self-check after the TTFB rounds (before the downloads): **%v**\n", *r.TTFBValid)
	}
	p.w("- Lab self-check (`relayctl lab status -o json` `valid`, after the runs): **%s**", valid)
	if len(r.Problems) > 0 {
		p.w(" (problems: %s)", strings.Join(r.Problems, "; "))
	}
	p.w("\n")
	p.w("- Machine: %d CPUs, %s, kernel %s, %s; run took %.0f s\n", r.Machine.Nproc, r.Machine.CPU, r.Machine.Kernel, r.Machine.Go, r.DurationS)
	var vs []string
	for _, k := range []string{"relayd", "dante-server", "squid", "glider", "proxychains4", "curl", "git_head"} {
		if v, ok := r.Versions[k]; ok {
			vs = append(vs, k+" "+v)
		}
	}
	p.w("- Versions: %s\n", strings.Join(vs, "; "))
	if r.Error != "" {
		p.w("- **Run error: %s** (the numbers below are partial)\n", r.Error)
	}
	if len(r.Warmup) > 0 {
		p.w("- Warm-up failures: %s\n", strings.Join(r.Warmup, "; "))
	}
	p.w("\n## What is measured\n\n%s\n\n", r.Method)
}

// results writes the measured table, the handshakes' medians and each
// variant's setup.
func (p *page) results(r *Results) {
	p.w("## Results\n\n")
	p.w("| variant | median ms | p90 ms | min / max ms | ratio to direct (median) | expected ms (ratio) | median - expected | ok / failed |\n")
	p.w("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, v := range r.Variants {
		p.w("| %s | %.1f | %.1f | %.1f / %.1f | %.2fx | %.1f (%.2fx) | %+.1f | %d / %d |\n",
			v.Name, v.MedianMs, v.P90Ms, v.MinMs, v.MaxMs, v.Ratio, v.Expected.Ms, v.ExpectRatio, v.ExcessMs, v.OK, v.Failed)
	}
	p.w("\nMedian of curl's `time_pretransfer` (TCP connect + proxy handshake through the chain, before the GET is sent):\n")
	for _, v := range r.Variants {
		p.w("%s %.1f ms", v.Name, v.MedianPre)
		if v.Name != r.Variants[len(r.Variants)-1].Name {
			p.w("; ")
		}
	}
	p.w(".\n\n## Setups\n\n| variant | chain | curl proxy args |\n|---|---|---|\n")
	for _, v := range r.Variants {
		p.w("| %s | %s | `%s` |\n", v.Name, v.Setup, v.Curl)
	}
}

// expectations writes each variant's arithmetic time to first byte.
func (p *page) expectations(r *Results) {
	p.w("\n## Expectations (round trips of the emulated links only)\n\n")
	p.w("s = one segment RTT (12.5 ms), D = the end-to-end RTT (50 ms = 4 s). Every variant opens fresh TCP connections, except the relay-to-relay ones of relayd-native-warm (its pools); ")
	p.w("every chain variant ends, once the tunnel is up, with the GET and its answer crossing the whole path (1 D = 50 ms). ")
	p.w("SOCKS5 clients here (curl, relayd's `socks5://` hop dialer, dante) send the greeting, wait for the method choice, then send CONNECT: 2 round trips after TCP.\n\n")
	p.w("| variant | expected ms | chain setup (segment RTTs) | how |\n|---|---:|---:|---|\n")
	for _, v := range r.Variants {
		p.w("| %s | %.1f | %g | %s |\n", v.Name, v.Expected.Ms, v.Expected.SegRTTs, v.Expected.How)
	}
}

// throughput writes the downloads' table.
func (p *page) throughput(r *Results) {
	p.w("\n## Throughput: the native path against the SOCKS5-chained paths\n\n")
	p.w("One %d MiB download (`curl http://server:8000/bytes/N`, curl's `%%{speed_download}`) per variant per round, order rotated; same lab, after the TTFB rounds. Receive windows are capped (~160 KiB), so each TCP connection is window-limited by its RTT: direct moves one window per 50 ms, every chain one window per 12.5 ms segment (the split gain, ~4x on paper; bench/results/split.md has the full experiment). What this compares is whether the native path carries as much as the SOCKS5-chained paths.\n\n", r.TputSize>>20)
	p.w("| variant | median Mbit/s | ratio to direct | samples (Mbit/s) | failed |\n|---|---:|---:|---|---:|\n")
	for _, t := range r.Throughput {
		var xs []string
		for _, x := range t.MbitPerS {
			xs = append(xs, fmt.Sprintf("%.0f", x))
		}
		p.w("| %s | %.1f | %.2fx | %s | %d |\n", t.Name, t.Median, t.Ratio, strings.Join(xs, ", "), t.Failed)
	}
}

// projections writes what is not built, by arithmetic.
func (p *page) projections(r *Results) {
	p.w("\nNot built, so not measured (arithmetic only):\n\n")
	for _, pr := range r.Projections {
		p.w("- **%s**: %.1f ms (%.2fx direct). %s\n", pr.What, pr.Ms, pr.Ms/expectations[vDirect].Ms, pr.How)
	}
}

// variant is the named variant's result; a variant not run reads as
// zero.
func (r *Results) variant(name string) *VariantResult {
	for _, v := range r.Variants {
		if v.Name == name {
			return v
		}
	}
	return &VariantResult{}
}

// reading writes what the numbers say: the target met or not, the native
// path against the peers, the entry on the client's host, TLS, and where
// the time goes.
func (p *page) reading(r *Results) {
	p.w("\n## Reading\n\n")
	d, warm, cold, h, ne := r.variant(vDirect), r.variant(vNativeWarm), r.variant(vNativeCold), r.variant(vHopByHop), r.variant(vNested)
	verdict := "**met**"
	if warm.Ratio > 1.3 || warm.Ratio == 0 {
		verdict = "**not met**"
	}
	p.w("- Target: %s. Native warm: %.1f ms median = %.2fx direct (%.1f ms): the 1.3x part is %s (arithmetic floor 1.25x: the client's own SOCKS5 exchange with r1 costs 3 first-segment round trips where direct pays one TCP handshake).\n",
		r.Target, warm.MedianMs, warm.Ratio, d.MedianMs, verdict)
	p.readingPeers(r, warm)
	p.readingEntryAndTLS(r, warm)
	p.w("- Warm pools against cold: %.1f ms saved (%.1f ms cold, %.2fx); arithmetic says 25 ms, the two relay-to-relay TCP handshakes (r1-r2, r2-r3).\n",
		cold.MedianMs-warm.MedianMs, cold.MedianMs, cold.Ratio)
	p.w("- Native against the SOCKS5 chains it replaces: %.1f ms less than relayd hop by hop (%.1f ms, %.2fx) and %.1f ms less than relayd nested SOCKS5 (%.1f ms, %.2fx).\n",
		h.MedianMs-warm.MedianMs, h.MedianMs, h.Ratio, ne.MedianMs-warm.MedianMs, ne.MedianMs, ne.Ratio)
	p.w("- Excess over arithmetic (median - expected) is processing: the lab emulator (TUN, user space), process wake-ups, the proxies' own work: direct %+.1f ms, native warm %+.1f ms, cold %+.1f ms, hop by hop %+.1f ms, nested %+.1f ms.\n",
		d.ExcessMs, warm.ExcessMs, cold.ExcessMs, h.ExcessMs, ne.ExcessMs)
	if len(r.Throughput) > 0 {
		p.readingThroughput(r)
	}
	for _, note := range r.Notes {
		p.w("- %s\n", note)
	}
}

// readingPeers sets native warm against the peer chains that ran, the
// fastest first.
func (p *page) readingPeers(r *Results, warm *VariantResult) {
	var peers []*VariantResult
	for _, name := range []string{vDante, vDanteNested, vGlider, vSquid} {
		if v := r.variant(name); v.MedianMs > 0 {
			peers = append(peers, v)
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].MedianMs < peers[j].MedianMs })
	if len(peers) == 0 {
		return
	}
	best := peers[0]
	rel := "faster than"
	if warm.MedianMs >= best.MedianMs {
		rel = "NOT faster than"
	}
	p.w("- Against the peers: native warm is %s the fastest peer chain, %s (%.1f ms, %.2fx), by %.1f ms; the others: ", rel, best.Name, best.MedianMs, best.Ratio, best.MedianMs-warm.MedianMs)
	for i, o := range peers[1:] {
		if i > 0 {
			p.w(", ")
		}
		p.w("%s %.1f ms (%.2fx)", o.Name, o.MedianMs, o.Ratio)
	}
	p.w(". glider's number flatters it: it answers the client's CONNECT with \"succeeded\" before it has dialled upstream, so a refused destination looks like a reset connection to the client; relayd answers only once the last relay has connected.\n")
}

// readingEntryAndTLS writes, for the variants that ran, the entry on the
// client's host with and without optimistic data, and TLS links against
// plain ones and per-relay certificates against the fleet secret's.
func (p *page) readingEntryAndTLS(r *Results, warm *VariantResult) {
	if lo, op := r.variant(vLocal), r.variant(vOptimistic); lo.MedianMs > 0 && op.MedianMs > 0 {
		verdict := "**met**"
		if op.Ratio > 0.8 {
			verdict = "**not met**"
		}
		p.w("- Entry on the client's host (as relayctl connect): %.1f ms (%.2fx direct) answering only once the chain is up; %.1f ms (%.2fx) with optimistic data, %.1f ms sooner. Target for optimistic data 0.8x direct: %s (arithmetic floor 0.625x).\n",
			lo.MedianMs, lo.Ratio, op.MedianMs, op.Ratio, lo.MedianMs-op.MedianMs, verdict)
	}
	if tw := r.variant(vTLSWarm); tw.MedianMs > 0 {
		p.w("- TLS links, warm: %.1f ms median (%.2fx direct) against %.1f ms over plain links: %+.1f %% (pooled links did their TLS handshakes before the request came).\n",
			tw.MedianMs, tw.Ratio, warm.MedianMs, (tw.MedianMs/warm.MedianMs-1)*100)
	}
	if id, tw := r.variant(vIDWarm), r.variant(vTLSWarm); id.MedianMs > 0 && tw.MedianMs > 0 {
		p.w("- Per-relay certificates (identity), warm: %.1f ms median (%.2fx direct) against %.1f ms on the fleet secret's certificates: %+.1f %%.\n",
			id.MedianMs, id.Ratio, tw.MedianMs, (id.MedianMs/tw.MedianMs-1)*100)
	}
}

// readingThroughput sets the native path's download against relayd's
// SOCKS5-chained paths', when both of those were measured.
func (p *page) readingThroughput(r *Results) {
	var nt, ht, nst float64
	for _, t := range r.Throughput {
		switch t.Name {
		case vNativeWarm:
			nt = t.Median
		case vHopByHop:
			ht = t.Median
		case vNested:
			nst = t.Median
		}
	}
	if ht > 0 && nst > 0 {
		p.w("- Throughput: native %.1f Mbit/s against relayd's SOCKS5-chained paths %.1f (hop by hop, %.3fx) and %.1f Mbit/s (nested, %.3fx): once the tunnel is up every variant splices the same bytes, so they should match.\n",
			nt, ht, nt/ht, nst, nt/nst)
	}
}
