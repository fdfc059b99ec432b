package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/lab/topology"
)

const (
	warmupBytes   = 1 << 20
	warmupCount   = 3
	readyTimeout  = 30 * time.Second
	stopTimeout   = 10 * time.Second
	cleanupBudget = 90 * time.Second
)

// bench is one topology being measured.
type bench struct {
	c       *config
	name    string
	topo    *topology.Topology
	state   *lab.State
	tr      *TopoResult
	daemons []*labpeer.Daemon
}

func measureTopology(ctx context.Context, c *config, name string) *TopoResult {
	start := time.Now()
	file := filepath.Join(c.configDir, name+".yaml")
	tr := &TopoResult{Name: name, File: file, Started: start.UTC(), Impls: map[string]*ImplResult{}}
	defer func() { tr.DurationS = time.Since(start).Seconds() }()
	topo, err := topology.Load(file)
	if err != nil {
		tr.Error = err.Error()
		return tr
	}
	if topo.Name != name {
		logf("note: %s declares lab name %q", file, topo.Name)
	}
	b := &bench{c: c, name: topo.Name, topo: topo, tr: tr}
	if err := b.describe(); err != nil {
		tr.Error = err.Error()
		return tr
	}
	logf("== %s: %d segment(s) %v ms via %v", name, tr.Segments, tr.SegmentRTTms, tr.Chain)

	// Cleanup runs whatever happened, with its own time budget.
	labUp := false
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cleanupBudget)
		defer cancel()
		b.stopDaemons()
		if labUp {
			if out, err := b.relayctl(cctx, "lab", "--state-dir", c.stateRoot, "down", b.name); err != nil {
				logf("lab down %s: %v: %s", b.name, err, out)
				if tr.Error == "" {
					tr.Error = "lab down: " + err.Error()
				}
			}
		}
		killStrays(c, []string{b.name})
	}()

	if out, err := b.relayctl(ctx, "lab", "--state-dir", c.stateRoot, "up", "-t", file, "--transport", c.transport,
		"--window", c.checkWindow().String()); err != nil {
		tr.Error = fmt.Sprintf("lab up: %v: %s", err, strings.TrimSpace(out))
		// A lab that came half up is still ours to take down, unless it
		// is someone else's lab of the same name.
		labUp = !strings.Contains(out, "already up")
		return tr
	}
	labUp = true
	st, err := lab.LoadState(filepath.Join(c.stateRoot, b.name))
	if err != nil {
		tr.Error = err.Error()
		return tr
	}
	b.state = st

	impls := []string{implDirect}
	if len(tr.Chain) > 0 {
		impls = allImpls
		if err := b.startPeers(ctx); err != nil {
			tr.Error = err.Error()
			b.readStatus()
			return tr
		}
	}
	for _, impl := range impls {
		tr.Impls[impl] = &ImplResult{}
	}
	if err := b.warmup(ctx, impls); err != nil {
		tr.Error = err.Error()
		b.readStatus()
		return tr
	}
	for round := 0; round < c.runs && ctx.Err() == nil; round++ {
		for i := range impls {
			impl := impls[(i+round)%len(impls)]
			s := b.measure(ctx, impl, round, i)
			if ctx.Err() != nil {
				break
			}
			ir := tr.Impls[impl]
			ir.Samples = append(ir.Samples, s)
			status := fmt.Sprintf("%.2f Mbit/s", s.BytesPerS*8/1e6)
			if !s.OK {
				status = "FAILED: " + s.Error
			}
			logf("%s round %d/%d %-6s %s", name, round+1, c.runs, impl, status)
		}
	}
	if ctx.Err() != nil {
		tr.Error = "interrupted"
	}
	summarize(tr)
	b.readStatus()
	for _, impl := range impls {
		ir := tr.Impls[impl]
		logf("%s %-6s median %.2f Mbit/s (%d ok, %d failed) ratio %.2f", name, impl, ir.MedianBps*8/1e6, ir.OK, ir.Failed, ir.Ratio)
	}
	return tr
}

