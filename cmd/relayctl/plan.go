package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/bytesize"
	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/planroute"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/pkg/udpask"
	"github.com/relaymesh/relaymesh/planner"
	"github.com/relaymesh/relaymesh/relay"
)

// envAdminToken is read when the registry does not carry the admin token
// (Consul): the relays' admin APIs need it for /v1/probe and /v1/info.
const envAdminToken = envvar.AdminToken

// planFlags are what plan, connect, bench and pac share.
type planFlags struct {
	reg         registryFlags
	dst         string
	matrixPath  string
	from        string
	direction   string
	maxHops     int
	minGain     float64
	errorMargin float64
	include     []string
	exclude     []string
	adminToken  string
	saveMatrix  string
	// Only plan has --size and --setup (bench has its own --size: the
	// bytes it moves); connect, bench and pac plan by steady rate.
	sizeBytes int64
	setup     string
	survey    string
	// shortlist tunes --survey shortlist (--shortlist-*).
	shortlist shortlist.Config
	// windowProbeBytes: plan and bench only (windowProbeFlag).
	windowProbeBytes int64
	// replans: connect only: its surveys start from the last plan's
	// (survey.Survey.Replans); nil elsewhere.
	replans *survey.Replans
	// own: connect only: what its own sockets taught
	// (survey.Survey.Own); nil elsewhere.
	own survey.OwnSends
	// benchHistory is the bench history file whose timed paths bound
	// their plans (readHistory); "" = none.
	benchHistory string
	// plansDir keeps, between runs of plan and bench, what each
	// shortlist plan learnt (keptPlans); "" = nothing kept.
	plansDir string
	// udpAsk asks relays for a shortlist plan's probes over UDP
	// (--udp-ask).
	udpAsk bool
	// probeCapacity has the relays measure the capacity of the relay
	// segments a plan leans on that nobody declared or learnt
	// (--probe-capacity).
	probeCapacity bool
	// maxStripes: plan, connect and pac (maxStripesFlag), the most
	// connections a segment between two relays is striped over; 0 = the
	// planner's default (bench).
	maxStripes int
}

// askKey is the survey's AskKey: with --udp-ask, on a fleet with
// transport tls whose secret and admin token this host holds.
func (f *planFlags) askKey() *udpask.Key {
	if !f.udpAsk {
		return nil
	}
	return f.reg.askKey(f.token())
}

// shortlistConfig is the shortlist's configuration from the
// --shortlist-* flags, checked (shortlist.CheckFlags).
func (f *planFlags) shortlistConfig() (shortlist.Config, error) {
	c := f.shortlist
	return c, c.CheckFlags(shortlist.FlagPrefixPlan)
}

// windowProbeFlag registers --window-probe with its default, bytes.
func (f *planFlags) windowProbeFlag(cmd *cobra.Command, defaultBytes int64) {
	f.windowProbeBytes = defaultBytes
	cmd.Flags().Var(sizeValue{&f.windowProbeBytes}, "window-probe", "bytes to download from the first relay to measure this host's receive window (0: from tcp_rmem)")
}

// maxStripesFlag registers --max-stripes: one definition for every
// command that plans and applies what it planned, so the name, default and
// help cannot drift between them.
func (f *planFlags) maxStripesFlag(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.maxStripes, "max-stripes", planner.DefaultMaxStripes, "most TCP connections a segment between two relays may be striped over (1: no striping)")
}

// checkMaxStripes refuses a --max-stripes the planner would refuse, in
// the flag's own terms.
func (f *planFlags) checkMaxStripes() error {
	if f.maxStripes < 0 || f.maxStripes > planner.DefaultMaxStripes {
		return fmt.Errorf("--max-stripes %d: want 1 (no striping) to %d connections", f.maxStripes, planner.DefaultMaxStripes)
	}
	return nil
}

