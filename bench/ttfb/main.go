// Command ttfb measures time to first byte through a 4-segment 50 ms chain
// in the emulated WAN lab (bench/ttfb/topology.yaml: client-r1-r2-r3-server
// at 12.5 ms RTT per segment, plus a direct 50 ms client-server link).
//
// It brings the lab up (`relayctl lab up`), starts the chains it compares on
// the relay nodes and the client node (extra relayd processes on their own
// ports, dante and squid), checks every chain answers, then measures -runs rounds; in each
// round every variant runs one `curl http://server:8000/bytes/1` from the
// client node (order rotated per round) and the sample is curl's
// %{time_total}: connecting through the chain, sending the request and
// receiving the whole 1-byte answer. It reads the lab's self-check and tears
// everything down, also on error or SIGINT/SIGTERM. Results go to
// bench/results/ttfb.{json,md}.
//
// Only lab addresses (10.77/16, inside network namespaces) are used.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
)

// Variant names, in table order.
const (
	vDirect      = "direct"
	vNativeWarm  = "relayd-native-warm"
	vNativeCold  = "relayd-native-cold"
	vTLSWarm     = "relayd-tls-warm"
	vIDWarm      = "relayd-tls-id-warm"
	vLocal       = "relayd-client-entry"
	vOptimistic  = "relayd-client-entry-optimistic"
	vHopByHop    = "relayd-hop-by-hop"
	vNested      = "relayd-nested"
	vDante       = "dante-hop-by-hop"
	vDanteNested = "dante-nested-proxychains"
	vGlider      = "glider-forward-chain"
	vSquid       = "squid-parents"
)

var allVariants = []string{vDirect, vLocal, vOptimistic, vNativeWarm, vTLSWarm, vIDWarm, vNativeCold, vHopByHop, vNested, vDante, vDanteNested, vGlider, vSquid}

// Throughput is measured for the native path against the SOCKS5-chained
// paths it replaces, with direct as the reference.
var tputVariants = []string{vDirect, vNativeWarm, vTLSWarm, vIDWarm, vHopByHop, vNested}

// Ports of what this driver starts on relay nodes. The lab's own relayd
// serves SOCKS5 on 1080 and the native protocol on 7000 on every relay.
const (
	portNativeCold = 1090 // r1 (pools off) -> relay listeners r2:7001, r3:7001 (pools off)
	portHopByHop   = 1091 // r1 -> r2:1091 -> r3:1080 (the lab's relayd, no next)
	portNested     = 1092 // r1: --next socks5://r2:1080 --next socks5://r3:1080
	portNativeWarm = 1093 // r1 (pools on) -> relay listeners r2:7002, r3:7002 (pools on)
	portGlider     = 1094 // glider on r1 (forward chain r2,r3), r2, r3
	portDante      = 1081 // dante hop by hop (routes via the next relay's sockd)
	portDantePlain = 1082 // plain dante on r1, r2, r3 for the client's nested chain
	portSquid      = 3128
	portTLSWarm    = 1095 // as portNativeWarm, every relay with --transport tls
	portIDWarm     = 1098 // as portTLSWarm, every relay on its own identity from an operator CA
	portLocal      = 1096 // relayd on the client node, chained over TLS from r1 on (as relayctl connect)
	portOptimistic = 1097 // as portLocal, with --optimistic-data
	relayPortR1TLS = 7004 // r1's relay listener for the client-node entries (TLS)
	relayPortCold  = 7001
	relayPortWarm  = 7002
	relayPortTLS   = 7003
	relayPortID    = 7005
)

// Expectation is the arithmetic time to first byte of a variant, in round
// trips of the emulated links only (no processing time).
type Expectation struct {
	Ms      float64 `json:"ms"`
	SegRTTs float64 `json:"setup_segment_rtts"` // chain setup, in 12.5 ms segment round trips
	How     string  `json:"how"`
}

