package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/planner"
	"github.com/relaymesh/relaymesh/relay"
)

// benchJSON is `relayctl bench -o json`, and one line of the history file.
type benchJSON struct {
	Time        time.Time `json:"time"`
	Destination string    `json:"destination"`
	Target      string    `json:"target"`
	// Registry names the fleet the bench ran in (registryFlags.id): a
	// later plan reads its history only for the same one.
	Registry  string            `json:"registry,omitempty"`
	SizeBytes int64             `json:"size_bytes,omitempty"`
	DurationS float64           `json:"duration_s,omitempty"`
	Streams   int               `json:"streams"`
	Direct    *pathbench.Result `json:"direct,omitempty"`
	Chain     *pathbench.Result `json:"chain,omitempty"`
	// Explored is the untried chain the plan kept a measured path ahead
	// of (planner.Result.KeptOver), measured too (--explore).
	Explored  *pathbench.Result `json:"explored,omitempty"`
	Predicted struct {
		DownBps       float64 `json:"down_bps"`
		UpBps         float64 `json:"up_bps"`
		DirectDownBps float64 `json:"direct_down_bps"`
		DirectUpBps   float64 `json:"direct_up_bps"`
		// Bound and DirectBound say the chain's and direct's predictions
		// in the direction the plan was made for (down, unless
		// --direction) are upper bounds (planner.Plan.Bound): they rest
		// on what nobody measured, learnt or declared.
		Bound       bool `json:"bound,omitempty"`
		DirectBound bool `json:"direct_bound,omitempty"`
		// ExploredDownBps and ExploredUpBps are the explored chain's
		// predictions, bounds.
		ExploredDownBps float64 `json:"explored_down_bps,omitempty"`
		ExploredUpBps   float64 `json:"explored_up_bps,omitempty"`
	} `json:"predicted"`
	SpeedupDown float64 `json:"speedup_down,omitempty"`
	SpeedupUp   float64 `json:"speedup_up,omitempty"`
	// Modelled is, for every stream measured, the model's completion time
	// for the bytes it moved, next to the time it took.
	Modelled []modelledStream `json:"modelled,omitempty"`
	// Segments says, per segment of the chain and direction, which limit
	// its sender met (from the relays' TCP_INFO on the bench's tunnels).
	Segments []segmentLimit `json:"segments,omitempty"`
	// WindowProbes are the receive-window probes the plan used
	// (--window-probe).
	WindowProbes []windowProbe `json:"window_probes,omitempty"`
	// PlannedForSize: the plan was ranked by completion time for
	// SizeBytes (--plan-for-size), not by steady rate.
	PlannedForSize bool `json:"planned_for_size,omitempty"`
}

// modelledStream is one measured stream against the model's completion
// time for its bytes (planner.PredictTransfer): setup, slow start over the
// path's slowest segment to ramp, then the predicted rate.
type modelledStream struct {
	Path      string  `json:"path"` // direct or chain
	Direction string  `json:"direction"`
	Stream    int     `json:"stream"` // from 1
	Bytes     int64   `json:"bytes"`
	MeasuredS float64 `json:"measured_s"`
	// ModelS is the model's completion time, seconds: Transfer's plus
	// TLSMs.
	ModelS float64 `json:"model_s"`
	// TLSMs is one round trip of the whole path when the traffic comes
	// from a relay's admin API over TLS (its handshake, end to end), else
	// 0; milliseconds.
	TLSMs    float64           `json:"tls_ms"`
	Transfer *planner.Transfer `json:"transfer"`
}

// benchSetup is the setup the bench's connections pay through the chain:
// warm, as relayctl connect's without optimistic data. The bench's own
// relay keeps a warm pool to the first relay (its time-to-first-byte
// connections warm it before the transfers), the relays keep theirs, and
// its dial waits for the chain's status before the request goes out.
// Measured: 10 KB through split4's chain took 108 ms, warm models 100,
// cold 175 (bench/results/sizes.md).
const benchSetup = planner.SetupWarm

