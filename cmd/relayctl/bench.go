package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/relay"
)

// benchTTFBSamples is how many 1-byte requests the time to first byte is
// the median of.
const benchTTFBSamples = 5

// streamResult is one TCP connection of a transfer.
type streamResult struct {
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	RTTMs       float64 `json:"rtt_ms"`      // TCP_INFO smoothed RTT of this host's socket (to the first hop)
	Retransmits uint32  `json:"retransmits"` // TCP_INFO total retransmissions of this host's socket
	Error       string  `json:"error,omitempty"`
}

// pathResult is one path (direct or the chain) measured.
type pathResult struct {
	Relays  []string `json:"relays"`
	DownBps float64  `json:"down_bps"`
	UpBps   float64  `json:"up_bps"`
	// DownSteadyBps and UpSteadyBps are the rates over the second half of
	// the transfer's time, bits/s: what the path moves once slow start has
	// ramped up (on long paths the whole transfer's average includes the
	// ramp), and what a prediction is a prediction of.
	DownSteadyBps float64        `json:"down_steady_bps"`
	UpSteadyBps   float64        `json:"up_steady_bps"`
	TTFBMs        float64        `json:"ttfb_ms"`
	DownStreams   []streamResult `json:"down_streams"`
	UpStreams     []streamResult `json:"up_streams"`
	Errors        []string       `json:"errors,omitempty"`
}

// benchJSON is `relayctl bench -o json`, and one line of the history file.
type benchJSON struct {
	Time        time.Time   `json:"time"`
	Destination string      `json:"destination"`
	Target      string      `json:"target"`
	SizeBytes   int64       `json:"size_bytes,omitempty"`
	DurationS   float64     `json:"duration_s,omitempty"`
	Streams     int         `json:"streams"`
	Direct      *pathResult `json:"direct,omitempty"`
	Chain       *pathResult `json:"chain,omitempty"`
	Predicted   struct {
		DownBps       float64 `json:"down_bps"`
		UpBps         float64 `json:"up_bps"`
		DirectDownBps float64 `json:"direct_down_bps"`
		DirectUpBps   float64 `json:"direct_up_bps"`
	} `json:"predicted"`
	SpeedupDown float64 `json:"speedup_down,omitempty"`
	SpeedupUp   float64 `json:"speedup_up,omitempty"`
}

// benchPath is how one path is dialed and what it is called.
type benchPath struct {
	name   string
	relays []string
	dial   func(ctx context.Context) (net.Conn, error)
}

// benchRun holds the settings of one bench.
type benchRun struct {
	target   string // host:port
	prefix   string // "/v1/traffic" against a relay's admin API, "" against the traffic service
	token    string
	relay    string      // the relay whose admin API is the target ("" for the traffic service)
	adminTLS *tls.Config // HTTPS to that admin API (nil: plain HTTP)
	size     int64
	duration time.Duration
	streams  int
	down, up bool      // which transfers to run
	progress io.Writer // nil: no progress display
}

