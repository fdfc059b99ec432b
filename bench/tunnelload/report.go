package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// record is one line of run-load-bench.sh's JSON lines: a result with the
// proxy's kind and the run's number.
type record struct {
	Kind string `json:"kind"`
	Run  int    `json:"run"`
	result
}

// report writes the Markdown table of the runs in path: per proxy and
// tunnel count, the medians over runs, and relayd's ratios to glider's.
func report(w io.Writer, path, cmdline string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	groups := map[string][]record{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		key := fmt.Sprintf("%s/%d", r.Kind, r.Tunnels)
		if groups[key] == nil {
			order = append(order, key)
		}
		groups[key] = append(groups[key], r)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	fmt.Fprintf(w, "# Many tunnels through one proxy\n\n")
	fmt.Fprintf(w, "%s, commit %s, `%s`, %d CPUs. Each proxy under a 20,000-descriptor limit, on loopback, a fresh\n",
		time.Now().UTC().Format("2006-01-02"), strings.TrimSpace(string(commit)), cmdline, runtime.NumCPU())
	fmt.Fprintf(w, "process per row and run; `bench/tunnelload` opens the tunnels (SOCKS5 CONNECT, 256 at a time) to its\n")
	fmt.Fprintf(w, "echo server, then every open tunnel does 64-byte round trips. Medians over runs (n = runs).\n")
	fmt.Fprintf(w, "Memory is the proxy's resident set after the busy phase less before the tunnels, per open tunnel;\n")
	fmt.Fprintf(w, "descriptors are its open files with the tunnels open and idle less before, per open tunnel.\n")
	fmt.Fprintf(w, "Of that memory, for a proxy whose metrics say (relayd's Go collector): its goroutine stacks and its\n")
	fmt.Fprintf(w, "heap in use, the same way (go_memstats_stack_inuse_bytes, go_memstats_heap_inuse_bytes); – where not read.\n\n")
	fmt.Fprintf(w, "| proxy | tunnels | n | opened | failed | round trips/s | KiB per tunnel | of it stacks | of it heap | descriptors per tunnel | open in s |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	med := map[string]map[string]float64{}
	for _, key := range order {
		rs := groups[key]
		m := map[string]float64{
			"opened": median(rs, func(r record) float64 { return float64(r.Opened) }),
			"failed": median(rs, func(r record) float64 { return float64(r.Failed) }),
			"rps":    median(rs, func(r record) float64 { return r.RoundTripsPS }),
			"kib":    median(rs, func(r record) float64 { return r.KiBPerTunnel }),
			"fds":    median(rs, func(r record) float64 { return r.FDsPerTunnel }),
			"open":   median(rs, func(r record) float64 { return r.OpenS }),
			"stack":  median(rs, func(r record) float64 { return r.StackKiBPerTunnel }),
			"heap":   median(rs, func(r record) float64 { return r.HeapKiBPerTunnel }),
		}
		med[key] = m
		fmt.Fprintf(w, "| %s | %d | %d | %.0f | %.0f | %.0f | %.1f | %s | %s | %.2f | %.1f |\n", rs[0].Kind, rs[0].Tunnels, len(rs),
			m["opened"], m["failed"], m["rps"], m["kib"], kibOrDash(m["stack"]), kibOrDash(m["heap"]), m["fds"], m["open"])
	}
	fmt.Fprintf(w, "\n")
	for _, n := range []int{3000, 9000} {
		a, b := med[fmt.Sprintf("relayd/%d", n)], med[fmt.Sprintf("glider/%d", n)]
		if a == nil || b == nil || b["rps"] == 0 || b["kib"] == 0 {
			continue
		}
		fmt.Fprintf(w, "%d tunnels: relayd/glider round trips/s %.2f×, KiB per tunnel %.2f×.\n", n, a["rps"]/b["rps"], a["kib"]/b["kib"])
	}
	return nil
}

// kibOrDash is a per-tunnel figure, or – where it was not read.
func kibOrDash(kib float64) string {
	if kib == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", kib)
}

func median(rs []record, f func(record) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
