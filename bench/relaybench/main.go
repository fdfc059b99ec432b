// Command relaybench measures single-stream loopback throughput and relay CPU
// cost through chains of SOCKS5 / HTTP CONNECT relays.
//
// For every relay kind, hop count and direction it starts the relay processes
// on loopback ephemeral ports (last hop first, each pointing at the next),
// connects through the chain to an in-process source/sink server, moves
// -size bytes over one TCP connection and records wall time and the CPU time
// (utime+stime, including reaped children) of all relay processes. Runs are
// interleaved round-robin across kinds and the table reports medians.
//
// Only loopback addresses are ever used.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/bytesize"
)

const (
	gibBytes       = 1 << 30
	patternBytes   = 1 << 20 // cyclic payload pattern
	ioBufBytes     = 1 << 20 // read buffer of the client and the sink
	probeBytes     = 1 << 20 // verified warm-up transfer per direction
	probeAttempts  = 6
	startTimeout   = 15 * time.Second
	handshakeLimit = 10 * time.Second
	floorKind      = "copyrelay" // the io.Copy relay all ratios refer to
)

// kindSpec describes one relay implementation.
type kindSpec struct {
	name    string
	front   string // "socks5", "http" or "none" (direct)
	maxHops int    // 0: direct only; -1: unlimited
	minHops int    // fewer hops are n/a (note says why)
	note    string // printed in the table, e.g. why hops are limited
	// binary returns the executable or a reason to skip the kind.
	binary func(c *config) (string, error)
	// args writes any config files into in.dir and returns the argv
	// (without argv[0]); it may set in.entryPort.
	args func(c *config, in *instance) ([]string, error)
}

// instance is one relay process of a chain.
type instance struct {
	idx       int // 0 = entry relay (client side)
	dir       string
	port      int   // port the previous hop (or the client) dials
	nextPort  int   // 0 = last hop, dials the target
	rest      []int // ports of every later hop, in order (native chains name them all)
	entryPort int   // port the client dials on the entry relay (defaults to port)
	alloc     func() int
}

type config struct {
	kinds      []string
	hops       []int
	dirs       []string
	sizeBytes  int64
	runs       int
	outDir     string
	name       string
	binDir     string
	paths      map[string]string // kind -> explicit binary path
	relaydSkip string
	relaydBase string // a second relayd binary, measured as "<kind>@base"
	baseLabel  string // what relaydBase was built from, for the report
	verify     bool
	cmdline    string
	keep       bool
	timeout    time.Duration
	workDir    string
	clkTck     float64 // clock ticks per second of /proc/PID/stat
}

// result is one measured transfer (or a failure/skip placeholder).
type result struct {
	Kind             string  `json:"kind"`
	Front            string  `json:"front"`
	Hops             int     `json:"hops"`
	Direction        string  `json:"direction"`
	Run              int     `json:"run"`
	SizeBytes        int64   `json:"sizeBytes"`
	WallSeconds      float64 `json:"wallSeconds,omitempty"`
	RateBps          float64 `json:"rateBitsPerSecond,omitempty"`
	RelayCPUSeconds  float64 `json:"relayCpuSeconds,omitempty"`
	CPUSecondsPerGiB float64 `json:"relayCpuSecondsPerGiB,omitempty"`
	DriverCPUSeconds float64 `json:"driverCpuSeconds,omitempty"`
	RelayProcs       int     `json:"relayProcs,omitempty"`
	Status           string  `json:"status"` // ok, failed, skipped, n/a
	Reason           string  `json:"reason,omitempty"`
}

type summary struct {
	Kind             string  `json:"kind"`
	Front            string  `json:"front"`
	Hops             int     `json:"hops"`
	Direction        string  `json:"direction"`
	RunsOK           int     `json:"runsOk"`
	Runs             int     `json:"runs"`
	MedianRateBps    float64 `json:"medianRateBitsPerSecond,omitempty"`
	MinRateBps       float64 `json:"minRateBitsPerSecond,omitempty"`
	MaxRateBps       float64 `json:"maxRateBitsPerSecond,omitempty"`
	MedianCPUPerGiB  float64 `json:"medianRelayCpuSecondsPerGiB,omitempty"`
	RateRatioToFloor float64 `json:"rateRatioToCopyrelay,omitempty"`
	CPURatioToFloor  float64 `json:"cpuRatioToCopyrelay,omitempty"`
	Status           string  `json:"status"`
	Reason           string  `json:"reason,omitempty"`
}

var allKinds = []string{"direct", "copyrelay", "relayd", "relayd-http", "relayd-native", "relayd-tls", "relayd-tls-id", "glider", "glider-tls", "stunnel", "dante", "microsocks", "squid"}

func main() {
	c := parseFlags()
	installSignalHandler()
	code := run(c)
	killAll()
	os.Exit(code)
}