func (b *benchRun) request(ctx context.Context, method, path string, body io.Reader, p benchPath, onConn func(*net.TCPConn)) (*http.Response, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := p.dial(ctx)
			if err == nil && onConn != nil {
				if tc, ok := c.(*net.TCPConn); ok {
					onConn(tc)
				}
			}
			return c, err
		},
	}
	scheme := "http"
	if b.relay != "" && b.adminTLS != nil {
		// The relay's admin API over TLS, through the path being measured.
		scheme = "https"
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := tr.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, b.adminTLS)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+b.target+b.prefix+path, body)
	if err != nil {
		return nil, err
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if scheme == "https" {
		if err := registry.CheckAdminPeer(resp, b.relay); err != nil {
			resp.Body.Close()
			return nil, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// ttfb is the median over a few fresh connections of: connecting through
// the path, sending a 1-byte request, receiving the 1-byte answer.
func (b *benchRun) ttfb(ctx context.Context, p benchPath) (float64, error) {
	var ms []float64
	for range benchTTFBSamples {
		start := time.Now()
		var first time.Duration
		tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Since(start) }})
		resp, err := b.request(tctx, http.MethodGet, "/bytes/1", nil, p, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ms = append(ms, float64(first)/1e6)
	}
	sort.Float64s(ms)
	return ms[len(ms)/2], nil
}

// transfer runs b.streams parallel downloads (up=false) or uploads and
// returns the aggregate rate and the steady rate (steadyBps), bits/s.
func (b *benchRun) transfer(ctx context.Context, p benchPath, up bool, moved *atomic.Int64) (bps, steady float64, _ []streamResult) {
	results := make([]streamResult, b.streams)
	var wg sync.WaitGroup
	start := time.Now()
	progress := sampleProgress(start, moved)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = b.stream(ctx, p, up, moved)
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	samples := progress()
	var total int64
	for _, r := range results {
		total += r.Bytes
	}
	if secs <= 0 {
		return 0, 0, results
	}
	return float64(total) * 8 / secs, steadyBps(append(samples, progressSample{secs, total})), results
}

// progressSample is how many bytes had moved after secs seconds.
type progressSample struct {
	secs  float64
	bytes int64
}

// progressEvery is how often a transfer's progress is sampled.
const progressEvery = 50 * time.Millisecond

// sampleProgress records moved every progressEvery from now on; the
// returned function stops and returns the samples.
func sampleProgress(start time.Time, moved *atomic.Int64) func() []progressSample {
	var samples []progressSample
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				samples = append(samples, progressSample{now.Sub(start).Seconds(), moved.Load()})
			}
		}
	})
	return func() []progressSample { close(done); wg.Wait(); return samples }
}

// steadyBps is the rate over the second half of a transfer's time, bits/s,
// from samples in time order whose last is the end; the bytes at the half
// way point are interpolated between the samples around it. 0 for a
// transfer too short to tell (under 4 sampling periods).
func steadyBps(samples []progressSample) float64 {
	if len(samples) == 0 {
		return 0
	}
	end := samples[len(samples)-1]
	if end.secs < 4*progressEvery.Seconds() {
		return 0
	}
	half := end.secs / 2
	prev := progressSample{}
	for _, s := range samples {
		if s.secs >= half {
			at := float64(prev.bytes)
			if s.secs > prev.secs {
				at += float64(s.bytes-prev.bytes) * (half - prev.secs) / (s.secs - prev.secs)
			}
			return (float64(end.bytes) - at) * 8 / (end.secs - half)
		}
		prev = s
	}
	return 0
}

func (b *benchRun) stream(ctx context.Context, p benchPath, up bool, moved *atomic.Int64) streamResult {
	var res streamResult
	// TCP_INFO is sampled while the connection is open: the transport
	// closes it as soon as the body ends.
	var mu sync.Mutex
	done := make(chan struct{})
	defer close(done)
	onConn := func(c *net.TCPConn) {
		go func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				if rtt, retrans, ok := tcpInfo(c); ok {
					mu.Lock()
					res.RTTMs, res.Retransmits = rtt, retrans
					mu.Unlock()
				}
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		}()
	}
	size := b.size
	if b.duration > 0 {
		size = traffic.MaxBytes // read until the deadline
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.duration)
		defer cancel()
	}
	start := time.Now()
	var n int64
	var err error
	if up {
		body := &countingReader{r: io.LimitReader(traffic.NewSource(uint64(size)), size), moved: moved, n: &n}
		var resp *http.Response
		resp, err = b.request(ctx, http.MethodPost, "/upload", body, p, onConn)
		if err == nil {
			var ur traffic.UploadResult
			err = json.NewDecoder(resp.Body).Decode(&ur)
			resp.Body.Close()
			if err == nil && b.duration == 0 && ur.SHA256 != traffic.ExpectedSHA256(size) {
				err = fmt.Errorf("upload: the sink's SHA-256 does not match what was sent")
			}
		}
	} else {
		var resp *http.Response
		resp, err = b.request(ctx, http.MethodGet, fmt.Sprintf("/bytes/%d", size), nil, p, onConn)
		if err == nil {
			h := sha256.New()
			n, err = io.Copy(io.MultiWriter(h, countingWriter{moved}), resp.Body)
			resp.Body.Close()
			if err == nil && hex.EncodeToString(h.Sum(nil)) != traffic.ExpectedSHA256(size) {
				err = errors.New("download: SHA-256 of the bytes received does not match the source")
			}
		}
	}
	if b.duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = nil // the end of a timed transfer
	}
	mu.Lock()
	defer mu.Unlock()
	res.Bytes, res.Seconds = n, time.Since(start).Seconds()
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