// modelStreams fills out.Modelled from the measured streams: each
// stream's bytes over its plan at the plan's per-stream predicted rate.
// tlsTarget says the traffic came over TLS from a relay's admin API.
func modelStreams(out *benchJSON, p *planned, tlsTarget bool) {
	for _, path := range []struct {
		name string
		r    *pathbench.Result
		plan planner.Plan
	}{{"direct", out.Direct, p.Result.Direct}, {"chain", out.Chain, p.Result.Best}} {
		if path.r == nil {
			continue
		}
		extraMs := 0.0
		if tlsTarget {
			extraMs = path.plan.TotalRTTMs
		}
		for _, d := range []struct {
			dir     string
			streams []pathbench.Stream
			bps     float64
		}{{"down", path.r.DownStreams, path.plan.PredictedDownBps}, {"up", path.r.UpStreams, path.plan.PredictedUpBps}} {
			for i, st := range d.streams {
				t := planner.PredictTransfer(path.plan, planner.Model{Setup: benchSetup, LinkFramingBytes: p.Request.Model.LinkFramingBytes}, d.bps, st.Bytes)
				if t == nil || st.Error != "" {
					continue
				}
				out.Modelled = append(out.Modelled, modelledStream{Path: path.name, Direction: d.dir, Stream: i + 1, Bytes: st.Bytes,
					MeasuredS: st.Seconds, ModelS: (t.CompletionMs + extraMs) / 1000, TLSMs: extraMs, Transfer: t})
			}
		}
	}
}

// historyPath is where bench results are appended, one JSON line each.
func historyPath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "relaymesh", "bench-history.jsonl")
}