// expectations: s = 12.5 ms segment RTT, D = 50 ms end-to-end RTT. Every
// chain variant ends with the HTTP request/response over the whole path
// (one D). SOCKS5 clients here (curl, relayd, dante) do not pipeline: the
// greeting and the CONNECT are two round trips.
var expectations = map[string]Expectation{
	vDirect:      {100, 0, "TCP handshake to the server (1 D) + request/response (1 D) = 2 D"},
	vNativeWarm:  {125, 6, "client-r1: TCP, SOCKS5 greeting, CONNECT..reply (3 s); over pooled conns the header crosses r1-r2-r3 and the status comes back (2 s), r3-server TCP (1 s) = 6 s = 75 ms; + request/response 1 D"},
	vTLSWarm:     {125, 6, "as relayd-native-warm: the pooled links finished their TLS handshakes before the request came"},
	vIDWarm:      {125, 6, "as relayd-tls-warm: per-relay certificates change whom the handshake proves, not its round trips"},
	vLocal:       {100, 4, "the entry is on the client's host (as relayctl connect is): its SOCKS5 exchange costs no segment; over pooled TLS links the header crosses client-r1-r2-r3 (1.5 s), r3-server TCP (1 s), the status comes back (1.5 s) = 4 s = 50 ms; + request/response 1 D"},
	vOptimistic:  {62.5, 0, "as relayd-client-entry, but the entry answers \"succeeded\" at once and the GET rides with the header: one way client->r3 (1.5 s), r3-server TCP (1 s), GET r3->server (0.5 s), answer server->client (2 s) = 5 s = 62.5 ms (0.625x: the chain's setup hides under the request's own trip)"},
	vNativeCold:  {150, 8, "client-r1: TCP, SOCKS5 greeting, CONNECT..reply (3 s); r1-r2: TCP + header..status (2 s); r2-r3: TCP + header..status (2 s); r3-server: TCP (1 s) = 8 s = 100 ms; + request/response 1 D"},
	vHopByHop:    {175, 10, "each relay runs a full SOCKS5 client to the next: client-r1, r1-r2, r2-r3 each TCP + greeting + CONNECT..reply (3 s each); r3-server TCP (1 s) = 10 s = 125 ms; + 1 D"},
	vNested:      {200, 12, "client-r1 3 s; r1 alone: TCP r2 (1 s), greeting r2 (1 s), CONNECT r3 via r2 incl. r2's TCP to r3 (2 s), greeting r3 through r2 (2 s), CONNECT server via r2,r3 incl. r3's TCP (3 s) = 9 s; total 12 s = 150 ms; + 1 D"},
	vDante:       {175, 10, "as relayd hop by hop (dante routes to the next sockd with its own SOCKS5 client): 10 s = 125 ms; + 1 D"},
	vDanteNested: {250, 16, "the client nests: TCP r1 (1 s), greeting r1 (1 s), CONNECT r2 incl. r1's TCP to r2 (2 s), greeting r2 (2 s), CONNECT r3 incl. r2's TCP (3 s), greeting r3 (3 s), CONNECT server incl. r3's TCP (4 s) = 16 s = 200 ms; + 1 D"},
	vGlider:      {162.5, 9, "every glider answers CONNECT at once and dials upstream after (the client is told \"succeeded\" at 3 s and sends its GET, which waits at r1); r1 nests from 2.5 s: TCP r2 (1 s), greeting r2 (1 s), CONNECT r3 answered by r2 at once (1 s) while r2 dials r3, greeting r3 through r2 (2 s), CONNECT server answered by r3 at once (2 s) while r3 dials the server; the GET then crosses r1-server (1.5 s) and the answer server-client (2 s): 13 s = 162.5 ms"},
	vSquid:       {137.5, 7, "HTTP CONNECT is one round trip per hop: client-r1, r1-r2, r2-r3 each TCP + CONNECT..200 (2 s each); r3-server TCP (1 s) = 7 s = 87.5 ms; + 1 D"},
}

// What is not built, so not measured (arithmetic only).
var projections = []Projection{}