// describe fills the chain and segment RTTs from the topology.
func (b *bench) describe() error {
	tr, t := b.tr, b.topo
	if _, ok := t.Nodes[topology.ClientNode]; !ok {
		return errors.New("no client node")
	}
	servers := t.Servers()
	if len(servers) != 1 {
		return fmt.Errorf("want exactly one server node, have %v", servers)
	}
	server := servers[0]
	rtt := func(a, z string) (float64, bool) {
		for _, l := range t.Links {
			if (l.Between[0] == a && l.Between[1] == z) || (l.Between[0] == z && l.Between[1] == a) {
				ab, ba := l.OneWayNs()
				return float64(ab+ba) / 1e6, true
			}
		}
		return 0, false
	}
	d, ok := rtt(topology.ClientNode, server)
	if !ok {
		return errors.New("no direct client-server link")
	}
	tr.DirectRTTms = d
	// The entry relay is the relay no other relay points at.
	relays := t.Relays()
	pointed := map[string]bool{}
	for _, r := range relays {
		for _, n := range t.Nodes[r].Next {
			pointed[n] = true
		}
	}
	var entries []string
	for _, r := range relays {
		if !pointed[r] {
			entries = append(entries, r)
		}
	}
	if len(relays) > 0 && len(entries) != 1 {
		return fmt.Errorf("want one entry relay (a relay no other relay points at), have %v", entries)
	}
	if len(entries) == 1 {
		for r := entries[0]; r != ""; {
			tr.Chain = append(tr.Chain, r)
			next := t.Nodes[r].Next
			if len(next) > 1 {
				return fmt.Errorf("relay %s: next %v: dante and squid are chained hop by hop, so each relay may name one next hop", r, next)
			}
			if len(next) == 0 {
				break
			}
			r = next[0]
			if contains(tr.Chain, r) {
				return fmt.Errorf("relay chain loops at %s", r)
			}
		}
		if len(tr.Chain) != len(relays) {
			return fmt.Errorf("chain %v does not use every relay %v", tr.Chain, relays)
		}
	}
	path := append(append([]string{topology.ClientNode}, tr.Chain...), server)
	for i := 0; i+1 < len(path); i++ {
		r, ok := rtt(path[i], path[i+1])
		if !ok {
			return fmt.Errorf("no link %s-%s on the relay path", path[i], path[i+1])
		}
		tr.SegmentRTTms = append(tr.SegmentRTTms, r)
	}
	tr.Segments = len(path) - 1
	tr.Kind = "segments"
	if strings.HasPrefix(b.name, "sweep") {
		tr.Kind = "position"
	}
	return nil
}

// relayctl runs bin/relayctl and returns its combined output.
func (b *bench) relayctl(ctx context.Context, args ...string) (string, error) {
	return labpeer.Relayctl(ctx, b.c.relayctl, args...)
}

func (b *bench) node(name string) *lab.Node { return b.state.Nodes[name] }

// nextHop is the relay a relay's peers forward to ("" = the destination).
func (b *bench) nextHop(relay string) string {
	if n := b.topo.Nodes[relay].Next; len(n) > 0 {
		return n[0]
	}
	return ""
}

// startPeers starts dante and squid on every relay node, last hop first, and
// waits until both chains answer from the client.
func (b *bench) startPeers(ctx context.Context) error {
	dir := b.state.Dir
	proxyUID, proxyGID := -1, -1
	if u, err := user.Lookup("proxy"); err == nil {
		proxyUID, _ = strconv.Atoi(u.Uid)
		proxyGID, _ = strconv.Atoi(u.Gid)
	}
	for i := len(b.tr.Chain) - 1; i >= 0; i-- {
		r := b.tr.Chain[i]
		n := b.node(r)
		nextAddr := ""
		if h := b.nextHop(r); h != "" {
			nextAddr = b.node(h).Addr
		}
		// dante
		conf := filepath.Join(dir, r+".dante.conf")
		logPath := filepath.Join(dir, r+".dante.log")
		if err := os.WriteFile(conf, []byte(labpeer.DanteConfig(logPath, n.Addr, nextAddr, dantePort)), 0o644); err != nil {
			return err
		}
		if err := b.startDaemon("dante", n, dantePort, filepath.Join(dir, r+".dante.out"), -1, -1,
			"/usr/sbin/danted", "-f", conf, "-p", filepath.Join(dir, r+".dante.pid")); err != nil {
			return err
		}
		// squid
		conf = filepath.Join(dir, r+".squid.conf")
		if err := os.WriteFile(conf, []byte(labpeer.SquidConfig(dir, r, n.Addr, nextAddr, squidPort)), 0o644); err != nil {
			return err
		}
		squid, err := exec.LookPath("squid")
		if err != nil {
			squid = "/usr/sbin/squid"
		}
		if err := b.startDaemon("squid", n, squidPort, filepath.Join(dir, r+".squid.log"), proxyUID, proxyGID,
			squid, "-N", "-n", labpeer.SquidService(b.name, r), "-f", conf); err != nil {
			return err
		}
	}
	// Every daemon listens before the chain is tried from the client.
	deadline := time.Now().Add(readyTimeout)
	for _, d := range b.daemons {
		if err := d.WaitListening(ctx, deadline, b.state.Dir); err != nil {
			return err
		}
	}
	return nil
}

