package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// DefaultCalibrationPath is where `relayctl lab doctor` keeps what this
// machine holds, for lab up/run to compare a topology against.
const DefaultCalibrationPath = "/var/lib/relaymesh/lab-calibration.json"

// Calibration is what the packet engine held on this machine.
type Calibration struct {
	At      time.Time `json:"at"`
	CPUs    int       `json:"cpus"`
	Kernel  string    `json:"kernel"`
	Engine  string    `json:"engine"`
	Hops    int       `json:"hops"`
	LinkRTT float64   `json:"link_rtt_ms"`
	// Wake-up latency of a sleeping real-time thread, CPUs left to idle
	// and kept awake (what the engine does); gaps a spinning thread sees.
	Wake []wanemu.WakeStats `json:"wake"`
	Gaps wanemu.GapStats    `json:"gaps"`
	// HeldRateMbit is the highest per-link rate at which a download through
	// Hops links was valid; HeldLinkMbit and HeldPps the load it put on
	// the engine, summed over link directions. Zero: nothing held.
	HeldRateMbit float64              `json:"held_rate_mbit"`
	HeldLinkMbit float64              `json:"held_link_mbit"`
	HeldPps      float64              `json:"held_pps"`
	Runs         []wanemu.ChainResult `json:"runs"`
	// UnderLoad is the run with relays, a download through them and one
	// direct (underload.go); LoadHeld* its highest step valid by effect
	// whose download reached the rate. What topologies are judged
	// against when it was measured.
	UnderLoad        []LoadStep `json:"under_load,omitempty"`
	LoadHeldRateMbit float64    `json:"load_held_rate_mbit"`
	LoadHeldLinkMbit float64    `json:"load_held_link_mbit"`
	LoadHeldPps      float64    `json:"load_held_pps"`
}

// HeldForLabs is the summed load, Mbit/s, that a lab's runs can put on
// the engine and stay valid: under load when measured, else the engine's
// own chain.
func (c Calibration) HeldForLabs() float64 {
	if len(c.UnderLoad) > 0 {
		return c.LoadHeldLinkMbit
	}
	return c.HeldLinkMbit
}

// CalibrateOptions shape the measurement.
type CalibrateOptions struct {
	TrafficCmd []string  // the traffic service (relayctl lab traffic)
	RatesMbit  []float64 // per-link rates tried in order; default 100…1000
	Hops       int       // default 4
	LinkRTTMs  float64   // default 10
	Duration   time.Duration
	Progress   func(format string, args ...any)
	// RelaydPath runs the run under load's relays; "" leaves it out.
	RelaydPath string
	// LoadRatesMbit are its per-link rates; default 50…600.
	LoadRatesMbit []float64
}