// Projection is an arithmetic expectation for something not built yet.
type Projection struct {
	What string  `json:"what"`
	Ms   float64 `json:"ms"`
	How  string  `json:"how"`
}

// Sample is one measured request.
type Sample struct {
	Round    int     `json:"round"`
	Order    int     `json:"order"`
	TotalMs  float64 `json:"total_ms"`
	Connect  float64 `json:"connect_ms"`     // TCP connect to the server or the proxy
	PreXfer  float64 `json:"pretransfer_ms"` // incl. the proxy handshake / CONNECT
	StartMs  float64 `json:"starttransfer_ms"`
	OK       bool    `json:"ok"`
	Attempts int     `json:"attempts"`
	Error    string  `json:"error,omitempty"`
	FirstErr string  `json:"first_error,omitempty"`
}

// VariantResult holds one variant's samples and statistics.
type VariantResult struct {
	Name        string      `json:"name"`
	Setup       string      `json:"setup"`
	Curl        string      `json:"curl_proxy_args"`
	Samples     []Sample    `json:"samples"`
	OK          int         `json:"ok"`
	Failed      int         `json:"failed"`
	MedianMs    float64     `json:"median_ms"`
	P90Ms       float64     `json:"p90_ms"`
	MinMs       float64     `json:"min_ms"`
	MaxMs       float64     `json:"max_ms"`
	MedianPre   float64     `json:"median_pretransfer_ms"`
	Ratio       float64     `json:"ratio_to_direct"`
	Expected    Expectation `json:"expected"`
	ExcessMs    float64     `json:"median_minus_expected_ms"`
	ExpectRatio float64     `json:"expected_ratio_to_direct"`
}

// TputResult is one variant's downloads in the throughput comparison.
type TputResult struct {
	Name     string    `json:"name"`
	MbitPerS []float64 `json:"mbit_per_s"` // one per successful download
	Failed   int       `json:"failed"`
	Median   float64   `json:"median_mbit_per_s"`
	Ratio    float64   `json:"ratio_to_direct"`
}