func appendHistory(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// benchOptions are relayctl bench's own flags.
type benchOptions struct {
	via, history string
	forced       []string
	explore      bool
	bySize       bool
	size         int64
	duration     time.Duration
	streams      int
	transfers    []string
}

func benchCmd() *cobra.Command {
	var f planFlags
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench --dst <region|relay|host:port>",
		Short: "Measure throughput and time to first byte, direct and through the planned chain",
		Long: `Plan the path to --dst (as relayctl plan does), then measure, side by side:
time to first byte (median of 5 fresh connections: connect through the path,
1-byte request, 1-byte answer), download and upload throughput (--streams
parallel TCP connections, --size bytes each or for --duration), and per
stream this host's TCP_INFO RTT and retransmissions; direct, through the
chain (native protocol, as relayctl connect sends it), or both; --chain
measures a chain of your choosing instead of the plan's (only its relays
are surveyed, and the model's prediction for it is shown), to compare a
plan with the alternatives it lists. Before the transfers it measures this
host's receive window on its segment to the chain's first relay
(--window-probe: it downloads that much from the relay's admin API) and
plans with it: the share of tcp_rmem's max the kernel turns into window
differs per path, and on that segment the client's window is often the
bottleneck. After the chain's transfers, each
segment's sender's TCP_INFO, as the relays recorded it, says which limit
it met (the receiver's window, its send buffer, congestion control). Each
transfer's rate is given over its whole time and over its second half
("steady": after slow start's ramp, which on long paths can take seconds).
The prediction, a steady rate, is printed beside each measurement; and per
stream, the model's completion time for the bytes it moved (planner's
transfer model: the setup of a warm chain, or direct's, plus one round trip
of the path for the admin API's TLS; slow start over the slowest segment to ramp;
then the predicted rate) beside the time it took. Every transfer is
checked with SHA-256, and each run is appended as one JSON line to the
history file ("modelled": the per-stream comparison). Plans read it back
(--bench-history): for an hour, in this fleet, a plan over a path bench
timed with one stream (direct or a chain, each direction) predicts no more
than it moved, and a measured path that the plan would have left for an
untried chain, on a bound nobody measured, is kept; bench then measures
that untried chain too (--explore), so that the next plan compares
measurements. A prediction that rests on a capacity, loss or window nobody
measured is printed as a bound (≤).

The traffic comes from the destination's traffic source: with a region or
relay name, that relay's admin API (/v1/traffic/, with the admin token);
with host:port, a relaymesh traffic service there (GET /bytes/N, POST
/upload; ` + "`relayctl lab`" + ` servers run one on port 8000).`,
		Example: `  sudo relayctl lab run -t world -- relayctl bench --dst tokyo
  relayctl bench --fleet fleet.yaml --fleet-secret-file fleet.key --dst tokyo --streams 4 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, &f) },
	}
	f.register(cmd, true)
	f.windowProbeFlag(cmd, 4_000_000)
	o.register(cmd)
	return cmd
}

// register adds bench's own flags to cmd, after the plan flags.
func (o *benchOptions) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.via, "via", "both", "direct, plan or both")
	fl.BoolVar(&o.bySize, "plan-for-size", false, "rank plans by predicted completion time for --size bytes (as plan --size), not steady rate")
	fl.StringSliceVar(&o.forced, "chain", nil, "measure this chain (relay names in order, comma-separated) instead of the plan's pick")
	o.size = 16 << 20 // the default: sizeValue has none of its own
	fl.Var(sizeValue{&o.size}, "size", "bytes per stream and direction (10KB, 1MB, 64MiB: KB/MB/GB decimal, KiB/MiB/GiB binary)")
	fl.DurationVar(&o.duration, "duration", 0, "transfer for this long per direction instead of --size")
	fl.IntVar(&o.streams, "streams", 1, "parallel TCP connections per direction")
	fl.StringSliceVar(&o.transfers, "transfers", []string{"down", "up"}, "which transfers to measure: down, up or both (down,up)")
	fl.StringVar(&o.history, "history", historyPath(), `file the results are appended to, one JSON line per run ("" disables)`)
	fl.BoolVar(&o.explore, "explore", true, "also measure an untried chain the plan kept a measured path ahead of, for the next plan")
}

// run plans, measures the paths, records and prints the result.
func (o *benchOptions) run(cmd *cobra.Command, f *planFlags) error {
	if err := o.check(f); err != nil {
		return err
	}
	ctx := cmd.Context()
	p, err := o.plan(ctx, f)
	if err != nil {
		return err
	}
	if f.matrixPath != "" {
		return errors.New("--matrix plans offline; bench measures a live fleet (use --fleet or --consul)")
	}
	run, err := o.pathRun(cmd, f, p)
	if err != nil {
		return err
	}
	out := o.result(f, p, run)
	if err := o.measure(ctx, f, p, run, &out); err != nil {
		return err
	}
	out.setSpeedups()
	modelStreams(&out, p, run.AdminTLS != nil)
	if o.history != "" {
		if err := appendHistory(o.history, out); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "relayctl bench: history not written: %v\n", err)
		}
	}
	if f.reg.output == "json" {
		if err := writeJSONTo(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else {
		printBench(cmd.OutOrStdout(), &out, p)
	}
	// Failed transfers fail the command in either form (the JSON
	// holds the errors too), so that a script sees them.
	if errs := slices.Concat(pathErrors(out.Direct), pathErrors(out.Chain), pathErrors(out.Explored)); len(errs) > 0 {
		return fmt.Errorf("%d transfer(s) failed: %s", len(errs), strings.Join(errs, "; "))
	}
	return nil
}

// check refuses flags that are out of range or that contradict each
// other, before anything is measured; it sets the plan flags that
// --plan-for-size and --chain imply.
func (o *benchOptions) check(f *planFlags) error {
	switch o.via {
	case "direct", "plan", "both":
	default:
		return fmt.Errorf("--via %q: want direct, plan or both", o.via)
	}
	if o.streams < 1 || o.streams > 64 {
		return fmt.Errorf("--streams %d: want 1..64", o.streams)
	}
	if o.size <= 0 || o.size > traffic.MaxBytes {
		return fmt.Errorf("--size %d: want 1..%d bytes", o.size, int64(traffic.MaxBytes))
	}
	if o.bySize {
		if o.duration > 0 {
			return errors.New("--plan-for-size plans for --size bytes: not with --duration")
		}
		f.sizeBytes = o.size
	}
	if len(o.forced) > 0 {
		if len(f.include) > 0 || len(f.exclude) > 0 {
			return errors.New("--chain names the relays itself: leave out --include and --exclude")
		}
		if o.via == "direct" {
			return errors.New("--chain measures a chain: not with --via direct")
		}
		f.include = o.forced
	}
	return nil
}

// plan is the plan to --dst, with --chain as its best when given.
func (o *benchOptions) plan(ctx context.Context, f *planFlags) (*planned, error) {
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	p, err := f.plan(pctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if len(o.forced) > 0 {
		if err := p.choose(o.forced); err != nil {
			return nil, err
		}
		// The chain chosen may start at a relay the plan's
		// window probe did not measure.
		if f.windowProbeBytes > 0 && o.via != "direct" {
			p.probeWindow(ctx, f, o.forced)
			if err := p.choose(o.forced); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// pathRun is how each path is measured, as the flags ask, from the
// destination's traffic source.
func (o *benchOptions) pathRun(cmd *cobra.Command, f *planFlags, p *planned) (*pathbench.Run, error) {
	run := &pathbench.Run{Target: p.Target.Addr, Size: o.size, Duration: o.duration, Streams: o.streams}
	for _, t := range o.transfers {
		switch t {
		case "down":
			run.Down = true
		case "up":
			run.Up = true
		case "both":
			run.Down, run.Up = true, true
		default:
			return nil, fmt.Errorf("--transfers %q: want down, up or both", t)
		}
	}
	if p.Target.Relay != "" {
		run.Prefix, run.Token, run.Relay = "/v1/traffic", f.token(), p.Target.Relay
		var err error
		if run.AdminTLS, err = f.reg.adminTLS(); err != nil {
			return nil, err
		}
	}
	if f.reg.output != "json" && isTerminal(cmd.ErrOrStderr()) && os.Getenv("TERM") != "dumb" {
		run.Progress = cmd.ErrOrStderr()
	}
	return run, nil
}

// result is the bench's record before anything is measured: what ran,
// and the plan's predictions.
func (o *benchOptions) result(f *planFlags, p *planned, run *pathbench.Run) benchJSON {
	out := benchJSON{Time: time.Now().UTC(), Destination: f.dst, Target: run.Target, Registry: f.reg.id(), Streams: o.streams, WindowProbes: p.Windows, PlannedForSize: o.bySize}
	if o.duration > 0 {
		out.DurationS = o.duration.Seconds()
	} else {
		out.SizeBytes = o.size
	}
	b := p.Result.Best
	out.Predicted.DownBps, out.Predicted.UpBps = b.PredictedDownBps, b.PredictedUpBps
	out.Predicted.DirectDownBps, out.Predicted.DirectUpBps = p.Result.Direct.PredictedDownBps, p.Result.Direct.PredictedUpBps
	out.Predicted.Bound, out.Predicted.DirectBound = b.Bound, p.Result.Direct.Bound
	return out
}

// measure measures the paths --via names, direct first, into out, then
// the untried chain --explore asks for.
func (o *benchOptions) measure(ctx context.Context, f *planFlags, p *planned, run *pathbench.Run, out *benchJSON) error {
	if o.via != "plan" {
		var d net.Dialer
		out.Direct = run.Measure(ctx, pathbench.Path{Name: "direct", Dial: func(ctx context.Context) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", run.Target)
		}})
	}
	if o.via != "direct" {
		b := p.Result.Best
		dial, err := chainDialer(p, b.Chain, f.reg.secretPath(), f.reg.transport)
		if err != nil {
			return err
		}
		since := time.Now()
		out.Chain = run.Measure(ctx, pathbench.Path{Name: "chain", Relays: b.Chain, Dial: dial})
		out.Segments = benchSegments(ctx, f.reg.admin(5*time.Second), f.token(), b.Chain, p.Relays, out.Chain, since)
	}
	return o.measureUntried(ctx, f, p, run, out)
}

// measureUntried measures the untried chain the plan kept a measured path
// ahead of, when --explore asks and the result will be read back: only a
// one-stream bench written to the history is.
func (o *benchOptions) measureUntried(ctx context.Context, f *planFlags, p *planned, run *pathbench.Run, out *benchJSON) error {
	untried := p.Result.KeptOver
	if !o.explore || len(untried) == 0 || len(o.forced) > 0 || o.via == "direct" || o.streams != 1 || o.history == "" {
		return nil
	}
	// The plan kept a measured path ahead of this chain only
	// because nobody had measured it: measure it now, so the
	// next plan compares measurements.
	dial, err := chainDialer(p, untried, f.reg.secretPath(), f.reg.transport)
	if err != nil {
		return err
	}
	out.Explored = run.Measure(ctx, pathbench.Path{Name: "untried", Relays: untried, Dial: dial})
	for _, alt := range p.Result.Alternatives {
		if slices.Equal(alt.Chain, untried) {
			out.Predicted.ExploredDownBps, out.Predicted.ExploredUpBps = alt.PredictedDownBps, alt.PredictedUpBps
		}
	}
	return nil
}

// setSpeedups sets the chain's speed-ups over direct, when both were
// measured and direct moved bytes.
func (out *benchJSON) setSpeedups() {
	if out.Direct == nil || out.Chain == nil {
		return
	}
	if out.Direct.DownBps > 0 {
		out.SpeedupDown = out.Chain.DownBps / out.Direct.DownBps
	}
	if out.Direct.UpBps > 0 {
		out.SpeedupUp = out.Chain.UpBps / out.Direct.UpBps
	}
}

func pathErrors(p *pathbench.Result) []string {
	if p == nil {
		return nil
	}
	return p.Errors
}

// chainDialer dials the target through chain (relays of p's survey), in
// process, with the same dialers, pools and native protocol as relayctl
// connect.
func chainDialer(p *planned, chain []string, secretFile, transport string) (func(context.Context) (net.Conn, error), error) {
	next, err := p.nextOf(chain)
	if err != nil {
		return nil, err
	}
	if len(next) > 0 && secretFile == "" {
		return nil, errors.New("--fleet-secret-file is required to use the chain (the relays accept route headers only with the fleet secret)")
	}
	cfg := relay.Defaults()
	cfg.SOCKS, cfg.HTTP, cfg.Admin = "127.0.0.1:0", "", ""
	cfg.FleetSecretFile = secretFile
	cfg.Transport = transport
	cfg.Policy.AllowPrivate = true // the chain's last relay applies its own policy
	srv, err := relay.New(cfg, zap.NewNop())
	if err != nil {
		return nil, err
	}
	ch, err := srv.Chain(next)
	if err != nil {
		return nil, err
	}
	target := p.Target.Addr
	return func(ctx context.Context) (net.Conn, error) { return ch.DialContext(ctx, "tcp", target) }, nil
}

// tlsNote says what the model added for the admin API's TLS handshake.
func tlsNote(tlsMs float64) string {
	if tlsMs > 0 {
		return fmt.Sprintf(" + TLS %.0f ms", tlsMs)
	}
	return ""
}

func printBench(w io.Writer, out *benchJSON, p *planned) {
	mbit := func(bps float64) string { return fmt.Sprintf("%.1f Mbit/s", bps/1e6) }
	fmt.Fprintf(w, "bench %s (%s), %d stream(s)", out.Destination, out.Target, out.Streams)
	if out.SizeBytes > 0 {
		fmt.Fprintf(w, " of %.1f MiB", float64(out.SizeBytes)/(1<<20))
	} else {
		fmt.Fprintf(w, " for %.0f s", out.DurationS)
	}
	fmt.Fprintf(w, "\nplan: %s\n", orDirect(p.Result.Best.Chain))
	for _, wp := range out.WindowProbes {
		fmt.Fprintf(w, "%s\n", wp)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-8s %12s %16s %16s %16s %16s %16s %16s\n", "path", "ttfb", "download", "steady", "predicted", "upload", "steady", "predicted")
	row := func(name string, r *pathbench.Result, pd, pu float64, bound bool) {
		if r == nil {
			return
		}
		// The plan's bound is of the direction it was made for.
		dir := p.Result.Direction
		predicted := func(bps float64, way planner.Direction) string {
			if bound && (dir == way || dir == planner.Both) {
				return "≤ " + mbit(bps)
			}
			return mbit(bps)
		}
		down, downSteady, up, upSteady := "-", "-", "-", "-"
		if len(r.DownStreams) > 0 {
			down, downSteady = mbit(r.DownBps), mbit(r.DownSteadyBps)
		}
		if len(r.UpStreams) > 0 {
			up, upSteady = mbit(r.UpBps), mbit(r.UpSteadyBps)
		}
		fmt.Fprintf(w, "%-8s %9.1f ms %16s %16s %16s %16s %16s %16s\n", name, r.TTFBMs, down, downSteady, predicted(pd, planner.Down), up, upSteady, predicted(pu, planner.Up))
	}
	row("direct", out.Direct, out.Predicted.DirectDownBps, out.Predicted.DirectUpBps, out.Predicted.DirectBound)
	row("chain", out.Chain, out.Predicted.DownBps, out.Predicted.UpBps, out.Predicted.Bound)
	row("untried", out.Explored, out.Predicted.ExploredDownBps, out.Predicted.ExploredUpBps, true)
	if out.Explored != nil {
		fmt.Fprintf(w, "\nuntried: %s, which the plan kept the measured path ahead of (its prediction a bound nobody had measured): measured now for the next plan (--explore=false skips it)\n",
			strings.Join(out.Explored.Relays, " -> "))
	}
	if out.SpeedupDown > 0 {
		fmt.Fprintf(w, "\nspeed-up over direct: download %.2f×\n", out.SpeedupDown)
	}
	if out.SpeedupUp > 0 {
		fmt.Fprintf(w, "speed-up over direct: upload %.2f×\n", out.SpeedupUp)
	}
	fmt.Fprintf(w, "(steady: the rate over the second half of the transfer's time, after slow start's ramp; the prediction is of that)\n")
	if out.Predicted.Bound || out.Predicted.DirectBound {
		fmt.Fprintf(w, "(≤: an upper bound, resting on a capacity, loss or window nobody has measured; relayctl plan says which)\n")
	}
	if len(out.Modelled) > 0 {
		fmt.Fprintf(w, "\ntime per stream, measured against the model (setup %s, slow start over the slowest segment to ramp, then the predicted rate):\n", benchSetup)
		for _, m := range out.Modelled {
			t := m.Transfer
			loss, flights := "", ""
			if t.LossMs > 0 {
				loss = fmt.Sprintf(", loss %.0f ms", t.LossMs)
			}
			if t.Flights > 0 {
				flights = fmt.Sprintf(" (%d window flights)", t.Flights)
			}
			fmt.Fprintf(w, "  %-6s %-4s stream %d: %.1f MiB in %.2f s, modelled %.2f s (%.2f×): setup %.0f ms%s, ramp %.0f ms (%d rounds of %.1f ms), steady %.0f ms%s%s\n",
				m.Path, m.Direction, m.Stream, float64(m.Bytes)/(1<<20), m.MeasuredS, m.ModelS, m.MeasuredS/m.ModelS,
				t.SetupMs, tlsNote(m.TLSMs), t.RampMs, t.Rounds, t.RampRTTMs, t.SteadyMs, flights, loss)
		}
	}
	for _, r := range []*pathbench.Result{out.Direct, out.Chain} {
		if r == nil {
			continue
		}
		label := "direct"
		if len(r.Relays) > 0 {
			label = "via " + strings.Join(r.Relays, "→")
		}
		for _, d := range []struct {
			dir     string
			streams []pathbench.Stream
		}{{"down", r.DownStreams}, {"up", r.UpStreams}} {
			dir := d.dir
			for i, s := range d.streams {
				window := ""
				if dir == "down" && s.RcvWindowBytes > 0 {
					// The client's own window bounds the first hop.
					window = fmt.Sprintf(", receive window %d KB", s.RcvWindowBytes/1000)
				}
				fmt.Fprintf(w, "  %s %s stream %d: %.1f MiB in %.2f s, rtt %.1f ms, retransmits %d%s\n",
					label, dir, i+1, float64(s.Bytes)/(1<<20), s.Seconds, s.RTTMs, s.Retransmits, window)
			}
		}
	}
	printSegments(w, out.Segments)
}