// Calibrate measures the wake-up latency, then downloads through a chain
// of Hops links at rising rates until a rate is invalid twice in a row.
func Calibrate(ctx context.Context, o CalibrateOptions) (Calibration, error) {
	if o.Hops == 0 {
		o.Hops = 4
	}
	if o.LinkRTTMs == 0 {
		o.LinkRTTMs = 10
	}
	if len(o.RatesMbit) == 0 {
		o.RatesMbit = []float64{100, 200, 300, 400, 500, 600, 800, 1000}
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if len(o.LoadRatesMbit) == 0 {
		o.LoadRatesMbit = []float64{50, 100, 200, 300, 400, 600}
	}
	c := Calibration{At: time.Now().UTC(), CPUs: runtime.NumCPU(), Kernel: kernelRelease(),
		Engine: wanemu.CurrentConfig().String(), Hops: o.Hops, LinkRTT: o.LinkRTTMs}
	for _, awake := range []bool{false, true} {
		w := wanemu.MeasureWake(3*time.Second, 500_000, awake)
		o.Progress("wake-up latency (CPUs kept awake: %v): p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.1f ms",
			awake, float64(w.P50Ns)/1e3, float64(w.P99Ns)/1e3, float64(w.P999Ns)/1e3, float64(w.MaxNs)/1e6)
		c.Wake = append(c.Wake, w)
	}
	c.Gaps = wanemu.MeasureGaps(3 * time.Second)
	o.Progress("a spinning thread: %.1f %% of the time in gaps over 20 us, %d gaps over 0.3 ms (%.1f ms in all), the longest %.2f ms",
		c.Gaps.LostPercent, c.Gaps.Over300us, float64(c.Gaps.Over300usNs)/1e6, float64(c.Gaps.MaxNs)/1e6)
	prefix := "rmdoc" + strconv.Itoa(os.Getpid()%100000) + "-"
	for _, rate := range o.RatesMbit {
		var ok bool
		for attempt := 1; attempt <= 2 && !ok; attempt++ {
			pathS := o.LinkRTTMs / 1e3 * float64(o.Hops)
			spec := wanemu.ChainSpec{Prefix: prefix, Hops: o.Hops, ServerCmd: o.TrafficCmd,
				Warmup: 1500 * time.Millisecond, Duration: o.Duration,
				Link: wanemu.Params{DelayNs: int64(o.LinkRTTMs * 1e6 / 2), RateBps: int64(rate * 1e6),
					QueueBytes: max(64<<10, int(rate*1e6/8*pathS))}}
			r, err := wanemu.MeasureChain(ctx, spec)
			if err != nil {
				return c, err
			}
			c.Runs = append(c.Runs, r)
			verdict := "valid"
			if !r.Valid() {
				verdict = "invalid: " + firstLine(r.Invalid)
			}
			o.Progress("%d links at %4.0f Mbit/s: %6.0f Mbit/s and %6.0f packets/s summed over links, p99 lateness %.2f ms, %s",
				o.Hops, rate, r.LinkMbit, r.LinkPps, float64(r.P99LatenessNs)/1e6, verdict)
			// A flow that cannot reach the rate (the endpoints ran out of
			// CPU first) says nothing about higher rates.
			ok = r.Valid() && r.GoodputMbit > 0.8*rate*1448/1500
			if r.Valid() && r.LinkMbit > c.HeldLinkMbit {
				c.HeldRateMbit, c.HeldLinkMbit, c.HeldPps = rate, r.LinkMbit, r.LinkPps
			}
		}
		if !ok {
			break
		}
	}
	if o.RelaydPath == "" {
		return c, nil
	}
	steps, err := calibrateUnderLoad(ctx, o)
	c.UnderLoad = steps
	for _, s := range steps {
		if s.Valid && s.Reached() && s.LinkMbit > c.LoadHeldLinkMbit {
			c.LoadHeldRateMbit, c.LoadHeldLinkMbit, c.LoadHeldPps = s.RateMbit, s.LinkMbit, s.LinkPps
		}
	}
	return c, err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func kernelRelease() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// SaveCalibration writes c to path (creating its directory).
func SaveCalibration(path string, c Calibration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// LoadCalibration reads what SaveCalibration wrote.
func LoadCalibration(path string) (Calibration, error) {
	var c Calibration
	data, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Demand is an estimate of the heaviest load one download can put on the
// engine in a topology: over every path from the client through relays to
// a server (at most 5 links), the rate one TCP flow can reach on its
// slowest segment (each link's rate, the receiver's window over the link's
// RTT, and the sender's default 4 MiB send buffer), times the links it
// crosses. Relays split the flow, so every segment runs at that rate.
type Demand struct {
	LinkMbit float64  `json:"link_mbit"` // summed over the path's links
	FlowMbit float64  `json:"flow_mbit"`
	Path     []string `json:"path"`
}

// windowShare is the part of tcp_rmem's max the kernel advertises as the
// window (net.ipv4.tcp_adv_win_scale): measured 0.62 here.
const windowShare = 0.62

// The kernel's default autotuning limits (tcp_rmem's and tcp_wmem's max),
// bytes, for nodes whose topology does not set them.
const (
	defaultRecvBufferBytes = 6 << 20
	defaultSendBufferBytes = 4 << 20
)

// EstimateDemand computes Demand for topo.
func EstimateDemand(topo *topology.Topology) Demand {
	type edge struct {
		to    string
		rttMs float64
		rate  float64
	}
	adj := map[string][]edge{}
	for _, l := range topo.Links {
		ab, ba := l.OneWayNs()
		rtt := float64(ab+ba) / 1e6
		rate := l.RateMbit
		if rate <= 0 {
			rate = topology.DefaultRateMbit
		}
		adj[l.Between[0]] = append(adj[l.Between[0]], edge{l.Between[1], rtt, rate})
		adj[l.Between[1]] = append(adj[l.Between[1]], edge{l.Between[0], rtt, rate})
	}
	// memMax is the third field (the autotuning limit) of node's
	// net.ipv4.<key>, or dflt, the kernel's default, when the topology
	// does not set it.
	memMax := func(node, key string, dflt float64) float64 {
		f := strings.Fields(topo.Sysctls(node)["net.ipv4."+key])
		if len(f) == 3 {
			if n, err := strconv.ParseFloat(f[2], 64); err == nil {
				return n
			}
		}
		return dflt
	}
	var best Demand
	var walk func(path []string, flow float64)
	walk = func(path []string, flow float64) {
		at := path[len(path)-1]
		for _, e := range adj[at] {
			if slices.Contains(path, e.to) {
				continue
			}
			role := topo.Nodes[e.to].Role
			if role != "relay" && role != "server" {
				continue
			}
			// Download: e.to sends, at receives.
			rttS := math.Max(e.rttMs, 0.1) / 1e3
			f := math.Min(flow, e.rate)
			f = math.Min(f, windowShare*memMax(at, "tcp_rmem", defaultRecvBufferBytes)*8/rttS/1e6)
			f = math.Min(f, float64(hostnet.SendWindowOfWmem(int64(memMax(e.to, "tcp_wmem", defaultSendBufferBytes))))*8/rttS/1e6)
			next := append(slices.Clone(path), e.to)
			if role == "server" {
				if d := f * float64(len(next)-1); d > best.LinkMbit {
					best = Demand{LinkMbit: d, FlowMbit: f, Path: next}
				}
				continue
			}
			if len(next) <= 5 {
				walk(next, f)
			}
		}
	}
	walk([]string{topology.ClientNode}, math.Inf(1))
	return best
}

// CheckAgainst says whether topo's estimated peak fits what c held: nil,
// or a warning to print before starting the lab.
func (c Calibration) CheckAgainst(topo *topology.Topology) error {
	d := EstimateDemand(topo)
	if d.LinkMbit <= c.HeldForLabs() {
		return nil
	}
	return fmt.Errorf("topology %s: one download along %s can reach about %.0f Mbit/s (%.0f Mbit/s summed over its links), more than this machine's packet engine held valid (%.0f Mbit/s summed, `relayctl lab doctor` of %s): runs at that load may be invalid (lab run exits 3)",
		topo.Name, strings.Join(d.Path, "-"), d.FlowMbit, d.LinkMbit, c.HeldForLabs(), c.At.Format("2006-01-02 15:04"))
}