func parseFlags() *config {
	c := &config{paths: map[string]string{}}
	kinds := flag.String("kinds", strings.Join(allKinds, ","), "comma list of relay kinds: "+strings.Join(allKinds, ","))
	hops := flag.String("hops", "1,3", "comma list of hop counts")
	dirs := flag.String("dirs", "download,upload", "directions: download (server→client), upload (client→server)")
	size := flag.String("size", "2GiB", "bytes per transfer (suffixes KiB MiB GiB, KB MB GB)")
	flag.IntVar(&c.runs, "runs", 3, "repetitions per (kind, hops, direction); medians are reported")
	flag.StringVar(&c.outDir, "out", "bench/results", "directory for the markdown and JSON results")
	flag.StringVar(&c.name, "name", "relay-loopback", "base name of the result files")
	flag.StringVar(&c.binDir, "bin", "bench/.bin", "directory holding relayd, copyrelay and glider binaries")
	pathFlags := map[string]*string{}
	for _, k := range []string{"relayd", "copyrelay", "glider", "danted", "microsocks", "squid"} {
		pathFlags[k] = flag.String(k, "", "path of the "+k+" binary (default: -bin dir, $PATH, /usr/sbin)")
	}
	flag.StringVar(&c.relaydSkip, "relayd-skip", "", "skip relayd with this reason (e.g. build failed)")
	flag.StringVar(&c.relaydBase, "relayd-base", "", "a second relayd binary; every relayd kind also runs with it as <kind>@base")
	flag.StringVar(&c.baseLabel, "base-label", "", "what -relayd-base was built from (e.g. a commit), for the report")
	flag.BoolVar(&c.verify, "verify", false, "verify the payload pattern of every measured transfer (costs driver CPU)")
	flag.StringVar(&c.cmdline, "cmdline", "", "command line to record in the report (default: this process's argv)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory with relay configs and logs")
	flag.DurationVar(&c.timeout, "timeout", 0, "deadline per transfer (default 60s + 10 s/GiB)")
	flag.Parse()
	for k, p := range pathFlags {
		c.paths[k] = *p
	}

	var err error
	if c.sizeBytes, err = bytesize.Parse(*size); err != nil || c.sizeBytes <= 0 {
		fatalf("bad -size %q: %v", *size, err)
	}
	if c.runs < 1 {
		fatalf("-runs must be >= 1")
	}
	for _, k := range splitList(*kinds) {
		if !contains(allKinds, k) {
			fatalf("unknown kind %q (known: %s)", k, strings.Join(allKinds, ","))
		}
		c.kinds = append(c.kinds, k)
	}
	if c.relaydBase != "" {
		c.kinds = addBaseKinds(c, c.kinds)
	}
	for _, h := range splitList(*hops) {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > 16 {
			fatalf("bad hop count %q", h)
		}
		c.hops = append(c.hops, n)
	}
	for _, d := range splitList(*dirs) {
		if d != "download" && d != "upload" {
			fatalf("bad direction %q", d)
		}
		c.dirs = append(c.dirs, d)
	}
	if c.timeout == 0 {
		c.timeout = 60*time.Second + time.Duration(float64(10*time.Second)*float64(c.sizeBytes)/gibBytes)
	}
	if c.cmdline == "" {
		c.cmdline = strings.Join(os.Args, " ")
	}
	c.clkTck = clockTicks()
	return c
}

// ---------------------------------------------------------------- main loop

