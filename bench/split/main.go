// Command split reproduces the relay split experiment in the emulated WAN lab
// (configs/lab/split{1,2,3,4}.yaml and sweep-*.yaml): one window-limited TCP
// download over a 50 ms path, direct and through relay chains that cut the
// path into segments, with relayd, dante and squid side by side in the same
// lab.
//
// For every topology it brings the lab up (`relayctl lab up`), starts dante
// (port 1081) and squid (port 3128) on every relay node, chained hop by hop
// like relayd (each relay's first `next:` hop), warms every chain up, then
// measures -runs rounds of one -size download per implementation with curl
// from the client node (order rotated per round), reads the lab's self-check
// and tears everything down. Results go to bench/results/split.{json,md} and
// two SVG plots drawn here.
//
// Only lab addresses (10.77/16, inside network namespaces) are ever used.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
)

// Implementation names, in table order.
const (
	implDirect     = "direct"
	implRelayd     = "relayd"      // the client speaks SOCKS5 to r1, like dante's
	implRelaydHTTP = "relayd-http" // the client speaks HTTP CONNECT to r1, like squid's
	implDante      = "dante"
	implSquid      = "squid"
)

var allImpls = []string{implDirect, implRelayd, implRelaydHTTP, implDante, implSquid}
var relayImpls = []string{implRelayd, implRelaydHTTP, implDante, implSquid}

// likeForLike pairs each peer with relayd entered the same way: a SOCKS5
// handshake costs the client two round trips to r1 and an HTTP CONNECT
// one, so only chains entered alike compare the relays and not the
// client's protocol.
var likeForLike = []struct{ relayd, peer string }{
	{implRelayd, implDante},
	{implRelaydHTTP, implSquid},
}

// Ports of the peers started on relay nodes (relayd's are fixed by the lab).
const (
	dantePort = 1081
	squidPort = 3128
)

var defaultTopologies = []string{"split1", "split2", "split3", "split4",
	"sweep-40-10", "sweep-30-20", "sweep-25-25", "sweep-20-30", "sweep-10-40"}

// Targets relayd is held to (ratio to direct by number of segments).
var targets = map[int]float64{2: 1.85, 3: 2.7, 4: 3.5}

// Published is the split experiment this reproduces (dante/squid chains,
// 50 ms path, equal split, window-limited receivers), in % of direct.
type Published struct {
	Source   string                `json:"source"`
	RangePct map[string][2]float64 `json:"range_pct"` // segments -> [min, max]
}

var published = Published{
	Source:   "published split experiment, dante and squid chains, 50 ms path split equally, receive windows limited",
	RangePct: map[string][2]float64{"2": {154, 178}, "3": {176, 234}, "4": {179, 251}},
}

// Sample is one measured download.
type Sample struct {
	Round     int     `json:"round"`
	Order     int     `json:"order"` // position within the round
	BytesPerS float64 `json:"bytes_per_s"`
	// FirstByteMs is curl's time to the body's first byte (connection,
	// proxy handshakes and the request); StreamBytesPerS the body's bytes
	// over the time after it. Together they tell setup from streaming.
	FirstByteMs     float64 `json:"first_byte_ms,omitempty"`
	StreamBytesPerS float64 `json:"stream_bytes_per_s,omitempty"`
	OK              bool    `json:"ok"`
	Attempts        int     `json:"attempts"`
	Error           string  `json:"error,omitempty"`
	FirstErr        string  `json:"first_error,omitempty"` // why a retried run needed its retry
}

// ImplResult holds one implementation's samples in one topology.
type ImplResult struct {
	Samples   []Sample `json:"samples"`
	OK        int      `json:"ok"`
	Failed    int      `json:"failed"`
	MedianBps float64  `json:"median_bytes_per_s"`
	MinBps    float64  `json:"min_bytes_per_s"`
	MaxBps    float64  `json:"max_bytes_per_s"`
	Ratio     float64  `json:"ratio_to_direct,omitempty"` // median / direct median, same topology
	// Medians of the samples' FirstByteMs and StreamBytesPerS (runs that
	// recorded them).
	MedianFirstByteMs float64 `json:"median_first_byte_ms,omitempty"`
	MedianStreamBps   float64 `json:"median_stream_bytes_per_s,omitempty"`
}