func (f *planFlags) register(cmd *cobra.Command, withOutput bool) {
	f.reg.register(cmd)
	if !withOutput {
		_ = cmd.Flags().MarkHidden("output")
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dst, "dst", "", "destination: a region or relay name of the fleet (e.g. tokyo), or host:port (required)")
	_ = cmd.RegisterFlagCompletionFunc("dst", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return f.reg.destinations(), cobra.ShellCompDirectiveNoFileComp
	})
	fl.StringVar(&f.matrixPath, "matrix", "", "plan offline on this JSON matrix file instead of measuring (see --save-matrix)")
	fl.StringVar(&f.from, "from", survey.ClientNode, "with --matrix: the node the plan starts from")
	fl.StringVar(&f.direction, "direction", "down", "down (download), up (upload) or both")
	fl.IntVar(&f.maxHops, "max-hops", planner.DefaultMaxHops, "most relays in a chain (0: direct only)")
	fl.Float64Var(&f.minGain, "min-gain", planner.DefaultMinGain, "speed-up over direct a chain needs to be chosen, a fraction (0.10 = 10 %; 0: any gain)")
	fl.Float64Var(&f.errorMargin, "error-margin", planner.DefaultErrorMargin, "chains predicting within this fraction of the fastest tie; the fewest relays win (0: no ties)")
	fl.StringSliceVar(&f.include, "include", nil, "only consider these relays (comma-separated names)")
	fl.StringSliceVar(&f.exclude, "exclude", nil, "never use these relays (comma-separated names)")
	fl.StringVar(&f.adminToken, "admin-token", "", "the relays' admin API token (default: the fleet file's admin_token, else $"+envAdminToken+")")
	fl.StringVar(&f.benchHistory, "bench-history", historyPath(), "relayctl bench's history file: recent timings cap and order the plans (\"\": ignore it)")
	fl.StringVar(&f.plansDir, "plans-dir", plansDir(), "where shortlist plans are kept per fleet, for the next plan to start from (\"\": keep nothing)")
	fl.StringVar(&f.survey, "survey", string(survey.ModeAuto), "full (every relay), shortlist (by coordinates) or auto (shortlist if the relays publish them)")
	shortlist.AddFlags(fl, shortlist.FlagPrefixPlan, &f.shortlist, shortlist.Defaults())
	fl.BoolVar(&f.udpAsk, "udp-ask", true, "ask relays for probes in one UDP datagram, else HTTPS (tls fleets; false: HTTPS only)")
	fl.StringVar(&f.saveMatrix, "save-matrix", "", "write the measured matrix to this file (replay it with --matrix, e.g. for what-if planning)")
	fl.BoolVar(&f.probeCapacity, "probe-capacity", true, "measure unknown relay-to-relay capacities the plans lean on, then replan (false: plan on bounds)")
}

// planned is a plan with what applying it needs: each hop's addresses.
type planned struct {
	Result *planner.Result
	Relays map[string]registry.Relay // by name, for every relay of the matrix
	Target survey.Target
	Notes  []string // from the survey
	// FromHere names the relays this host reached itself in the survey.
	FromHere []string
	// Matrix and Request are what Result was searched from.
	Matrix  *planner.Matrix
	Request planner.Request
	// Windows are the receive-window probes made (--window-probe).
	Windows []windowProbe
}

// choose makes chain the plan to use: the plan's pick or one of its
// alternatives (a plan searched with only chain's relays has it among
// them, unless a segment of it is unusable).
func (p *planned) choose(chain []string) error {
	for _, c := range append([]planner.Plan{p.Result.Best}, p.Result.Alternatives...) {
		if slices.Equal(c.Chain, chain) {
			p.Result.Best = c
			return nil
		}
	}
	why := "no segment of it was measured"
	if len(p.Result.Best.Reasons) > 0 {
		why = strings.Join(p.Result.Best.Reasons, "; ")
	}
	return fmt.Errorf("--chain %s: not a usable chain (a segment of it is unmeasured or unreachable; `relayctl plan --include %s` shows the matrix): %s",
		strings.Join(chain, ","), strings.Join(chain, ","), why)
}