// Results is ttfb.json.
type Results struct {
	Date        time.Time         `json:"date"`
	Command     string            `json:"command"`
	Driver      []string          `json:"driver_argv"`
	Runs        int               `json:"runs"`
	Topology    string            `json:"topology"`
	Machine     Machine           `json:"machine"`
	Versions    map[string]string `json:"versions"`
	Method      string            `json:"method"`
	DurationS   float64           `json:"duration_s"`
	Valid       *bool             `json:"valid"`                // lab self-check after the runs; nil: not read
	TTFBValid   *bool             `json:"ttfb_valid,omitempty"` // self-check read after the TTFB rounds, before the downloads
	Problems    []string          `json:"problems,omitempty"`
	Error       string            `json:"error,omitempty"`
	Warmup      []string          `json:"warmup_failures,omitempty"`
	Variants    []*VariantResult  `json:"variants"`
	Projections []Projection      `json:"projections_not_measured"`
	Throughput  []*TputResult     `json:"throughput,omitempty"`
	TputSize    int64             `json:"throughput_size_bytes,omitempty"`
	Target      string            `json:"target"`
	Notes       []string          `json:"notes,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine = labpeer.Machine

type config struct {
	runs      int
	warmup    int
	outDir    string
	topology  string
	relayctl  string
	stateRoot string
	cmdline   string
	maxTime   int
	notesFile string
	report    bool
	glider    string
	tputSize  int64
	tputRuns  int
}

func main() {
	var c config
	flag.IntVar(&c.runs, "runs", 50, "measured rounds (each round: one request per variant, order rotated)")
	flag.IntVar(&c.warmup, "warmup", 3, "unrecorded requests per variant before measuring")
	flag.StringVar(&c.outDir, "out", "bench/results", "directory for ttfb.json and ttfb.md")
	flag.StringVar(&c.topology, "topology", "bench/ttfb/topology.yaml", "lab topology")
	flag.StringVar(&c.relayctl, "relayctl", "bin/relayctl", "relayctl binary (relayd must be next to it)")
	flag.StringVar(&c.stateRoot, "state-dir", lab.DefaultStateRoot, "the labs' state directory")
	flag.StringVar(&c.cmdline, "cmdline", "", "command line to record (default: the driver's own)")
	flag.IntVar(&c.maxTime, "max-time", 20, "curl --max-time per request, seconds")
	flag.StringVar(&c.notesFile, "notes", "", "file of notes (one per line) to put in the report")
	flag.StringVar(&c.glider, "glider", "bench/.bin/glider", "glider binary (bench/run-ttfb-bench.sh builds it)")
	flag.Int64Var(&c.tputSize, "tput-size", 32<<20, "download size of the throughput comparison, bytes (0: skip it)")
	flag.IntVar(&c.tputRuns, "tput-runs", 5, "throughput rounds (one download per variant each)")
	flag.BoolVar(&c.report, "report-only", false, "only rewrite ttfb.md from an existing ttfb.json (with -notes: replace its notes)")
	flag.Parse()
	if c.cmdline == "" {
		c.cmdline = strings.Join(os.Args, " ")
	}
	if err := run(&c); err != nil {
		fmt.Fprintln(os.Stderr, "ttfb:", err)
		os.Exit(1)
	}
}

func run(c *config) error {
	if c.report {
		data, err := os.ReadFile(filepath.Join(c.outDir, "ttfb.json"))
		if err != nil {
			return err
		}
		var res Results
		if err := json.Unmarshal(data, &res); err != nil {
			return err
		}
		if c.notesFile != "" {
			res.Notes = readNotes(c.notesFile)
		}
		return save(c, &res)
	}
	if c.runs < 1 {
		return errors.New("need -runs >= 1")
	}
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root: run `sudo make bench-ttfb`")
	}
	if _, err := os.Stat(c.topology); err != nil {
		return err
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
		Runs:        c.runs,
		Topology:    c.topology,
		Machine:     labpeer.MachineInfo(),
		Versions:    versions(c),
		Method:      methodText(c),
		Projections: projections,
		Target:      "relayd native WARM (pools) <= 1.3x direct time to first byte, and faster than every peer chain",
	}
	if c.notesFile != "" {
		res.Notes = readNotes(c.notesFile)
	}
	measureLab(ctx, c, res)
	if err := save(c, res); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; partial results written")
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}

// readNotes reads one note per non-empty line.
func readNotes(path string) []string {
	var notes []string
	if b, err := os.ReadFile(path); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				notes = append(notes, l)
			}
		}
	}
	return notes
}

func save(c *config, res *Results) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.outDir, "ttfb.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.outDir, "ttfb.md"), []byte(report(res)), 0o644)
}

func methodText(c *config) string {
	return fmt.Sprintf("one `curl -sS -o /dev/null http://server:8000/bytes/1` per sample from the client node (through `relayctl lab exec`), "+
		"--max-time %d; the sample is curl's %%{time_total}: from curl's start (name lookup of the server or proxy from /etc/hosts), "+
		"TCP connect (to the server, or to r1), the proxy handshake through the whole chain (SOCKS5 greeting + CONNECT, or HTTP CONNECT), "+
		"sending the GET and receiving the whole answer (status line, headers and the 1 body byte; curl ends at the end of the body, not at a connection close). "+
		"A fresh curl and a fresh client TCP connection per sample. Relay-to-relay connections: fresh per sample for every variant "+
		"except relayd-native-warm, whose relays keep warm pools (relayd's default; relayd-native-cold runs with --pool-max-idle 0 on every relay). "+
		"%d round(s); in each round every variant once, order rotated by one per round; "+
		"TCP metrics flushed in every node before each sample; "+
		"a sample with curl error, http_code != 200 or size_download != 1 is retried once, then recorded as failed; "+
		"%d unrecorded warm-up request(s) per variant first. Median and p90 (nearest rank) over the successful samples.",
		c.maxTime, c.runs, c.warmup)
}

var logf = labpeer.Logf
