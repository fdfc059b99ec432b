package main

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"
)

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(c *config, rs []result) []summary {
	type key struct {
		kind, dir string
		hops      int
	}
	var order []key
	groups := map[key][]result{}
	for _, r := range rs {
		k := key{r.Kind, r.Direction, r.Hops}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	// Stable presentation: by hops, direction, then the -kinds order.
	kindIdx := map[string]int{}
	for i, k := range c.kinds {
		kindIdx[k] = i
	}
	dirIdx := map[string]int{"download": 0, "upload": 1}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.hops != b.hops {
			return a.hops < b.hops
		}
		if a.dir != b.dir {
			return dirIdx[a.dir] < dirIdx[b.dir]
		}
		return kindIdx[a.kind] < kindIdx[b.kind]
	})
	var out []summary
	floor := map[key]summary{}
	for _, k := range order {
		g := groups[k]
		s := summary{Kind: k.kind, Front: g[0].Front, Hops: k.hops, Direction: k.dir}
		var rates, cpus []float64
		var reasons []string
		for _, r := range g {
			if r.Status == "ok" {
				rates = append(rates, r.RateBps)
				cpus = append(cpus, r.CPUSecondsPerGiB)
				continue
			}
			if r.Status == "failed" {
				s.Runs++
			}
			if r.Reason != "" && !contains(reasons, r.Reason) {
				reasons = append(reasons, r.Reason)
			}
			s.Status = r.Status
		}
		s.RunsOK = len(rates)
		s.Runs += len(rates)
		s.Reason = strings.Join(reasons, " // ")
		if len(rates) > 0 {
			s.Status = "ok"
			if s.RunsOK < s.Runs {
				s.Status = "partial"
			}
			s.MedianRateBps = median(rates)
			s.MedianCPUPerGiB = median(cpus)
			sort.Float64s(rates)
			s.MinRateBps, s.MaxRateBps = rates[0], rates[len(rates)-1]
		}
		if k.kind == floorKind && len(rates) > 0 {
			floor[key{"", k.dir, k.hops}] = s
		}
		out = append(out, s)
	}
	for i := range out {
		s := &out[i]
		f, ok := floor[key{"", s.Direction, s.Hops}]
		if !ok || s.MedianRateBps == 0 {
			continue
		}
		s.RateRatioToFloor = s.MedianRateBps / f.MedianRateBps
		if f.MedianCPUPerGiB > 0 {
			s.CPURatioToFloor = s.MedianCPUPerGiB / f.MedianCPUPerGiB
		}
	}
	return out
}

type meta struct {
	Date          string            `json:"date"`
	Commit        string            `json:"commit"` // of the working tree the bench ran from; relayd is built from it by run-relay-bench.sh
	Command       string            `json:"command"`
	DriverArgs    string            `json:"driverArgs"`
	NProc         int               `json:"nproc"`
	Kernel        string            `json:"kernel"`
	CPUModel      string            `json:"cpuModel"`
	GoVersion     string            `json:"goVersion"`
	SizeBytes     int64             `json:"sizeBytes"`
	Runs          int               `json:"runs"`
	ClockTicksHz  float64           `json:"clockTicksHz"`
	Sysctls       map[string]string `json:"sysctls"`
	PeerVersions  map[string]string `json:"peerVersions"`
	PeerBinaries  map[string]string `json:"peerBinaries"`
	VerifyPayload bool              `json:"verifyPayload"`
}