type countingReader struct {
	r     io.Reader
	moved *atomic.Int64
	n     *int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.moved.Add(int64(n))
	*c.n += int64(n)
	return n, err
}

type countingWriter struct{ moved *atomic.Int64 }

func (c countingWriter) Write(p []byte) (int, error) { c.moved.Add(int64(len(p))); return len(p), nil }

// tcpInfo reads this host's socket's smoothed RTT (ms) and retransmissions.
func tcpInfo(c *net.TCPConn) (rttMs float64, retrans uint32, ok bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	cerr := rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			rttMs, retrans, ok = float64(info.Rtt)/1000, info.Total_retrans, true
		}
	})
	return rttMs, retrans, ok && cerr == nil
}

// measure runs TTFB, download and upload over one path.
func (b *benchRun) measure(ctx context.Context, p benchPath) *pathResult {
	res := &pathResult{Relays: p.relays}
	if res.Relays == nil {
		res.Relays = []string{}
	}
	var err error
	if res.TTFBMs, err = b.ttfb(ctx, p); err != nil {
		res.Errors = append(res.Errors, "ttfb: "+err.Error())
		return res
	}
	for _, up := range []bool{false, true} {
		if up && !b.up || !up && !b.down {
			continue
		}
		what := "download"
		if up {
			what = "upload"
		}
		var moved atomic.Int64
		stop := b.showProgress(p.name+" "+what, &moved)
		bps, steady, streams := b.transfer(ctx, p, up, &moved)
		stop()
		for _, s := range streams {
			if s.Error != "" {
				res.Errors = append(res.Errors, what+": "+s.Error)
			}
		}
		if up {
			res.UpBps, res.UpSteadyBps, res.UpStreams = bps, steady, streams
		} else {
			res.DownBps, res.DownSteadyBps, res.DownStreams = bps, steady, streams
		}
	}
	return res
}