// startDaemon starts a peer proxy on node n and tracks it for stopDaemons.
func (b *bench) startDaemon(what string, n *lab.Node, port int, logPath string, uid, gid int, argv ...string) error {
	d, err := labpeer.StartDaemon(n, what, port, logPath, uid, gid, argv...)
	if err != nil {
		return err
	}
	b.daemons = append(b.daemons, d)
	logf("%s: started %s on %s (pid %d), output in %s", b.name, what, n.Name, d.Cmd.Process.Pid, logPath)
	return nil
}

func (b *bench) stopDaemons() {
	labpeer.StopAll(b.daemons, stopTimeout, logf)
	b.daemons = nil
}

// killStrays kills dante and squid process groups left by an earlier run of
// this driver for the given labs (recognized by their config paths in this
// driver's state directory).
func killStrays(c *config, labs []string) {
	labpeer.KillStrays(func(cmdline string) bool {
		for _, l := range labs {
			dir := filepath.Join(c.stateRoot, l) + "/"
			if strings.Contains(cmdline, dir) && (strings.Contains(cmdline, ".dante.conf") || strings.Contains(cmdline, ".squid.conf")) {
				return true
			}
		}
		return false
	}, logf)
}

// curlResult is one curl run.
type curlResult struct {
	speed          float64
	size           int64
	code           int
	startTransferS float64 // curl's time_starttransfer: the first byte of the body
	totalS         float64
	err            error
}

// curlArgs is the proxy part of curl's argv for impl.
func (b *bench) curlArgs(impl string) []string {
	if impl == implDirect {
		return nil
	}
	entry := b.tr.Chain[0]
	switch impl {
	case implRelayd:
		return []string{"-x", fmt.Sprintf("socks5h://%s:%d", entry, lab.SOCKSPort)}
	case implRelaydHTTP:
		return []string{"-p", "-x", fmt.Sprintf("http://%s:%d", entry, lab.HTTPPort)}
	case implDante:
		return []string{"-x", fmt.Sprintf("socks5h://%s:%d", b.node(entry).Addr, dantePort)}
	case implSquid:
		return []string{"-p", "-x", fmt.Sprintf("http://%s:%d", entry, squidPort)}
	}
	panic("unknown implementation " + impl)
}

func (b *bench) serverName() string { return b.topo.Servers()[0] }

