// Package pathbench measures one path to a traffic service (the lab's,
// or a relay's admin API at /v1/traffic): time to first byte, then
// download and upload rates, each as the whole transfer's average and as
// the steady rate of its second half, with the TCP_INFO RTT and
// retransmissions of the client's own sockets. The path is any dialer:
// direct, or through a chain. relayctl bench runs it over direct and the
// planned chain side by side.
package pathbench

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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// TTFBSamples is how many 1-byte requests the time to first byte is
// the median of.
const TTFBSamples = 5

// Stream is one TCP connection of a transfer.
type Stream struct {
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	RTTMs       float64 `json:"rtt_ms"`      // TCP_INFO smoothed RTT of this host's socket (to the first hop)
	Retransmits uint32  `json:"retransmits"` // TCP_INFO total retransmissions of this host's socket
	// RcvWindowBytes is the largest receive window this host's socket
	// advertised while the transfer ran (TCP_INFO rcv_wnd, sampled every
	// 100 ms; rcv_ssthresh on kernels without it): on a download, what
	// its own window let the first hop keep in flight once autotuning had
	// grown it.
	RcvWindowBytes uint32 `json:"rcv_window_bytes,omitempty"`
	// PeerWindowBytes is the largest receive window the other end of this
	// host's socket advertised while the transfer ran (TCP_INFO snd_wnd,
	// sampled every 100 ms; 0 on kernels without it): on a direct upload,
	// the destination's window once its autotuning had grown it.
	PeerWindowBytes uint32 `json:"peer_window_bytes,omitempty"`
	Error           string `json:"error,omitempty"`
}

// Result is one path (direct or the chain) measured.
type Result struct {
	Relays  []string `json:"relays"`
	DownBps float64  `json:"down_bps"`
	UpBps   float64  `json:"up_bps"`
	// DownSteadyBps and UpSteadyBps are the rates over the second half of
	// the transfer's time, bits/s: what the path moves once slow start has
	// ramped up (on long paths the whole transfer's average includes the
	// ramp), and what a prediction is a prediction of.
	DownSteadyBps float64  `json:"down_steady_bps"`
	UpSteadyBps   float64  `json:"up_steady_bps"`
	TTFBMs        float64  `json:"ttfb_ms"`
	DownStreams   []Stream `json:"down_streams"`
	UpStreams     []Stream `json:"up_streams"`
	Errors        []string `json:"errors,omitempty"`
}

// Path is how one path is dialed and what it is called.
type Path struct {
	Name   string
	Relays []string // the chain's relays; none for direct
	Dial   func(ctx context.Context) (net.Conn, error)
}

// Run is one bench: where the traffic service is and what to move.
type Run struct {
	Target   string // host:port
	Prefix   string // "/v1/traffic" against a relay's admin API, "" against the traffic service
	Token    string
	Relay    string        // the relay whose admin API is the target ("" for the traffic service)
	AdminTLS *tls.Config   // HTTPS to that admin API (nil: plain HTTP)
	Size     int64         // bytes per transfer (when Duration is 0)
	Duration time.Duration // each transfer runs this long instead (0: Size)
	Streams  int           // parallel connections per transfer
	Down, Up bool          // which transfers to run
	Progress io.Writer     // nil: no progress display
}