// showProgress redraws one status line on a terminal until stopped.
func (b *benchRun) showProgress(what string, moved *atomic.Int64) func() {
	if b.progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(b.progress, "\r\x1b[K")
				return
			case <-t.C:
				secs := time.Since(start).Seconds()
				fmt.Fprintf(b.progress, "\r\x1b[K%s: %.1f MiB, %.1f Mbit/s", what, float64(moved.Load())/(1<<20), float64(moved.Load())*8/secs/1e6)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
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

func benchCmd() *cobra.Command {
	var f planFlags
	var via, history string
	var size int64
	var duration time.Duration
	var streams int
	var transfers []string
	cmd := &cobra.Command{
		Use:   "bench --dst <region|relay|host:port>",
		Short: "Measure throughput and time to first byte, direct and through the planned chain",
		Long: `Plan the path to --dst (as relayctl plan does), then measure, side by side:
time to first byte (median of 5 fresh connections: connect through the path,
1-byte request, 1-byte answer), download and upload throughput (--streams
parallel TCP connections, --size bytes each or for --duration), and per
stream this host's TCP_INFO RTT and retransmissions; direct, through the
chain (native protocol, as relayctl connect sends it), or both. Each
transfer's rate is given over its whole time and over its second half
("steady": after slow start's ramp, which on long paths can take seconds).
The prediction, a steady rate, is printed beside each measurement, every
transfer is checked with SHA-256, and each run is appended as one JSON line
to the history file.

The traffic comes from the destination's traffic source: with a region or
relay name, that relay's admin API (/v1/traffic/, with the admin token);
with host:port, a relaymesh traffic service there (GET /bytes/N, POST
/upload; ` + "`relayctl lab`" + ` servers run one on port 8000).`,
		Example: `  sudo relayctl lab run -t world -- relayctl bench --dst tokyo
  relayctl bench --fleet fleet.yaml --fleet-secret-file fleet.key --dst tokyo --streams 4 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch via {
			case "direct", "plan", "both":
			default:
				return fmt.Errorf("--via %q: want direct, plan or both", via)
			}
			if streams < 1 || streams > 64 {
				return fmt.Errorf("--streams %d: want 1..64", streams)
			}
			if size <= 0 || size > traffic.MaxBytes {
				return fmt.Errorf("--size %d: want 1..%d bytes", size, int64(traffic.MaxBytes))
			}
			ctx := cmd.Context()
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			p, err := f.plan(pctx)
			cancel()
			if err != nil {
				return err
			}
			if f.matrixPath != "" {
				return errors.New("--matrix plans offline; bench measures a live fleet (use --fleet or --consul)")
			}
			run := &benchRun{target: p.Target.Addr, size: size, duration: duration, streams: streams}
			for _, t := range transfers {
				switch t {
				case "down":
					run.down = true
				case "up":
					run.up = true
				case "both":
					run.down, run.up = true, true
				default:
					return fmt.Errorf("--transfers %q: want down, up or both", t)
				}
			}
			if p.Target.Relay != "" {
				run.prefix, run.token, run.relay = "/v1/traffic", f.token(), p.Target.Relay
				if run.adminTLS, err = f.reg.adminTLS(); err != nil {
					return err
				}
			}
			if f.reg.output != "json" && isTerminal(cmd.ErrOrStderr()) && os.Getenv("TERM") != "dumb" {
				run.progress = cmd.ErrOrStderr()
			}
			out := benchJSON{Time: time.Now().UTC(), Destination: f.dst, Target: run.target, Streams: streams}
			if duration > 0 {
				out.DurationS = duration.Seconds()
			} else {
				out.SizeBytes = size
			}
			b := p.Result.Best
			out.Predicted.DownBps, out.Predicted.UpBps = b.PredictedDownBps, b.PredictedUpBps
			out.Predicted.DirectDownBps, out.Predicted.DirectUpBps = p.Result.Direct.PredictedDownBps, p.Result.Direct.PredictedUpBps

			if via != "plan" {
				var d net.Dialer
				out.Direct = run.measure(ctx, benchPath{name: "direct", dial: func(ctx context.Context) (net.Conn, error) {
					return d.DialContext(ctx, "tcp", run.target)
				}})
			}
			if via != "direct" {
				dial, err := chainDialer(p, f.reg.secretPath(), f.reg.transport)
				if err != nil {
					return err
				}
				out.Chain = run.measure(ctx, benchPath{name: "chain", relays: b.Chain, dial: dial})
			}
			if out.Direct != nil && out.Chain != nil {
				if out.Direct.DownBps > 0 {
					out.SpeedupDown = out.Chain.DownBps / out.Direct.DownBps
				}
				if out.Direct.UpBps > 0 {
					out.SpeedupUp = out.Chain.UpBps / out.Direct.UpBps
				}
			}
			if history != "" {
				if err := appendHistory(history, out); err != nil {
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
			if errs := append(pathErrors(out.Direct), pathErrors(out.Chain)...); len(errs) > 0 {
				return fmt.Errorf("%d transfer(s) failed: %s", len(errs), strings.Join(errs, "; "))
			}
			return nil
		},
	}
	f.register(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&via, "via", "both", "direct, plan or both")
	fl.Int64Var(&size, "size", 16<<20, "bytes per stream and direction")
	fl.DurationVar(&duration, "duration", 0, "transfer for this long per direction instead of --size")
	fl.IntVar(&streams, "streams", 1, "parallel TCP connections per direction")
	fl.StringSliceVar(&transfers, "transfers", []string{"down", "up"}, "which transfers to measure: down, up or both (down,up)")
	fl.StringVar(&history, "history", historyPath(), `file the results are appended to, one JSON line per run ("" disables)`)
	return cmd
}

func pathErrors(p *pathResult) []string {
	if p == nil {
		return nil
	}
	return p.Errors
}

// chainDialer dials the target through the planned chain, in process, with
// the same dialers, pools and native protocol as relayctl connect.
func chainDialer(p *planned, secretFile, transport string) (func(context.Context) (net.Conn, error), error) {
	next, err := p.nextOf()
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

func printBench(w io.Writer, out *benchJSON, p *planned) {
	mbit := func(bps float64) string { return fmt.Sprintf("%.1f Mbit/s", bps/1e6) }
	fmt.Fprintf(w, "bench %s (%s), %d stream(s)", out.Destination, out.Target, out.Streams)
	if out.SizeBytes > 0 {
		fmt.Fprintf(w, " of %.1f MiB", float64(out.SizeBytes)/(1<<20))
	} else {
		fmt.Fprintf(w, " for %.0f s", out.DurationS)
	}
	fmt.Fprintf(w, "\nplan: %s\n\n", orDirect(p.Result.Best.Chain))
	fmt.Fprintf(w, "%-8s %12s %16s %16s %16s %16s %16s %16s\n", "path", "ttfb", "download", "steady", "predicted", "upload", "steady", "predicted")
	row := func(name string, r *pathResult, pd, pu float64) {
		if r == nil {
			return
		}
		down, downSteady, up, upSteady := "-", "-", "-", "-"
		if len(r.DownStreams) > 0 {
			down, downSteady = mbit(r.DownBps), mbit(r.DownSteadyBps)
		}
		if len(r.UpStreams) > 0 {
			up, upSteady = mbit(r.UpBps), mbit(r.UpSteadyBps)
		}
		fmt.Fprintf(w, "%-8s %9.1f ms %16s %16s %16s %16s %16s %16s\n", name, r.TTFBMs, down, downSteady, mbit(pd), up, upSteady, mbit(pu))
	}
	row("direct", out.Direct, out.Predicted.DirectDownBps, out.Predicted.DirectUpBps)
	row("chain", out.Chain, out.Predicted.DownBps, out.Predicted.UpBps)
	if out.SpeedupDown > 0 {
		fmt.Fprintf(w, "\nspeed-up over direct: download %.2f×\n", out.SpeedupDown)
	}
	if out.SpeedupUp > 0 {
		fmt.Fprintf(w, "speed-up over direct: upload %.2f×\n", out.SpeedupUp)
	}
	fmt.Fprintf(w, "(steady: the rate over the second half of the transfer's time, after slow start's ramp; the prediction is of that)\n")
	for _, r := range []*pathResult{out.Direct, out.Chain} {
		if r == nil {
			continue
		}
		label := "direct"
		if len(r.Relays) > 0 {
			label = "via " + strings.Join(r.Relays, "→")
		}
		for _, d := range []struct {
			dir     string
			streams []streamResult
		}{{"down", r.DownStreams}, {"up", r.UpStreams}} {
			dir := d.dir
			for i, s := range d.streams {
				fmt.Fprintf(w, "  %s %s stream %d: %.1f MiB in %.2f s, rtt %.1f ms, retransmits %d\n",
					label, dir, i+1, float64(s.Bytes)/(1<<20), s.Seconds, s.RTTMs, s.Retransmits)
			}
		}
	}
}