func run(c *config) int {
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	wd, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		fatalf("%v", err)
	}
	os.Chmod(wd, 0o755) // squid workers run as "proxy" and must traverse it
	c.workDir = wd
	if !c.keep {
		workDirToRemove = wd
		defer os.RemoveAll(wd)
	} else {
		fmt.Printf("work dir (kept): %s\n", wd)
	}
	srv, err := newServer(c.timeout + time.Minute)
	if err != nil {
		fatalf("sink: %v", err)
	}
	target := srv.addr()

	// Resolve binaries up front; skipped kinds are reported once.
	skip := map[string]string{}
	bins := map[string]string{}
	for _, k := range c.kinds {
		s := specs[k]
		if s.binary == nil {
			continue
		}
		bin, err := s.binary(c)
		if err != nil {
			skip[k] = err.Error()
			fmt.Printf("NOTE: skipping %s: %v\n", k, err)
			continue
		}
		bins[k] = bin
	}

	var results []result
	add := func(r result) {
		results = append(results, r)
		switch r.Status {
		case "ok":
			fmt.Printf("  %-12s hops=%d %-8s run=%d  %6.2f Gbit/s  %5.2f CPU-s/GiB  (%d procs, %.2fs)\n",
				r.Kind, r.Hops, r.Direction, r.Run, r.RateBps/1e9, r.CPUSecondsPerGiB, r.RelayProcs, r.WallSeconds)
		default:
			fmt.Printf("  %-12s hops=%d %-8s run=%d  %s: %s\n", r.Kind, r.Hops, r.Direction, r.Run, r.Status, r.Reason)
		}
	}

	fmt.Printf("relaybench: size=%d bytes runs=%d kinds=%s hops=%v dirs=%v clk_tck=%.0f\n",
		c.sizeBytes, c.runs, strings.Join(c.kinds, ","), c.hops, c.dirs, c.clkTck)
	for run := 1; run <= c.runs; run++ {
		// Rotate the kind order every run so position effects hit all alike.
		order := append(append([]string(nil), c.kinds[(run-1)%len(c.kinds):]...), c.kinds[:(run-1)%len(c.kinds)]...)
		fmt.Printf("run %d/%d\n", run, c.runs)
		for hi, hops := range c.hops {
			for _, k := range order {
				s := specs[k]
				h := hops
				if s.maxHops == 0 {
					if hi != 0 {
						continue // direct: once per run
					}
					h = 0
				}
				base := result{Kind: k, Front: s.front, Hops: h, Run: run, SizeBytes: c.sizeBytes}
				placeholder := func(status, reason string) {
					if run > 1 && status != "failed" {
						return // skips and n/a are recorded once
					}
					for _, d := range c.dirs {
						r := base
						r.Direction, r.Status, r.Reason = d, status, reason
						add(r)
					}
				}
				if why, ok := skip[k]; ok {
					placeholder("skipped", why)
					continue
				}
				if (s.maxHops > 0 && h > s.maxHops) || h < s.minHops {
					placeholder("n/a", s.note)
					continue
				}
				measureKind(c, s, h, run, srv, target, base, add, placeholder)
			}
		}
	}
	killAll()

	sums := summarize(c, results)
	meta := collectMeta(c, bins)
	md := renderMarkdown(c, meta, sums)
	fmt.Println()
	fmt.Print(md)
	mdPath := filepath.Join(c.outDir, c.name+".md")
	jsonPath := filepath.Join(c.outDir, c.name+".json")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		fatalf("%v", err)
	}
	js, _ := json.MarshalIndent(map[string]any{"meta": meta, "summary": sums, "results": results}, "", "  ")
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		fatalf("%v", err)
	}
	fmt.Printf("\nwrote %s and %s\n", mdPath, jsonPath)
	return 0
}

func measureKind(c *config, s *kindSpec, hops, run int, srv *server, target *net.TCPAddr,
	base result, add func(result), placeholder func(string, string)) {
	ch := &chain{front: s.front}
	if hops > 0 {
		var err error
		ch, err = startChain(c, s, hops, fmt.Sprintf("run%d", run))
		if err != nil {
			placeholder("failed", "start: "+err.Error())
			return
		}
	}
	defer ch.stop()
	// Warm-up and end-to-end check: small verified transfers both ways.
	// Retried because some relays fail the first CONNECT after start.
	var probeErr error
	for attempt := 0; attempt < probeAttempts; attempt++ {
		if probeErr = probe(ch, srv, target); probeErr == nil {
			break
		}
		time.Sleep(time.Duration(200*(attempt+1)) * time.Millisecond)
	}
	if probeErr != nil {
		reason := "probe: " + probeErr.Error()
		for _, p := range ch.procs {
			if t := p.logTail(); t != "" {
				reason += "; " + p.name + " log: " + t
			}
		}
		placeholder("failed", reason)
		return
	}
	for _, d := range c.dirs {
		r := base
		r.Direction = d
		if err := measureOnce(c, ch, srv, target, &r); err != nil {
			r.Status, r.Reason = "failed", err.Error()
		} else {
			r.Status = "ok"
		}
		add(r)
	}
}

func probe(ch *chain, srv *server, target *net.TCPAddr) error {
	for _, d := range []string{"download", "upload"} {
		cn, err := dialThrough(ch.front, ch.entry, target)
		if err != nil {
			return fmt.Errorf("%s connect: %w", d, err)
		}
		_, err = transfer(cn, srv.pattern, d, probeBytes, true, 20*time.Second)
		cn.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func measureOnce(c *config, ch *chain, srv *server, target *net.TCPAddr, r *result) error {
	cn, err := dialThrough(ch.front, ch.entry, target)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cn.Close()
	pids := ch.pids()
	cpu0, _ := treeCPUSeconds(pids, c.clkTck)
	self0 := selfCPUSeconds()
	el, err := transfer(cn, srv.pattern, r.Direction, c.sizeBytes, c.verify, c.timeout)
	cpu1, n := treeCPUSeconds(pids, c.clkTck)
	self1 := selfCPUSeconds()
	if err != nil {
		return err
	}
	r.WallSeconds = el.Seconds()
	r.RateBps = float64(c.sizeBytes) * 8 / el.Seconds()
	r.RelayCPUSeconds = cpu1 - cpu0
	r.CPUSecondsPerGiB = r.RelayCPUSeconds / (float64(c.sizeBytes) / gibBytes)
	r.DriverCPUSeconds = self1 - self0
	r.RelayProcs = n
	return nil
}

// ---------------------------------------------------------------- helpers

func humanBytes(n int64) string {
	switch {
	case n >= gibBytes && n%(gibBytes/16) == 0:
		return strconv.FormatFloat(float64(n)/gibBytes, 'f', -1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB"
	default:
		return strconv.FormatInt(n, 10) + " B"
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "relaybench: "+format+"\n", a...)
	killAll()
	os.Exit(2)
}