// nextOf is the next-hop URLs of chain, relays of the plan's survey
// (native protocol), striped as the plan of that chain stripes them (not
// at all when the result holds no plan of it).
func (p *planned) nextOf(chain []string) ([]string, error) {
	var of planner.Plan
	for _, c := range append([]planner.Plan{p.Result.Best}, p.Result.Alternatives...) {
		if slices.Equal(c.Chain, chain) {
			of = c
			break
		}
	}
	return planroute.HopURLs(chain, of, p.Relays)
}

// request builds the planner request from the flags.
func (f *planFlags) request(client, dst string) (planner.Request, error) {
	req := planner.Request{Client: client, Destination: dst, Direction: planner.Direction(f.direction)}
	switch req.Direction {
	case planner.Down, planner.Up, planner.Both:
	default:
		return req, fmt.Errorf("--direction %q: want down, up or both", f.direction)
	}
	req.Constraints.MaxHops = f.maxHops
	if f.maxHops == 0 {
		req.Constraints.MaxHops = -1 // the planner's "none"
	} else if f.maxHops < 0 {
		return req, fmt.Errorf("--max-hops %d: want 0 (direct only) or more", f.maxHops)
	}
	req.Constraints.MinGain = f.minGain
	if f.minGain == 0 {
		req.Constraints.MinGain = -1 // any gain
	} else if f.minGain < 0 {
		return req, fmt.Errorf("--min-gain %v: want a fraction >= 0", f.minGain)
	}
	switch {
	case f.errorMargin == 0:
		req.Model.ErrorMargin = -1 // the planner's "none"
	case f.errorMargin < 0 || f.errorMargin >= 1:
		return req, fmt.Errorf("--error-margin %v: want a fraction from 0 to below 1", f.errorMargin)
	default:
		req.Model.ErrorMargin = f.errorMargin
	}
	req.Constraints.Include, req.Constraints.Exclude = f.include, f.exclude
	if err := f.checkMaxStripes(); err != nil {
		return req, err
	}
	req.Constraints.MaxStripes = f.maxStripes
	req.SizeBytes = f.sizeBytes
	switch s := planner.SetupKind(f.setup); s {
	case "", planner.SetupWarm, planner.SetupOptimistic, planner.SetupCold:
		req.Model.Setup = s
	default:
		return req, fmt.Errorf("--setup %q: want warm, optimistic or cold", f.setup)
	}
	if f.reg.transport == relay.TransportTLS {
		// A chain's slow start carries the links' record framing.
		req.Model.LinkFramingBytes = linktls.RecordOverheadBytes
	}
	return req, nil
}

// token is the admin token for the relays' admin APIs.
func (f *planFlags) token() string { return f.reg.token(f.adminToken) }

