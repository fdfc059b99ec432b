package wanemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"
)

// ChainSpec is a load for measuring what the engine holds: Hops links in a
// line between Hops+1 namespaces, every direction shaped by Link, and one
// TCP download from the last namespace to the first, routed through the
// middle ones (the kernel forwards; every packet crosses every link, as it
// does through a chain of relays).
type ChainSpec struct {
	// Prefix names the namespaces (Prefix0 … PrefixN); they are removed
	// afterwards, and any left over from a crash are replaced.
	Prefix string
	Hops   int
	Link   Params
	// ServerCmd is the argv of an HTTP server that answers GET /bytes/N
	// with N bytes (relayctl lab traffic); Measure appends
	// "--listen ADDR:PORT" and runs it in the last namespace, as its own
	// process, so the engine's process holds only the engine and a reader.
	ServerCmd []string
	// Warmup is downloaded before measuring (slow start, queues filling);
	// then the download is measured for Duration.
	Warmup, Duration time.Duration
}

// ChainResult is one measured run.
type ChainResult struct {
	Engine   string  `json:"engine"`
	RateMbit float64 `json:"rate_mbit"` // each link's configured rate
	// GoodputMbit is what the reader received, payload only.
	GoodputMbit float64 `json:"goodput_mbit"`
	// LinkMbit and LinkPps are summed over every link direction: the load
	// the engine carried (data one way, ACKs the other).
	LinkMbit float64 `json:"link_mbit"`
	LinkPps  float64 `json:"link_pps"`
	// Worst lateness over the link directions.
	P99LatenessNs int64 `json:"p99_lateness_ns"`
	MaxLatenessNs int64 `json:"max_lateness_ns"`
	// Invalid is the self-check's verdict; empty when valid.
	Invalid string `json:"invalid,omitempty"`
	// EngineCPUNs is the engine threads' CPU time over the measured span,
	// kernel work done on them included.
	EngineCPUNs int64 `json:"engine_cpu_ns"`
	// CPUSecPerGbit is EngineCPUNs per emulated gigabit (LinkMbit summed).
	CPUSecPerGbit float64      `json:"cpu_s_per_gbit"`
	Shards        []ShardStats `json:"shards,omitempty"`
}

// Valid says whether the self-check accepted the run.
func (r ChainResult) Valid() bool { return r.Invalid == "" }

const chainPort = 18000

func chainAddr(i int) string { return fmt.Sprintf("10.234.0.%d", i+1) }

// MeasureChain builds the chain with the current Config, measures one
// download through it, and tears it down. Needs root.
func MeasureChain(ctx context.Context, spec ChainSpec) (res ChainResult, err error) {
	if spec.Hops < 1 || spec.Hops > 16 {
		return res, fmt.Errorf("hops %d: want 1-16", spec.Hops)
	}
	res.Engine = CurrentConfig().String()
	res.RateMbit = float64(spec.Link.RateBps) / 1e6
	c := &chainLab{spec: spec}
	defer c.close()
	if err := c.addNamespaces(); err != nil {
		return res, err
	}
	if err := c.configureNodes(); err != nil {
		return res, err
	}
	if err := c.addLinks(); err != nil {
		return res, err
	}
	if err := c.addRoutes(); err != nil {
		return res, err
	}
	if err := c.startServer(); err != nil {
		return res, err
	}
	if err := c.dial(ctx); err != nil {
		return res, err
	}
	n, secs, err := c.download(ctx, &res)
	if err != nil {
		return res, err
	}
	res.GoodputMbit = float64(n) * 8 / secs / 1e6
	c.linkStats(&res, secs)
	return res, nil
}

// chainLab is the chain MeasureChain builds. Each part is recorded once
// it exists, so that close removes exactly what was made, the last made
// first.
type chainLab struct {
	spec    ChainSpec
	names   []string // the namespaces, in chain order
	links   []*Link  // links[i] joins names[i] and names[i+1]
	srv     *exec.Cmd
	srvErr  bytes.Buffer
	srvAddr string
	conn    net.Conn // the download, from the first namespace
}

// close tears down what was built: the download's connection, the
// server, the links, then the namespaces.
func (c *chainLab) close() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.srv != nil {
		_ = c.srv.Process.Kill()
		_ = c.srv.Wait()
	}
	for i := len(c.links) - 1; i >= 0; i-- {
		c.links[i].Close()
	}
	for i := len(c.names) - 1; i >= 0; i-- {
		DelNetns(c.names[i])
	}
}

// addNamespaces makes a namespace per node, replacing any of the same
// name left over from a crash.
func (c *chainLab) addNamespaces() error {
	for i := range c.spec.Hops + 1 {
		name := fmt.Sprintf("%s%d", c.spec.Prefix, i)
		_ = DelNetns(name)
		if err := AddNetns(name); err != nil {
			return err
		}
		c.names = append(c.names, name)
	}
	return nil
}

// configureNodes sets every node's TCP and forwarding, and its address.
func (c *chainLab) configureNodes() error {
	for i, ns := range c.names {
		sysctls := map[string]string{
			"net.ipv4.tcp_congestion_control": "cubic",
			"net.ipv4.tcp_rmem":               "4096 131072 16777216",
			"net.ipv4.tcp_wmem":               "4096 65536 16777216",
			"net.ipv4.ip_forward":             "1",
		}
		for k, v := range sysctls {
			if err := SetSysctl(ns, k, v); err != nil {
				return err
			}
		}
		if err := AddAddr(ns, "lo", chainAddr(i)); err != nil {
			return err
		}
	}
	return nil
}

