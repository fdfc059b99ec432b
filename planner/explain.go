package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/relaymesh/relaymesh/pkg/bytesize"
)

// Diagram draws a plan on one line, RTTs on the arrows:
//
//	client ──12.5 ms──▶ r1 ──12.4 ms──▶ srv
//
// An estimated RTT is shown as ~12.5 ms, a stale one as 12.5 ms?, a
// segment striped over 4 connections as 12.5 ms ×4. A plan without
// segments (direct, not measured) is drawn as "(not measured)".
func Diagram(p Plan) string {
	if len(p.Segments) == 0 {
		return "(not measured)"
	}
	var b strings.Builder
	b.WriteString(p.Segments[0].From)
	for _, seg := range p.Segments {
		rtt := fmtMs(seg.RTTMs)
		if seg.Estimated {
			rtt = "~" + rtt
		}
		if seg.Stale {
			rtt += "?"
		}
		if seg.Stripes > 1 {
			rtt += fmt.Sprintf(" ×%d", seg.Stripes)
		}
		fmt.Fprintf(&b, " ──%s──▶ %s", rtt, seg.To)
	}
	return b.String()
}

// Explain renders a Result for a terminal: the best plan as a diagram with
// a table of its segments and its reasons, then direct, the alternatives
// with why they lost, and the notes.
func Explain(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s → %s (%s", r.Client, r.Destination, r.Direction)
	if r.SizeBytes > 0 {
		fmt.Fprintf(&b, ", %s: ranked by completion time", fmtSize(r.SizeBytes))
	}
	b.WriteString(")\n\n")
	kind := "chain"
	if len(r.Best.Chain) == 0 {
		kind = "direct"
	}
	fmt.Fprintf(&b, "best (%s): %s\n", kind, Diagram(r.Best))
	fmt.Fprintf(&b, "  %s\n", summary(r.Best))
	if t := transferLine(r.Best); t != "" {
		fmt.Fprintf(&b, "  %s\n", t)
	}
	if c := crossoverLine(r.Crossover); c != "" {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	b.WriteString("\n")
	writeSegments(&b, r.Best)
	writeReasons(&b, r.Best.Reasons, "  ")

	if len(r.Best.Chain) > 0 {
		fmt.Fprintf(&b, "\ndirect: %s\n", directLine(r))
		writeReasons(&b, r.Direct.Reasons, "  ")
	}
	if len(r.Alternatives) > 0 {
		b.WriteString("\nalternatives:\n")
		for i, p := range r.Alternatives {
			fmt.Fprintf(&b, "%d. %s\n   %s\n", i+1, Diagram(p), summary(p))
			if t := transferLine(p); t != "" {
				fmt.Fprintf(&b, "   %s\n", t)
			}
			if len(p.Reasons) > 0 {
				fmt.Fprintf(&b, "   %s\n", p.Reasons[0]) // why it lost
			}
		}
	}
	if legend := legend(r); legend != "" {
		fmt.Fprintf(&b, "\n%s\n", legend)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nnotes:\n")
		writeReasons(&b, r.Notes, "")
	}
	return b.String()
}

func directLine(r *Result) string {
	if len(r.Direct.Segments) == 0 {
		return r.Client + " ──?──▶ " + r.Destination + " (not measured)"
	}
	line := Diagram(r.Direct) + "  " + fmtBps(r.Direct.PredictedBps)
	if t := r.Direct.Transfer; t != nil {
		line += fmt.Sprintf(", %s in %s", fmtSize(t.SizeBytes), fmtDur(t.CompletionMs))
	}
	return line
}

// transferLine is a plan's completion time and its parts on one line; ""
// without a size.
func transferLine(p Plan) string {
	t := p.Transfer
	if t == nil {
		return ""
	}
	loss := ""
	if t.LossMs > 0 {
		loss = " + loss " + fmtDur(t.LossMs)
	}
	s := fmt.Sprintf("%s in %s (setup %s + ramp %s + steady %s%s), effective %s",
		fmtSize(t.SizeBytes), fmtDur(t.CompletionMs), fmtDur(t.SetupMs), fmtDur(t.RampMs), fmtDur(t.SteadyMs), loss, fmtBps(t.EffectiveBps))
	if t.Speedup > 0 && len(p.Chain) > 0 {
		s += fmt.Sprintf(", %.2f× sooner than direct", t.Speedup)
	}
	return s
}

// crossoverLine says from which size the best chain by steady rate beats
// direct; "" when there is no crossover to report.
func crossoverLine(c *Crossover) string {
	if c == nil {
		return ""
	}
	via := "the chain via " + strings.Join(c.Chain, ", ") + " (best steady rate)"
	switch c.Kind {
	case CrossoverAlways:
		return "crossover: " + via + " finishes sooner than direct at every size"
	case CrossoverNever:
		return "crossover: never: " + via + " does not finish sooner than direct for large transfers"
	}
	return fmt.Sprintf("crossover: %s finishes sooner than direct above %s (%d bytes)", via, fmtSize(c.Bytes), c.Bytes)
}

// summary is a plan's prediction on one line.
func summary(p Plan) string {
	if len(p.Segments) == 0 {
		return "no prediction"
	}
	le := ""
	if p.Bound {
		le = "≤ " // an upper bound: Plan.Bound
	}
	s := fmt.Sprintf("predicted %s%s (down %s, up %s), total RTT %s",
		le, fmtBps(p.PredictedBps), fmtBps(p.PredictedDownBps), fmtBps(p.PredictedUpBps), fmtMs(p.TotalRTTMs))
	if p.Speedup > 0 && len(p.Chain) > 0 {
		s += fmt.Sprintf(", %.2f× direct", p.Speedup)
	}
	return s
}

func writeSegments(b *strings.Builder, p Plan) {
	if len(p.Segments) == 0 {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tsegment\trtt\twindow\tlimit\tloss\trate\tflags")
	for i, seg := range p.Segments {
		window := fmtBytes(seg.WindowBytes) + " (" + seg.Receiver
		if seg.WindowAssumed {
			window += ", assumed"
		}
		window += ")"
		if seg.SendWindowBytes > 0 && seg.SendWindowBytes < seg.WindowBytes {
			window += ", send " + fmtBytes(seg.SendWindowBytes) + " (" + seg.Sender + ")"
		}
		limit, loss := "-", "-"
		if slices.Contains(seg.Unknown, UnknownCapacity) {
			limit = "unknown"
		}
		if slices.Contains(seg.Unknown, UnknownLoss) {
			loss = "unknown"
		}
		if seg.LimitBps > 0 {
			limit = fmtBps(seg.LimitBps) + " declared"
		}
		if seg.LearntBps > 0 {
			by, how := seg.Sender, " learnt ("
			switch seg.LearntSource {
			case LearntFromBench:
				by = "bench"
			case LearntFromProbe:
				how = " probed ("
			case LearntByReceiver:
				by = "received by " + seg.Receiver
			}
			learnt := fmtBps(seg.LearntBps) + how + by + ", " + fmtAge(seg.LearntAgeSec) + " ago)"
			if seg.LimitBps > 0 {
				limit += ", " + learnt
			} else {
				limit = learnt
			}
		}
		if seg.Loss > 0 || seg.LossSource != "" {
			loss = fmtPct(seg.Loss) + " (" + cmp.Or(seg.LossSource, "probes") + ")"
		}
		var flags []string
		if i == p.Bottleneck {
			flags = append(flags, "bottleneck ("+seg.LimitedBy+")")
		}
		if seg.Stripes > 1 {
			flags = append(flags, fmt.Sprintf("striped ×%d (one connection: %s)", seg.Stripes, fmtBps(seg.OneLinkBps)))
		}
		if seg.Estimated {
			flags = append(flags, "estimated")
		}
		if seg.Stale {
			flags = append(flags, fmt.Sprintf("stale (%.0f s)", seg.AgeSec))
		}
		if len(flags) == 0 {
			flags = append(flags, "-")
		}
		fmt.Fprintf(tw, "  %d\t%s→%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, seg.From, seg.To, fmtMs(seg.RTTMs),
			window, limit, loss, fmtBps(seg.RateBps), strings.Join(flags, ", "))
	}
	tw.Flush()
	b.WriteString("\n")
}

func writeReasons(b *strings.Builder, reasons []string, indent string) {
	for _, r := range reasons {
		fmt.Fprintf(b, "%s- %s\n", indent, r)
	}
}

// legend explains the diagram marks that occur in r.
func legend(r *Result) string {
	var est, stale, striped bool
	for _, p := range append([]Plan{r.Best, r.Direct}, r.Alternatives...) {
		for _, seg := range p.Segments {
			est, stale, striped = est || seg.Estimated, stale || seg.Stale, striped || seg.Stripes > 1
		}
	}
	var parts []string
	if est {
		parts = append(parts, "~ estimated RTT (not measured)")
	}
	if stale {
		parts = append(parts, "? stale RTT (older than the age limit)")
	}
	if striped {
		parts = append(parts, "×N segment striped over N TCP connections")
	}
	return strings.Join(parts, "; ")
}

// fmtBps formats a rate in bits per second with a unit: "84.2 Mbit/s".
func fmtBps(bps float64) string {
	for _, u := range []struct {
		scale float64
		name  string
	}{{1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if bps >= u.scale {
			return fmtNum(bps/u.scale) + " " + u.name
		}
	}
	return fmtNum(bps) + " bit/s"
}

// fmtDur formats a duration given in milliseconds: "180 ms" below a
// second, "1.25 s" above.
func fmtDur(ms float64) string {
	switch {
	case ms == 0:
		return "0 ms"
	case ms >= 1000:
		return fmtNum(ms/1000) + " s"
	}
	return fmtMs(ms)
}

// fmtAge formats an age in seconds: "42 s", "7 min".
func fmtAge(sec float64) string {
	if sec < 120 {
		return fmt.Sprintf("%.0f s", sec)
	}
	return fmt.Sprintf("%.0f min", sec/60)
}

// fmtSize formats a transfer size as given: decimal units, "100 KB".
func fmtSize(n int64) string { return bytesize.Format(n) }

// fmtMs formats milliseconds: "12.5 ms", "0.25 ms", "180 ms".
func fmtMs(ms float64) string { return fmtNum(ms) + " ms" }

// fmtNum formats with about three significant digits, no exponent.
func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtBytes formats a size: "64 KiB", "4 MiB", "1.5 MiB", "1000 B".
func fmtBytes(n int64) string {
	for _, u := range []struct {
		scale int64
		name  string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.scale {
			if n%u.scale == 0 {
				return strconv.FormatInt(n/u.scale, 10) + " " + u.name
			}
			return strconv.FormatFloat(float64(n)/float64(u.scale), 'f', 1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// fmtPct formats a fraction as a percentage: 0.042 → "4.2%", 0.95 → "95%".
func fmtPct(f float64) string {
	p := f * 100
	if math.Abs(p) < 10 {
		return strings.TrimSuffix(fmt.Sprintf("%.1f", p), ".0") + "%"
	}
	return fmt.Sprintf("%.0f%%", p)
}