// plan measures (or reads the matrix) and plans. avoid names relays to
// leave out as --exclude does (connect's relays that are down); names the
// matrix does not hold as relays are ignored.
func (f *planFlags) plan(ctx context.Context, avoid ...string) (*planned, error) {
	if f.dst == "" {
		return nil, errors.New("--dst is required: a region (e.g. tokyo), a relay name, or host:port")
	}
	if f.matrixPath != "" {
		data, err := os.ReadFile(f.matrixPath)
		if err != nil {
			return nil, err
		}
		m, err := planner.ParseMatrix(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.matrixPath, err)
		}
		dst, err := m.Resolve(f.dst)
		if err != nil {
			return nil, err
		}
		req, err := f.request(f.from, dst)
		if err != nil {
			return nil, err
		}
		req.Constraints.Exclude = append(req.Constraints.Exclude, m.RelaysAmong(avoid)...)
		res, err := planner.Search(m, req)
		if err != nil {
			return nil, err
		}
		return &planned{Result: res, Matrix: m, Request: req}, nil
	}
	reg, err := f.reg.openForPlan(ctx)
	if err != nil {
		return nil, err
	}
	mode, err := survey.ParseMode(f.survey)
	if err != nil {
		return nil, fmt.Errorf("--survey: %w", err)
	}
	hint, err := f.request(survey.ClientNode, "")
	if err != nil {
		return nil, err
	}
	slc, err := f.shortlistConfig()
	if err != nil {
		return nil, err
	}
	replans, keep := f.replans, func() error { return nil }
	if replans == nil && f.plansDir != "" {
		replans, keep = keptPlans(filepath.Join(f.plansDir, plansFile(f.reg.id())))
	}
	sv := survey.Survey{Reg: reg, AdminToken: f.token(), Admin: f.reg.admin(10 * time.Second), Mode: mode, Plan: hint,
		Coordinates: survey.CoordinatesOf(reg), Shortlist: slc, Replans: replans, AskKey: f.askKey(), Own: f.own}
	sr, err := sv.Run(ctx, f.dst)
	if err != nil {
		return nil, err
	}
	if err := keep(); err != nil {
		sr.Notes = append(sr.Notes, fmt.Sprintf("what this plan learnt was not kept for the next (--plans-dir %s): %v", f.plansDir, err))
	}
	if f.saveMatrix != "" {
		data, err := json.MarshalIndent(sr.Matrix, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(f.saveMatrix, append(data, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	req, err := f.request(survey.ClientNode, sr.Target.Name)
	if err != nil {
		return nil, err
	}
	if sr.Shortlisted {
		// The survey left out what they exclude; the names it checked.
		req.Constraints.Include, req.Constraints.Exclude = nil, nil
	}
	req.Constraints.Exclude = append(req.Constraints.Exclude, sr.Matrix.RelaysAmong(avoid)...)
	hist, err := readHistory(f.benchHistory, f.reg.id(), sr.Target.Addr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("--bench-history: %w", err)
	}
	notes := sr.Notes
	histNote := ""
	if req.SizeBytes == 0 { // ranked by completion time, plans do not use them
		req.Measured, histNote = hist.measured, hist.note(sr.Target.Addr, f.benchHistory)
	}
	for _, n := range []string{histNote, hist.applyDstWindow(sr.Matrix, sr.Target.Name, sr.Target.Addr, sr.OwnDstWindow)} {
		if n != "" {
			notes = append(notes, n)
		}
	}
	res, err := planner.Search(sr.Matrix, req)
	if err != nil {
		return nil, err
	}
	if f.probeCapacity {
		var probeNotes []string
		if res, probeNotes, err = probeCapacities(ctx, &sv, sr, req, res); err != nil {
			return nil, err
		}
		notes = append(notes, probeNotes...)
	}
	p := &planned{Result: res, Relays: sr.Relays, Target: sr.Target, Notes: notes, FromHere: sr.FromHere(), Matrix: sr.Matrix, Request: req}
	if f.windowProbeBytes > 0 {
		p.probeWindow(ctx, f, res.Best.Chain)
	}
	return p, nil
}

// planJSON is `relayctl plan -o json`: the best plan's fields at the top
// level (what scripts read), the rest beside them.
type planJSON struct {
	Client           string            `json:"client"`
	Destination      string            `json:"destination"`
	Target           string            `json:"target,omitempty"` // host:port measured against
	Direction        planner.Direction `json:"direction"`
	Chain            []string          `json:"chain"`
	Hops             []hopJSON         `json:"hops"`
	Segments         []planner.Segment `json:"segments"`
	Bottleneck       int               `json:"bottleneck"`
	PredictedBps     float64           `json:"predicted_bps"`
	PredictedDownBps float64           `json:"predicted_down_bps"`
	PredictedUpBps   float64           `json:"predicted_up_bps"`
	// Bound says the predictions are upper bounds (planner.Plan.Bound).
	Bound              bool    `json:"bound"`
	DirectPredictedBps float64 `json:"direct_predicted_bps"`
	Speedup            float64 `json:"speedup"`
	TotalRTTMs         float64 `json:"total_rtt_ms"`
	// With --size: the size, the best plan's completion time and its parts,
	// and from which size the fastest chain by steady rate beats direct.
	SizeBytes    int64              `json:"size_bytes,omitempty"`
	Transfer     *planner.Transfer  `json:"transfer,omitempty"`
	Crossover    *planner.Crossover `json:"crossover,omitempty"`
	Reasons      []string           `json:"reasons"`
	Direct       planner.Plan       `json:"direct"`
	Alternatives []planner.Plan     `json:"alternatives"`
	Notes        []string           `json:"notes"`
	// Awaiting is planner.Result.Awaiting: direct for want of these
	// measurements.
	Awaiting []string `json:"awaiting,omitempty"`
	// KeptOver is planner.Result.KeptOver: the untried chain a measured
	// plan was kept ahead of (relayctl bench measures it next).
	KeptOver []string `json:"kept_over,omitempty"`
	// Exploring is planner.Result.Exploring: the pick is untried, ahead of
	// a tried chain that does not beat direct.
	Exploring bool `json:"exploring,omitempty"`
	// WindowProbes are the receive-window probes (--window-probe).
	WindowProbes []windowProbe `json:"window_probes,omitempty"`
	// LossPrior is planner.Result.LossPrior: the loss a segment nobody
	// measured got (its loss_source "prior"); loss_per_rtt_ms 0 = none.
	LossPrior planner.LossPrior `json:"loss_prior"`
}

// hopJSON is where to reach one relay of the chain.
type hopJSON struct {
	Name  string `json:"name"`
	Relay string `json:"relay,omitempty"` // native relay listener
	SOCKS string `json:"socks,omitempty"`
}

func (p *planned) json() planJSON {
	b := p.Result.Best
	out := planJSON{
		Client: p.Result.Client, Destination: p.Result.Destination, Target: p.Target.Addr, Direction: p.Result.Direction,
		Chain: b.Chain, Segments: b.Segments, Bottleneck: b.Bottleneck,
		PredictedBps: b.PredictedBps, PredictedDownBps: b.PredictedDownBps, PredictedUpBps: b.PredictedUpBps, Bound: b.Bound,
		DirectPredictedBps: b.DirectPredictedBps, Speedup: b.Speedup, TotalRTTMs: b.TotalRTTMs, Reasons: b.Reasons,
		SizeBytes: p.Result.SizeBytes, Transfer: b.Transfer, Crossover: p.Result.Crossover,
		Direct: p.Result.Direct, Alternatives: p.Result.Alternatives, Notes: append(append([]string{}, p.Notes...), p.Result.Notes...),
		WindowProbes: p.Windows, Awaiting: p.Result.Awaiting, KeptOver: p.Result.KeptOver, Exploring: p.Result.Exploring, LossPrior: p.Result.LossPrior,
	}
	if out.Chain == nil {
		out.Chain = []string{}
	}
	out.Hops = []hopJSON{}
	for _, name := range b.Chain {
		r := p.Relays[name]
		out.Hops = append(out.Hops, hopJSON{Name: name, Relay: r.Relay, SOCKS: r.SOCKS})
	}
	return out
}

// print writes the plan as json, or as the table (registryFlags checked
// --output before anything ran).
func (p *planned) print(w io.Writer, output string) error {
	if output == "json" {
		return writeJSONTo(w, p.json())
	}
	fmt.Fprint(w, planner.Explain(p.Result))
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func planCmd() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan --dst <region|relay|host:port>",
		Short: "Plan where to split the path to a destination, and say why",
		Long: `Plan the fastest way from this host to a destination: direct, or through a
chain of relays that splits the path into shorter TCP segments.

It reads the fleet (--fleet, --consul, or $RELAYMESH_FLEET, which ` + "`relayctl lab`" + `
sets) and the RTTs the relays measure between each other, measures this
host's RTT to every relay and to the destination (TCP handshakes), asks every
relay for its RTT to the destination, and reads every relay's receive and send
windows. Each segment moves at most window/RTT (the receiving side's window for
the direction, or the sender's send window where smaller), capped by a relay's
declared capacity, the loss its sender's congestion control is bound by, and
the rate the sender's tunnels over it sustained (relays learn loss and rate
from the traffic they carry: a plan after a transfer may differ from one
before it, and says why), a chain moves at its
slowest segment minus a per-relay overhead, and the planner searches for the
exact best chain under --max-hops. Chains predicting within --error-margin of
the fastest are ties, won by the fewest relays. Direct wins unless a chain
beats it by --min-gain. A segment whose loss nobody measured (the probes
miss random loss) gets a prior from the fleet: the loss per ms of RTT of the
segments whose loss was measured, times its RTT, at most the worst measured,
marked "(prior)" in the loss column; with too little measured (fewer than two
segments, or none lossy) its loss stays unknown and the plan is a bound (see
docs/planning.md). A path traffic has tried (bench timed it, or its
bottleneck is a rate or loss the relays learnt from traffic) that beats direct
is not displaced by an untried chain that ranks higher only on what nobody
measured: the plan keeps it and lists the other as untried (kept_over); an
untried pick ahead of a tried chain that does not beat direct says it is
exploring. A segment between two relays that both take striped segments
(max_stripes) and whose capacity is declared may carry the tunnel over
several TCP connections, each with its own window and loss bound: the
least number, up to --max-stripes, that brings it within 10 % of the
capacity, if that gains 10 % over one connection; the plan shows it as
"×N" and says why (see docs/planning.md). With --matrix it plans offline on
a saved or hand-written matrix (what-if planning; see --save-matrix).

Without --size the plan is for a large transfer: ranked by steady rate. A
small one spends most of its time setting up and in TCP slow start, where
every relay's extra round trips count and a long segment ramps slowly; direct
often wins. --size BYTES (100KB, 10MB, 1GiB: KB/MB/GB decimal, KiB/MiB/GiB
binary) ranks plans by predicted completion time for that many bytes:

    setup      direct 2 RTT (handshake, request); a chain by --setup:
               warm 2 x its total RTT (pooled relay connections, the default),
               optimistic total + last segment RTT (request rides with the
               route header; the default of connect), cold warm + 2 RTT
               per segment but the last (TCP and TLS handshakes)
    ramp       slow start from 10 segments (IW10), doubling every round
               trip of the slowest segment to ramp (the longest relay link,
               or the destination's segment, which carries fuller packets),
               until it carries the steady rate
    steady     the rest at the predicted rate, in whole round trips of the
               bottleneck when a window holds it

Each plan shows its completion time and the three parts, and the crossover:
the size above which the fastest chain by steady rate finishes sooner than
direct ("never", or "at every size"). Direct still wins unless a chain
finishes at least --min-gain sooner.`,
		Example: `  # in a lab: the plan to the Tokyo region, as a table with a path diagram
  sudo relayctl lab run -t world -- relayctl plan --dst tokyo

  # uploads, at most 2 relays, as JSON for scripts
  relayctl plan --fleet fleet.yaml --dst tokyo --direction up --max-hops 2 -o json

  # offline: plan on a matrix file
  relayctl plan --matrix matrix.json --from client --dst srv

  # a 100 KB object: ranked by completion time, with the crossover size
  relayctl plan --matrix planner/testdata/split4.json --dst srv --size 100KB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			p, err := f.plan(ctx)
			if err != nil {
				return err
			}
			return p.print(cmd.OutOrStdout(), f.reg.output)
		},
	}
	f.register(cmd, true)
	f.windowProbeFlag(cmd, 0)
	cmd.Flags().Var(sizeValue{&f.sizeBytes}, "size", "rank plans by predicted completion time for this many bytes (e.g. 100KB, 1GiB; 0: steady rate)")
	cmd.Flags().StringVar(&f.setup, "setup", string(planner.SetupWarm), "with --size: warm (pooled relay links), optimistic (data rides the header) or cold (new TCP+TLS)")
	f.maxStripesFlag(cmd)
	return cmd
}

// sizeValue is a flag holding bytes, written with a unit (bytesize).
type sizeValue struct{ v *int64 }

func (s sizeValue) String() string {
	if s.v == nil || *s.v == 0 {
		return "0"
	}
	return strconv.FormatInt(*s.v, 10)
}

func (s sizeValue) Set(text string) error {
	n, err := bytesize.Parse(text)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

func (sizeValue) Type() string { return "bytes" }