// addLinks joins each node to the next by a shaped link.
func (c *chainLab) addLinks() error {
	for i := range c.spec.Hops {
		a := Endpoint{Netns: c.names[i], Ifname: "ch" + strconv.Itoa(i), Addr: chainAddr(i)}
		b := Endpoint{Netns: c.names[i+1], Ifname: "ch" + strconv.Itoa(i), Addr: chainAddr(i + 1)}
		l, err := NewLink(a, b, c.spec.Link, c.spec.Link)
		if err != nil {
			return err
		}
		c.links = append(c.links, l)
	}
	return nil
}

// addRoutes routes beyond the neighbours: node i reaches nodes after i+1
// through link i and nodes before i-1 through link i-1.
func (c *chainLab) addRoutes() error {
	for i, ns := range c.names {
		for j := range c.names {
			var dev string
			switch {
			case j > i+1:
				dev = "ch" + strconv.Itoa(i)
			case j < i-1:
				dev = "ch" + strconv.Itoa(i-1)
			default:
				continue
			}
			if err := run("ip", "-n", ns, "route", "replace", chainAddr(j)+"/32", "dev", dev, "src", chainAddr(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// startServer starts spec.ServerCmd in the last namespace.
func (c *chainLab) startServer() error {
	last := len(c.names) - 1
	c.srvAddr = net.JoinHostPort(chainAddr(last), strconv.Itoa(chainPort))
	argv := append([]string{"netns", "exec", c.names[last]}, c.spec.ServerCmd...)
	argv = append(argv, "--listen", c.srvAddr)
	srv := exec.Command("ip", argv...)
	srv.Stderr = &c.srvErr
	if err := srv.Start(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	c.srv = srv
	return nil
}

// dial connects from the first namespace to the server, retrying for
// 10 s while it starts.
func (c *chainLab) dial(ctx context.Context) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		var conn net.Conn
		err := InNetns(c.names[0], func() (err error) {
			conn, err = net.DialTimeout("tcp", c.srvAddr, time.Second)
			return err
		})
		if err == nil {
			c.conn = conn
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("server at %s: %w (its stderr: %q)", c.srvAddr, err, c.srvErr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// download runs the download: spec.Warmup unmeasured, then spec.Duration
// measured, the engine's CPU time and shard stats into res. It returns
// the bytes read in the measured span and the span's seconds.
func (c *chainLab) download(ctx context.Context, res *ChainResult) (int64, float64, error) {
	// A download longer than any run (the most the traffic service
	// serves); closing the connection ends it.
	if _, err := fmt.Fprintf(c.conn, "GET /bytes/%d HTTP/1.1\r\nHost: chain\r\n\r\n", int64(traffic.MaxBytes)); err != nil {
		return 0, 0, err
	}
	rd := &countReader{r: c.conn}
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, rd)
		errc <- err
	}()
	sleepCtx(ctx, c.spec.Warmup)
	for _, l := range c.links {
		l.ResetStats()
	}
	ResetEngineStats()
	cpu0 := chainEngineCPU(c.links)
	b0, t0 := rd.n.Load(), time.Now()
	sleepCtx(ctx, c.spec.Duration)
	b1, t1 := rd.n.Load(), time.Now()
	res.EngineCPUNs = chainEngineCPU(c.links) - cpu0
	res.Shards = EngineStats()
	c.conn.Close()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, net.ErrClosed) && b1 == b0 {
			return 0, 0, fmt.Errorf("download: %w", err)
		}
	case <-time.After(5 * time.Second):
	}
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	if b1 == b0 {
		// Not a run at 0 Mbit/s: a run that did not happen (the server
		// refused the request, the path is broken).
		return 0, 0, fmt.Errorf("download: no bytes in the measured %v (server's stderr: %q)", c.spec.Duration, c.srvErr.String())
	}
	return b1 - b0, t1.Sub(t0).Seconds(), nil
}

// linkStats sets res's link figures over the measured secs, summed over
// every link direction, and the links' self-check verdict.
func (c *chainLab) linkStats(res *ChainResult, secs float64) {
	var bytes, pkts uint64
	var errs []error
	for _, l := range c.links {
		ab, ba := l.Stats()
		for _, st := range []Stats{ab, ba} {
			bytes += st.Bytes
			pkts += st.Packets
			res.P99LatenessNs = max(res.P99LatenessNs, st.LatenessP99Ns)
			res.MaxLatenessNs = max(res.MaxLatenessNs, st.LatenessMaxNs)
		}
		if err := l.SelfCheck(); err != nil {
			errs = append(errs, err)
		}
	}
	res.LinkMbit = float64(bytes) * 8 / secs / 1e6
	res.LinkPps = float64(pkts) / secs
	if res.LinkMbit > 0 {
		res.CPUSecPerGbit = float64(res.EngineCPUNs) / 1e9 / (res.LinkMbit * secs / 1e3)
	}
	if err := errors.Join(errs...); err != nil {
		res.Invalid = err.Error()
	}
}

// chainEngineCPU is the CPU time of the engine threads serving links.
func chainEngineCPU(links []*Link) int64 {
	var ns int64
	if len(links) > 0 && links[0].cfg.Engine == EngineThread {
		for _, l := range links {
			ns += l.ab.cpuNs.Load() + l.ba.cpuNs.Load()
		}
		return ns
	}
	for _, s := range EngineStats() {
		ns += s.CPUNs
	}
	return ns
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