// TopoResult is one topology's measurements.
type TopoResult struct {
	Name         string                 `json:"name"`
	File         string                 `json:"file"`
	Kind         string                 `json:"kind"` // "segments" or "position"
	Segments     int                    `json:"segments"`
	Chain        []string               `json:"chain"`          // relays client -> server
	SegmentRTTms []float64              `json:"segment_rtt_ms"` // per segment, client side first
	DirectRTTms  float64                `json:"direct_rtt_ms"`
	Started      time.Time              `json:"started"`
	DurationS    float64                `json:"duration_s"`
	Valid        *bool                  `json:"valid"` // lab self-check after the runs; nil: not read
	Problems     []string               `json:"problems,omitempty"`
	Error        string                 `json:"error,omitempty"` // the topology could not be (fully) measured
	Warmup       []string               `json:"warmup_failures,omitempty"`
	Impls        map[string]*ImplResult `json:"impls"`
}

// Results is split.json.
type Results struct {
	Date      time.Time `json:"date"`
	Command   string    `json:"command"`
	Driver    []string  `json:"driver_argv"`
	SizeBytes int64     `json:"size_bytes"`
	// CheckWindow is the self-check's window (a duration), "" in results
	// from before the driver set one (relayctl lab up's default, 1 s).
	CheckWindow string             `json:"check_window,omitempty"`
	Runs        int                `json:"runs"`
	Machine     Machine            `json:"machine"`
	Versions    map[string]string  `json:"versions"`
	Method      string             `json:"method"`
	Targets     map[string]float64 `json:"targets_ratio"`
	Published   Published          `json:"published"`
	Topos       []*TopoResult      `json:"topologies"`
	// Notes are observations added by hand after a run (rendered in
	// split.md under the reading; kept by -plot-only).
	Notes []string `json:"notes,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine = labpeer.Machine

type config struct {
	topologies []string
	runs       int
	size       int64
	outDir     string
	configDir  string
	relayctl   string
	transport  string
	stateRoot  string
	cmdline    string
	plotOnly   bool
	maxTime    int
}

func main() {
	var c config
	var topos string
	flag.StringVar(&topos, "topologies", strings.Join(defaultTopologies, ","), "comma-separated topologies (configs/lab/<name>.yaml) to run")
	flag.IntVar(&c.runs, "runs", 5, "measured rounds per topology (each round: one download per implementation)")
	flag.Int64Var(&c.size, "size", 64<<20, "bytes per download")
	flag.StringVar(&c.outDir, "out", "bench/results", "directory for split.json, split.md and the SVG plots")
	flag.StringVar(&c.configDir, "configs", "configs/lab", "directory of the topology files")
	flag.StringVar(&c.relayctl, "relayctl", "bin/relayctl", "relayctl binary (relayd must be next to it)")
	flag.StringVar(&c.transport, "transport", "tls", "the lab relays' links: tls or plain (relayctl lab up --transport)")
	flag.StringVar(&c.stateRoot, "state-dir", lab.DefaultStateRoot, "the labs' state directory")
	flag.StringVar(&c.cmdline, "cmdline", "", "command line to record (default: the driver's own)")
	flag.BoolVar(&c.plotOnly, "plot-only", false, "only regenerate split.md and the SVG plots from an existing split.json")
	flag.IntVar(&c.maxTime, "max-time", 180, "curl --max-time per download, seconds")
	flag.Parse()
	for _, t := range strings.Split(topos, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.topologies = append(c.topologies, t)
		}
	}
	if c.cmdline == "" {
		c.cmdline = strings.Join(os.Args, " ")
	}
	if err := run(&c); err != nil {
		fmt.Fprintln(os.Stderr, "split:", err)
		os.Exit(1)
	}
}

func jsonPath(c *config) string { return filepath.Join(c.outDir, "split.json") }

func run(c *config) error {
	if c.plotOnly {
		res, err := loadResults(jsonPath(c))
		if err != nil {
			return err
		}
		return writeReports(c.outDir, res)
	}
	if c.runs < 1 || c.size < 1 || len(c.topologies) == 0 {
		return errors.New("need -runs >= 1, -size >= 1 and at least one topology")
	}
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root: run `sudo make bench-split`")
	}
	for _, t := range c.topologies {
		if _, err := os.Stat(filepath.Join(c.configDir, t+".yaml")); err != nil {
			return fmt.Errorf("topology %s: %w", t, err)
		}
	}
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}

	// SIGINT/SIGTERM cancel the measurements; cleanup always runs.
	ctx, cancel := labpeer.CancelOnSignal()
	defer cancel()

	res := &Results{
		Date:        time.Now().UTC(),
		Command:     c.cmdline,
		Driver:      os.Args,
		SizeBytes:   c.size,
		CheckWindow: c.checkWindow().String(),
		Runs:        c.runs,
		Machine:     labpeer.MachineInfo(),
		Versions:    versions(c),
		Method:      methodText(c),
		Targets:     map[string]float64{},
		Published:   published,
	}
	for n, t := range targets {
		res.Targets[fmt.Sprint(n)] = t
	}
	// A subset run keeps the other topologies of an existing split.json.
	var kept []*TopoResult
	if old, err := loadResults(jsonPath(c)); err == nil && !sameSet(c.topologies, defaultTopologies) {
		if old.SizeBytes == c.size {
			for _, t := range old.Topos {
				if !contains(c.topologies, t.Name) {
					kept = append(kept, t)
				}
			}
		} else {
			return fmt.Errorf("%s holds -size %d results that a -size %d subset run cannot merge with and would discard: pass -out DIR (e.g. -out /tmp/split-smoke) or run every topology", jsonPath(c), old.SizeBytes, c.size)
		}
	}

	killStrays(c, c.topologies)
	var failed []string
	for _, name := range c.topologies {
		if ctx.Err() != nil {
			break
		}
		tr := measureTopology(ctx, c, name)
		res.Topos = append(res.Topos, tr)
		if tr.Error != "" {
			failed = append(failed, name+": "+tr.Error)
		}
		// Written after every topology: an interrupted run keeps what it has.
		all := append(append([]*TopoResult{}, kept...), res.Topos...)
		if err := saveAll(c, res, all); err != nil {
			return err
		}
	}
	res.Topos = append(kept, res.Topos...)
	if err := saveAll(c, res, res.Topos); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; partial results written")
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d topolog(ies) not fully measured:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

func saveAll(c *config, res *Results, topos []*TopoResult) error {
	r := *res
	r.Topos = sortTopos(topos)
	data, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(jsonPath(c), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return writeReports(c.outDir, &r)
}

// sortTopos orders topologies as defaultTopologies, unknown ones last.
func sortTopos(in []*TopoResult) []*TopoResult {
	rank := func(n string) int {
		for i, d := range defaultTopologies {
			if d == n {
				return i
			}
		}
		return len(defaultTopologies)
	}
	out := append([]*TopoResult{}, in...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].Name) < rank(out[j].Name) })
	return out
}

func loadResults(path string) (*Results, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// peakBps is above every split topology's window-limited bound (split4's
// is four times the direct ~27 Mbit/s), so size at it is the shortest any
// download takes.
const peakBps = 120e6

// checkWindow is the lab self-check's window (relayctl lab up --window):
// the shortest span a figure here is averaged over, one whole download,
// against which an emulator stall is weighed.
func (c *config) checkWindow() time.Duration {
	return max(time.Duration(float64(c.size)*8/peakBps*float64(time.Second)), time.Millisecond).Round(time.Millisecond)
}

func methodText(c *config) string {
	return fmt.Sprintf("one %d-byte HTTP download (GET http://server:8000/bytes/%d) per run with curl from the client node, --max-time %d; "+
		"bytes/s = curl speed_download; %d round(s) per topology, implementation order rotated per round; "+
		"a run with curl error, size_download != size or http_code != 200 is retried once, then recorded as failed; "+
		"TCP metrics flushed in every node before each run; 3 warm-up downloads of 1 MiB per chain before measuring",
		c.size, c.size, c.maxTime, c.runs)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !contains(b, x) {
			return false
		}
	}
	return true
}

var logf = labpeer.Logf