func collectMeta(c *config, bins map[string]string) meta {
	m := meta{
		Date: time.Now().Format(time.RFC3339), Command: c.cmdline, DriverArgs: strings.Join(os.Args, " "),
		NProc: runtime.NumCPU(), Kernel: readTrim("/proc/sys/kernel/osrelease"),
		GoVersion: runtime.Version(), SizeBytes: c.sizeBytes, Runs: c.runs, ClockTicksHz: c.clkTck,
		Sysctls: map[string]string{}, PeerVersions: map[string]string{}, PeerBinaries: bins,
		VerifyPayload: c.verify, Commit: gitCommit(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i >= 0 {
					m.CPUModel = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	for _, s := range []string{"net/ipv4/tcp_congestion_control", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem", "net/core/rmem_max", "net/core/wmem_max"} {
		m.Sysctls[strings.ReplaceAll(s, "/", ".")] = readTrim("/proc/sys/" + s)
	}
	m.Sysctls["lo.mtu"] = readTrim("/sys/class/net/lo/mtu")
	pkgs := map[string]string{"dante": "dante-server", "squid": "squid", "microsocks": "microsocks"}
	for k, bin := range bins {
		if pkg, ok := pkgs[k]; ok {
			out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
			if err == nil {
				m.PeerVersions[k] = pkg + " " + string(out)
			}
			continue
		}
		if bi, err := buildinfo.ReadFile(bin); err == nil {
			v := bi.Main.Path + " " + bi.Main.Version
			for _, d := range bi.Deps {
				if strings.HasSuffix(d.Path, "/"+strings.TrimSuffix(k, "-http")) {
					v = d.Path + " " + d.Version
				}
			}
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v += " rev " + s.Value
				}
			}
			m.PeerVersions[k] = v + " (" + bi.GoVersion + ")"
		}
	}
	return m
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.Join(strings.Fields(string(b)), " ")
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func renderMarkdown(c *config, m meta, sums []summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Relay loopback benchmark (single TCP stream)\n\n")
	fmt.Fprintf(&b, "- date: %s\n- commit: %s\n- command: `%s`\n", m.Date, m.Commit, m.Command)
	if m.DriverArgs != m.Command {
		fmt.Fprintf(&b, "- driver: `%s`\n", m.DriverArgs)
	}
	fmt.Fprintf(&b, "- machine: nproc %d, kernel %s, %s\n", m.NProc, m.Kernel, m.CPUModel)
	fmt.Fprintf(&b, "- %s; loopback MTU %s; congestion control %s; tcp_rmem %s; tcp_wmem %s\n",
		m.GoVersion, m.Sysctls["lo.mtu"], m.Sysctls["net.ipv4.tcp_congestion_control"],
		m.Sysctls["net.ipv4.tcp_rmem"], m.Sysctls["net.ipv4.tcp_wmem"])
	fmt.Fprintf(&b, "- transfer: %s per run (%d bytes), %d run(s) interleaved round-robin, medians shown\n",
		humanBytes(c.sizeBytes), c.sizeBytes, c.runs)
	if c.sizeBytes < 2*gibBytes {
		fmt.Fprintf(&b, "- **size below the 2 GiB of the issue: a smoke test, not the benchmark**\n")
	}
	var names []string
	for k := range m.PeerVersions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "- %s: %s\n", k, m.PeerVersions[k])
	}
	b.WriteString("\nGbit/s = payload bits / wall time (10-byte request header to last byte or upload ack). " +
		"CPU-s/GiB = utime+stime of all relay processes and their children (/proc/PID/stat) per GiB moved. " +
		"Ratios are to the io.Copy relay (copyrelay) at the same hops and direction. " +
		"download = server→client, upload = client→server. Chains are hop by hop (each relay points at the next).\n\n")
	b.WriteString("| kind | front | hops | direction | Gbit/s | CPU-s/GiB | Gbit/s ÷ io.Copy | CPU ÷ io.Copy | runs ok | note |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		rate, cpu := "–", "–"
		if s.RunsOK > 0 {
			rate = fmt.Sprintf("%.2f", s.MedianRateBps/1e9)
			if s.RunsOK > 1 {
				rate += fmt.Sprintf(" (%.2f–%.2f)", s.MinRateBps/1e9, s.MaxRateBps/1e9)
			}
			if s.Hops > 0 {
				cpu = fmt.Sprintf("%.2f", s.MedianCPUPerGiB)
			}
		}
		note := s.Reason
		if s.Status != "ok" {
			note = s.Status + ": " + note
		}
		if s.Status == "ok" && specs[s.Kind].note != "" {
			note = specs[s.Kind].note
		}
		note = strings.ReplaceAll(note, "|", "\\|")
		if len(note) > 300 {
			note = note[:300] + "…"
		}
		runs := fmt.Sprintf("%d/%d", s.RunsOK, s.Runs)
		if s.Status == "skipped" || s.Status == "n/a" {
			runs = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Kind, s.Front, s.Hops, s.Direction, rate, cpu,
			fmtRatio(s.RateRatioToFloor), fmtRatio(s.CPURatioToFloor), runs, note)
	}
	return b.String()
}

// gitCommit is the working tree's commit, marked when it held changes;
// "unknown" outside a git checkout.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		commit += " with uncommitted changes"
	}
	return commit
}