// curl downloads size bytes from the client node through impl.
func (b *bench) curl(ctx context.Context, impl string, size int64) curlResult {
	url := fmt.Sprintf("http://%s:%d/bytes/%d", b.serverName(), lab.TrafficPort, size)
	args := []string{"lab", "--state-dir", b.c.stateRoot, "exec", "--lab", b.name, "client", "--",
		"curl", "-sS", "-o", "/dev/null", "--max-time", strconv.Itoa(b.c.maxTime),
		"-w", `%{speed_download} %{size_download} %{http_code} %{time_starttransfer} %{time_total}\n`}
	args = append(append(args, b.curlArgs(impl)...), url)
	cctx, cancel := context.WithTimeout(ctx, time.Duration(b.c.maxTime+30)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, b.c.relayctl, args...)
	labpeer.SetGroup(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var r curlResult
	f := strings.Fields(out.String())
	if len(f) == 5 {
		r.speed, _ = strconv.ParseFloat(f[0], 64)
		r.size, _ = strconv.ParseInt(f[1], 10, 64)
		r.code, _ = strconv.Atoi(f[2])
		r.startTransferS, _ = strconv.ParseFloat(f[3], 64)
		r.totalS, _ = strconv.ParseFloat(f[4], 64)
	}
	msg := strings.TrimSpace(errb.String())
	switch {
	case runErr != nil:
		r.err = fmt.Errorf("curl: %v: %s", runErr, msg)
	case r.code != 200:
		r.err = fmt.Errorf("http_code %d (%s)", r.code, msg)
	case r.size != size:
		r.err = fmt.Errorf("size_download %d, want %d (%s)", r.size, size, msg)
	case r.speed <= 0:
		r.err = fmt.Errorf("unparsable curl output %q", out.String())
	}
	return r
}

func (b *bench) measure(ctx context.Context, impl string, round, order int) Sample {
	s := Sample{Round: round, Order: order}
	for attempt := 1; attempt <= 2; attempt++ {
		labpeer.FlushTCPMetrics(ctx, b.state)
		s.Attempts = attempt
		r := b.curl(ctx, impl, b.c.size)
		if r.err == nil {
			s.OK, s.BytesPerS, s.Error = true, r.speed, ""
			s.FirstByteMs = r.startTransferS * 1e3
			if stream := r.totalS - r.startTransferS; stream > 0 {
				s.StreamBytesPerS = float64(r.size) / stream
			}
			return s
		}
		if ctx.Err() != nil {
			s.Error = "interrupted"
			return s
		}
		if attempt == 1 {
			s.FirstErr = r.err.Error()
			logf("%s %s round %d: %v: retrying once", b.name, impl, round+1, r.err)
			time.Sleep(2 * time.Second)
		} else {
			s.Error = r.err.Error()
		}
	}
	return s
}

// warmup makes every chain answer (ready check: one success within
// readyTimeout) and then does warmupCount more downloads through it.
func (b *bench) warmup(ctx context.Context, impls []string) error {
	for _, impl := range impls {
		deadline := time.Now().Add(readyTimeout)
		for {
			r := b.curl(ctx, impl, 1000)
			if r.err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.tr.Warmup = append(b.tr.Warmup, fmt.Sprintf("%s ready check: %v", impl, r.err))
			if time.Now().After(deadline) {
				return fmt.Errorf("%s chain does not answer after %v: %v", impl, readyTimeout, r.err)
			}
			time.Sleep(time.Second)
		}
		for i := 0; i < warmupCount; i++ {
			if r := b.curl(ctx, impl, warmupBytes); r.err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.tr.Warmup = append(b.tr.Warmup, fmt.Sprintf("%s warm-up %d: %v", impl, i+1, r.err))
				logf("%s %s warm-up %d: %v", b.name, impl, i+1, r.err)
			}
		}
	}
	return nil
}

// readStatus records the lab's self-check.
func (b *bench) readStatus() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	valid, problems := labpeer.LabStatus(ctx, b.c.relayctl, b.c.stateRoot, b.name)
	b.tr.Problems = append(b.tr.Problems, problems...)
	if valid == nil {
		return
	}
	b.tr.Valid = valid
	if !*valid {
		logf("%s: lab self-check INVALID: %v", b.name, problems)
	}
}

// summarize computes medians and ratios.
func summarize(tr *TopoResult) {
	for _, ir := range tr.Impls {
		var ok, firstByte, stream []float64
		ir.OK, ir.Failed = 0, 0
		for _, s := range ir.Samples {
			if s.OK {
				ok = append(ok, s.BytesPerS)
				ir.OK++
				if s.FirstByteMs > 0 && s.StreamBytesPerS > 0 {
					firstByte = append(firstByte, s.FirstByteMs)
					stream = append(stream, s.StreamBytesPerS)
				}
			} else {
				ir.Failed++
			}
		}
		ir.MedianFirstByteMs, ir.MedianStreamBps = labpeer.Median(firstByte), labpeer.Median(stream)
		ir.MedianBps, ir.MinBps, ir.MaxBps = labpeer.Median(ok), 0, 0
		if len(ok) > 0 {
			ir.MinBps, ir.MaxBps = ok[0], ok[len(ok)-1]
		}
	}
	d := tr.Impls[implDirect]
	for _, ir := range tr.Impls {
		ir.Ratio = 0
		if d != nil && d.MedianBps > 0 && ir.MedianBps > 0 {
			ir.Ratio = ir.MedianBps / d.MedianBps
		}
	}
}

// versions records what was measured.
func versions(c *config) map[string]string {
	v := map[string]string{}
	for _, pkg := range []string{"dante-server", "squid", "curl"} {
		if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", pkg).Output(); err == nil {
			v[pkg] = strings.TrimSpace(string(out))
		}
	}
	relayd := filepath.Join(filepath.Dir(c.relayctl), "relayd")
	if bi, err := buildinfo.ReadFile(relayd); err == nil {
		s := bi.Main.Path + " " + bi.Main.Version + " (" + bi.GoVersion
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" || kv.Key == "vcs.modified" {
				s += ", " + kv.Key + "=" + kv.Value
			}
		}
		v["relayd"] = s + ")"
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		v["git_head"] = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("sysctl", "-n", "net.ipv4.tcp_congestion_control").Output(); err == nil {
		v["host_congestion_control"] = strings.TrimSpace(string(out))
	}
	return v
}