func (b *Run) request(ctx context.Context, method, path string, body io.Reader, p Path, onConn func(*net.TCPConn)) (*http.Response, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := p.Dial(ctx)
			if err == nil && onConn != nil {
				if tc, ok := tunnel.TCPUnder(c); ok {
					onConn(tc)
				}
			}
			return c, err
		},
	}
	scheme := "http"
	if b.Relay != "" && b.AdminTLS != nil {
		// The relay's admin API over TLS, through the path being measured.
		scheme = "https"
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := tr.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return linktls.HTTPSClient(ctx, c, b.AdminTLS)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+b.Target+b.Prefix+path, body)
	if err != nil {
		return nil, err
	}
	if b.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.Token)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if scheme == "https" {
		if err := adminapi.CheckPeer(resp, b.Relay); err != nil {
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
func (b *Run) ttfb(ctx context.Context, p Path) (float64, error) {
	var ms []float64
	for range TTFBSamples {
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

// transfer runs b.Streams parallel downloads (up=false) or uploads and
// returns the aggregate rate and the steady rate (steadyBps), bits/s.
func (b *Run) transfer(ctx context.Context, p Path, up bool, moved *atomic.Int64) (bps, steady float64, _ []Stream) {
	results := make([]Stream, b.Streams)
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
	stop := every(progressEvery, func(now time.Time) {
		samples = append(samples, progressSample{now.Sub(start).Seconds(), moved.Load()})
	})
	return func() []progressSample { stop(); return samples }
}

// every calls fn every interval, with the tick's time, on a goroutine of
// its own until the returned stop is called; stop returns once fn has run
// for the last time, so what fn wrote is then the caller's to read.
func every(interval time.Duration, fn func(now time.Time)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				fn(now)
			}
		}
	})
	return func() { close(done); wg.Wait() }
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

func (b *Run) stream(ctx context.Context, p Path, up bool, moved *atomic.Int64) Stream {
	var res Stream
	// TCP_INFO is sampled while the connection is open: the transport
	// closes it as soon as the body ends. The window is the largest
	// advertised: at any one moment it is the receive buffer's free space,
	// smaller while the reader is behind (see ReceiveWindow).
	var mu sync.Mutex
	var stops []func()
	defer func() {
		// Not under mu: a sample may be waiting for it.
		mu.Lock()
		all := stops
		mu.Unlock()
		for _, stop := range all {
			stop()
		}
	}()
	onConn := func(c *net.TCPConn) {
		sample := func(time.Time) {
			if ti, ok := tcpInfo(c); ok {
				mu.Lock()
				res.RTTMs, res.Retransmits = ti.rttMs, ti.retrans
				res.RcvWindowBytes = max(res.RcvWindowBytes, ti.rcvWindowBytes)
				res.PeerWindowBytes = max(res.PeerWindowBytes, ti.sndWindowBytes)
				mu.Unlock()
			}
		}
		sample(time.Now())
		mu.Lock()
		stops = append(stops, every(100*time.Millisecond, sample))
		mu.Unlock()
	}
	size := b.Size
	if b.Duration > 0 {
		size = traffic.MaxBytes // read until the deadline
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Duration)
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
			if err == nil && b.Duration == 0 && ur.SHA256 != traffic.ExpectedSHA256(size) {
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
	if b.Duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
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

// socketInfo is what bench reads from this host's socket's TCP_INFO.
type socketInfo struct {
	rttMs          float64 // smoothed RTT
	retrans        uint32  // total retransmissions
	rcvWindowBytes uint32  // the receive window advertised now
	sndWindowBytes uint32  // the peer's receive window as last advertised (0: unknown)
}

// tcpInfo reads this host's socket's TCP_INFO.
func tcpInfo(c *net.TCPConn) (si socketInfo, ok bool) {
	info, err := hostnet.TCPInfo(c)
	if err != nil {
		return si, false
	}
	si = socketInfo{rttMs: float64(info.Rtt) / 1000, retrans: info.Total_retrans, rcvWindowBytes: info.Rcv_wnd, sndWindowBytes: info.Snd_wnd}
	if si.rcvWindowBytes == 0 { // tcpi_rcv_wnd is from Linux 6.2
		si.rcvWindowBytes = info.Rcv_ssthresh
	}
	return si, true
}

// Measure runs TTFB, download and upload over one path.
func (b *Run) Measure(ctx context.Context, p Path) *Result {
	res := &Result{Relays: p.Relays}
	if res.Relays == nil {
		res.Relays = []string{}
	}
	var err error
	if res.TTFBMs, err = b.ttfb(ctx, p); err != nil {
		res.Errors = append(res.Errors, "ttfb: "+err.Error())
		return res
	}
	for _, up := range []bool{false, true} {
		if up && !b.Up || !up && !b.Down {
			continue
		}
		what := "download"
		if up {
			what = "upload"
		}
		var moved atomic.Int64
		stop := b.showProgress(p.Name+" "+what, &moved)
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
func (b *Run) showProgress(what string, moved *atomic.Int64) func() {
	if b.Progress == nil {
		return func() {}
	}
	start := time.Now()
	stop := every(250*time.Millisecond, func(time.Time) {
		secs := time.Since(start).Seconds()
		fmt.Fprintf(b.Progress, "\r\x1b[K%s: %.1f MiB, %.1f Mbit/s", what, float64(moved.Load())/(1<<20), float64(moved.Load())*8/secs/1e6)
	})
	return func() { stop(); fmt.Fprintf(b.Progress, "\r\x1b[K") }
}

// windowSampleEvery is how often ReceiveWindow reads the socket's window.
const windowSampleEvery = 2 * time.Millisecond

// ReceiveWindow downloads sizeBytes over p and returns the largest receive
// window this host's socket advertised while they arrived (TCP_INFO
// rcv_wnd, rcv_ssthresh before Linux 6.2), bytes: what autotuning let that
// sender keep in flight on this path. The window advertised at any one
// moment is the free space of the receive buffer then, smaller while the
// reader is behind, so it samples every windowSampleEvery and keeps the
// maximum; a single read at the end once came out at half the window the
// next transfer ran at. It reads the socket before the last byte, while
// the connection is still open.
func (b *Run) ReceiveWindow(ctx context.Context, p Path, sizeBytes int64) (uint32, error) {
	if sizeBytes < 2 {
		return 0, fmt.Errorf("receive window: size %d bytes: want 2 or more", sizeBytes)
	}
	var sock *net.TCPConn
	resp, err := b.request(ctx, http.MethodGet, fmt.Sprintf("/bytes/%d", sizeBytes), nil, p, func(c *net.TCPConn) { sock = c })
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if sock == nil {
		return 0, errors.New("receive window: the path's connection is not over TCP")
	}
	var maxBytes atomic.Uint32
	sample := func(time.Time) {
		if si, ok := tcpInfo(sock); ok && si.rcvWindowBytes > maxBytes.Load() {
			maxBytes.Store(si.rcvWindowBytes)
		}
	}
	stop := every(windowSampleEvery, sample)
	_, err = io.CopyN(io.Discard, resp.Body, sizeBytes-1)
	stop()
	if err != nil {
		return 0, fmt.Errorf("receive window: %w", err)
	}
	sample(time.Now())
	if maxBytes.Load() == 0 {
		return 0, errors.New("receive window: TCP_INFO not readable")
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return maxBytes.Load(), nil
}
