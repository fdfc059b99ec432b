package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/topology"
)

const (
	readyTimeout  = 30 * time.Second
	stopTimeout   = 10 * time.Second
	cleanupBudget = 90 * time.Second
)

type bench struct {
	c       *config
	name    string
	state   *lab.State
	res     *Results
	daemons []*labpeer.Daemon
	byName  map[string]*VariantResult
}

func measureLab(ctx context.Context, c *config, res *Results) {
	start := time.Now()
	defer func() { res.DurationS = time.Since(start).Seconds() }()
	topo, err := topology.Load(c.topology)
	if err != nil {
		res.Error = err.Error()
		return
	}
	b := &bench{c: c, name: topo.Name, res: res, byName: map[string]*VariantResult{}}
	for _, v := range allVariants {
		vr := &VariantResult{Name: v, Expected: expectations[v]}
		vr.ExpectRatio = vr.Expected.Ms / expectations[vDirect].Ms
		res.Variants = append(res.Variants, vr)
		b.byName[v] = vr
	}
	killStrays(c, b.name)

	labUp := false
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cleanupBudget)
		defer cancel()
		b.stopDaemons()
		if labUp {
			if out, err := b.relayctl(cctx, "lab", "--state-dir", c.stateRoot, "down", b.name); err != nil {
				logf("lab down %s: %v: %s", b.name, err, out)
				if res.Error == "" {
					res.Error = "lab down: " + err.Error()
				}
			}
		}
		killStrays(c, b.name)
	}()

	logf("lab up %s", c.topology)
	if out, err := b.relayctl(ctx, "lab", "--state-dir", c.stateRoot, "up", "-t", c.topology); err != nil {
		res.Error = fmt.Sprintf("lab up: %v: %s", err, strings.TrimSpace(out))
		labUp = !strings.Contains(out, "already up")
		return
	}
	labUp = true
	st, err := lab.LoadState(filepath.Join(c.stateRoot, b.name))
	if err != nil {
		res.Error = err.Error()
		return
	}
	b.state = st
	if err := b.startChains(ctx); err != nil {
		res.Error = err.Error()
		b.readStatus()
		return
	}
	if err := b.warmup(ctx); err != nil {
		res.Error = err.Error()
		b.readStatus()
		return
	}
	for round := 0; round < c.runs && ctx.Err() == nil; round++ {
		var line []string
		for i := range allVariants {
			v := allVariants[(i+round)%len(allVariants)]
			s := b.measure(ctx, v, round, i)
			if ctx.Err() != nil {
				break
			}
			b.byName[v].Samples = append(b.byName[v].Samples, s)
			if s.OK {
				line = append(line, fmt.Sprintf("%s %.1f", v, s.TotalMs))
			} else {
				line = append(line, fmt.Sprintf("%s FAILED (%s)", v, s.Error))
			}
		}
		logf("round %d/%d: %s", round+1, c.runs, strings.Join(line, ", "))
	}
	if ctx.Err() != nil {
		res.Error = "interrupted"
	}
	summarize(res)
	b.readStatus()
	for _, vr := range res.Variants {
		logf("%-18s median %6.1f ms p90 %6.1f ms (expected %5.1f) ratio %.2f (%d ok, %d failed)",
			vr.Name, vr.MedianMs, vr.P90Ms, vr.Expected.Ms, vr.Ratio, vr.OK, vr.Failed)
	}
}

func (b *bench) node(name string) *lab.Node { return b.state.Nodes[name] }

// relayctl runs bin/relayctl and returns its combined output.
func (b *bench) relayctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.c.relayctl, args...)
	labpeer.SetGroup(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (b *bench) relayd() string { return filepath.Join(filepath.Dir(b.c.relayctl), "relayd") }

// startRelayd starts an extra relayd on node at port with the given hops.
// It listens on the node's lab address (SOCKS5 only), open and allowing
// private destinations, like the lab's own relayd.
func (b *bench) startRelayd(node string, port int, next ...string) error {
	n := b.node(node)
	relayd, err := filepath.Abs(b.relayd())
	if err != nil {
		return err
	}
	argv := []string{relayd, "run", "--name", fmt.Sprintf("%s-%d", node, port),
		"--socks", fmt.Sprintf("%s:%d", n.Addr, port), "--http", "", "--admin", "",
		"--open", "--allow-private", "--fleet-secret-file", filepath.Join(b.state.Dir, "fleet-secret"),
		"--log-format", "json"}
	for _, h := range next {
		argv = append(argv, "--next", h)
	}
	return b.startDaemon("relayd", node, port, filepath.Join(b.state.Dir, fmt.Sprintf("%s.relayd-%d.log", node, port)), -1, -1, argv...)
}

// startChains sets up every variant's chain on the relay nodes.
func (b *bench) startChains(ctx context.Context) error {
	dir := b.state.Dir
	set := func(v, setup, curl string) { b.byName[v].Setup, b.byName[v].Curl = setup, curl }
	set(vDirect, "no proxy", "")

	// relayd native: the entry sends one header naming r2 and r3; r2 and r3
	// are the lab's relayd relay listeners (port 7000).
	if err := b.startRelayd("r1", portNative, "relaymesh://r2:7000", "relaymesh://r3:7000"); err != nil {
		return err
	}
	set(vNative, fmt.Sprintf("extra relayd on r1:%d --next relaymesh://r2:7000 --next relaymesh://r3:7000 (r2, r3: the lab's relayd, --relay-listen :7000)", portNative),
		fmt.Sprintf("-x socks5h://r1:%d", portNative))

	// relayd hop by hop: every relay's next is only the next relay.
	if err := b.startRelayd("r2", portHopByHop, "socks5://r3:1080"); err != nil {
		return err
	}
	if err := b.startRelayd("r1", portHopByHop, fmt.Sprintf("socks5://r2:%d", portHopByHop)); err != nil {
		return err
	}
	set(vHopByHop, fmt.Sprintf("extra relayd r1:%d --next socks5://r2:%d; extra relayd r2:%d --next socks5://r3:1080; r3:1080 the lab's relayd (no next)", portHopByHop, portHopByHop, portHopByHop),
		fmt.Sprintf("-x socks5h://r1:%d", portHopByHop))

	// relayd nested SOCKS5 from the entry.
	if err := b.startRelayd("r1", portNested, "socks5://r2:1080", "socks5://r3:1080"); err != nil {
		return err
	}
	set(vNested, fmt.Sprintf("extra relayd on r1:%d --next socks5://r2:1080 --next socks5://r3:1080 (r2, r3: the lab's relayd, no next)", portNested),
		fmt.Sprintf("-x socks5h://r1:%d", portNested))

	// dante and squid, chained hop by hop, last hop first.
	proxyUID, proxyGID := -1, -1
	if u, err := user.Lookup("proxy"); err == nil {
		proxyUID, _ = strconv.Atoi(u.Uid)
		proxyGID, _ = strconv.Atoi(u.Gid)
	}
	squid, err := exec.LookPath("squid")
	if err != nil {
		squid = "/usr/sbin/squid"
	}
	chain := []string{"r1", "r2", "r3"}
	for i := len(chain) - 1; i >= 0; i-- {
		r := chain[i]
		n := b.node(r)
		nextAddr := ""
		if i+1 < len(chain) {
			nextAddr = b.node(chain[i+1]).Addr
		}
		conf := filepath.Join(dir, r+".dante.conf")
		if err := os.WriteFile(conf, []byte(labpeer.DanteConfig(filepath.Join(dir, r+".dante.log"), n.Addr, nextAddr, portDante)), 0o644); err != nil {
			return err
		}
		if err := b.startDaemon("dante", r, portDante, filepath.Join(dir, r+".dante.out"), -1, -1,
			"/usr/sbin/danted", "-f", conf, "-p", filepath.Join(dir, r+".dante.pid")); err != nil {
			return err
		}
		conf = filepath.Join(dir, r+".squid.conf")
		if err := os.WriteFile(conf, []byte(labpeer.SquidConfig(dir, r, n.Addr, nextAddr, portSquid)), 0o644); err != nil {
			return err
		}
		if err := b.startDaemon("squid", r, portSquid, filepath.Join(dir, r+".squid.log"), proxyUID, proxyGID,
			squid, "-N", "-n", labpeer.SquidService(b.name, r), "-f", conf); err != nil {
			return err
		}
	}
	set(vDante, fmt.Sprintf("dante (sockd) on r1, r2, r3 port %d; r1 and r2 route every CONNECT via the next relay's sockd (socks_v5)", portDante),
		fmt.Sprintf("-x socks5h://<r1 addr>:%d", portDante))
	set(vSquid, fmt.Sprintf("squid on r1, r2, r3 port %d; r1 and r2: cache_peer <next> parent, never_direct allow all, cache deny all", portSquid),
		fmt.Sprintf("-p -x http://r1:%d", portSquid))

	deadline := time.Now().Add(readyTimeout)
	for _, d := range b.daemons {
		if err := d.WaitListening(ctx, deadline, b.state.Dir); err != nil {
			return err
		}
	}
	return nil
}

// startDaemon starts a process on node and tracks it for stopDaemons.
func (b *bench) startDaemon(what, node string, port int, logPath string, uid, gid int, argv ...string) error {
	d, err := labpeer.StartDaemon(b.node(node), what, port, logPath, uid, gid, argv...)
	if err != nil {
		return err
	}
	b.daemons = append(b.daemons, d)
	logf("started %s on %s:%d (pid %d), output in %s", what, node, port, d.Cmd.Process.Pid, logPath)
	return nil
}

func (b *bench) stopDaemons() {
	labpeer.StopAll(b.daemons, stopTimeout, logf)
	b.daemons = nil
}

// killStrays kills process groups left by an earlier run of this driver for
// this lab: dante/squid (config in the lab's state directory) and extra
// relayd (the lab's fleet secret on the command line, no --config).
func killStrays(c *config, labName string) {
	dir := filepath.Join(c.stateRoot, labName) + "/"
	labpeer.KillStrays(func(cmdline string) bool {
		return strings.Contains(cmdline, dir) &&
			(strings.Contains(cmdline, ".dante.conf") || strings.Contains(cmdline, ".squid.conf") ||
				(strings.Contains(cmdline, "relayd run --name") && strings.Contains(cmdline, "--fleet-secret-file "+dir+"fleet-secret")))
	}, logf)
}

// curlArgs is the proxy part of curl's argv for v.
func (b *bench) curlArgs(v string) []string {
	switch v {
	case vDirect:
		return nil
	case vNative:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portNative)}
	case vHopByHop:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portHopByHop)}
	case vNested:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portNested)}
	case vDante:
		return []string{"-x", fmt.Sprintf("socks5h://%s:%d", b.node("r1").Addr, portDante)}
	case vSquid:
		return []string{"-p", "-x", fmt.Sprintf("http://r1:%d", portSquid)}
	}
	panic("unknown variant " + v)
}

type curlResult struct {
	nameLookup, connect, pre, start, total float64 // seconds
	size                                   int64
	code                                   int
	err                                    error
}

func (b *bench) curl(ctx context.Context, v string) curlResult {
	url := fmt.Sprintf("http://server:%d/bytes/1", lab.TrafficPort)
	args := []string{"lab", "--state-dir", b.c.stateRoot, "exec", "--lab", b.name, "client", "--",
		"curl", "-sS", "-o", "/dev/null", "--max-time", strconv.Itoa(b.c.maxTime),
		"-w", `%{time_namelookup} %{time_connect} %{time_pretransfer} %{time_starttransfer} %{time_total} %{size_download} %{http_code}\n`}
	args = append(append(args, b.curlArgs(v)...), url)
	cctx, cancel := context.WithTimeout(ctx, time.Duration(b.c.maxTime+30)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, b.c.relayctl, args...)
	labpeer.SetGroup(cmd)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var r curlResult
	f := strings.Fields(out.String())
	if len(f) == 7 {
		r.nameLookup, _ = strconv.ParseFloat(f[0], 64)
		r.connect, _ = strconv.ParseFloat(f[1], 64)
		r.pre, _ = strconv.ParseFloat(f[2], 64)
		r.start, _ = strconv.ParseFloat(f[3], 64)
		r.total, _ = strconv.ParseFloat(f[4], 64)
		r.size, _ = strconv.ParseInt(f[5], 10, 64)
		r.code, _ = strconv.Atoi(f[6])
	}
	msg := strings.TrimSpace(errb.String())
	switch {
	case runErr != nil:
		r.err = fmt.Errorf("curl: %v: %s", runErr, msg)
	case r.code != 200:
		r.err = fmt.Errorf("http_code %d (%s)", r.code, msg)
	case r.size != 1:
		r.err = fmt.Errorf("size_download %d, want 1 (%s)", r.size, msg)
	case r.total <= 0:
		r.err = fmt.Errorf("unparsable curl output %q", out.String())
	}
	return r
}

func (b *bench) flushMetrics(ctx context.Context) {
	for _, n := range b.state.Nodes {
		_ = exec.CommandContext(ctx, "ip", "-n", n.Netns, "tcp_metrics", "flush", "all").Run()
	}
}

func (b *bench) measure(ctx context.Context, v string, round, order int) Sample {
	s := Sample{Round: round, Order: order}
	for attempt := 1; attempt <= 2; attempt++ {
		b.flushMetrics(ctx)
		s.Attempts = attempt
		r := b.curl(ctx, v)
		if r.err == nil {
			s.OK, s.Error = true, ""
			s.TotalMs, s.Connect, s.PreXfer, s.StartMs = r.total*1e3, r.connect*1e3, r.pre*1e3, r.start*1e3
			return s
		}
		if ctx.Err() != nil {
			s.Error = "interrupted"
			return s
		}
		if attempt == 1 {
			s.FirstErr = r.err.Error()
			logf("%s round %d: %v: retrying once", v, round+1, r.err)
			time.Sleep(time.Second)
		} else {
			s.Error = r.err.Error()
		}
	}
	return s
}

// warmup: every chain answers once within readyTimeout, then
// c.warmup-1 more unrecorded requests.
func (b *bench) warmup(ctx context.Context) error {
	for _, v := range allVariants {
		deadline := time.Now().Add(readyTimeout)
		for {
			r := b.curl(ctx, v)
			if r.err == nil {
				logf("ready: %s (%.1f ms)", v, r.total*1e3)
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			b.res.Warmup = append(b.res.Warmup, fmt.Sprintf("%s ready check: %v", v, r.err))
			if time.Now().After(deadline) {
				return fmt.Errorf("%s chain does not answer after %v: %v", v, readyTimeout, r.err)
			}
			time.Sleep(time.Second)
		}
		for i := 1; i < b.c.warmup; i++ {
			if r := b.curl(ctx, v); r.err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				b.res.Warmup = append(b.res.Warmup, fmt.Sprintf("%s warm-up %d: %v", v, i+1, r.err))
			}
		}
	}
	return nil
}

func (b *bench) readStatus() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := b.relayctl(ctx, "lab", "--state-dir", b.c.stateRoot, "status", b.name, "-o", "json")
	if err != nil {
		b.res.Problems = append(b.res.Problems, fmt.Sprintf("lab status: %v: %s", err, strings.TrimSpace(out)))
		return
	}
	var st lab.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		b.res.Problems = append(b.res.Problems, fmt.Sprintf("lab status: %v", err))
		return
	}
	v := st.Valid
	b.res.Valid = &v
	b.res.Problems = append(b.res.Problems, st.Problems...)
	logf("lab self-check valid=%v %v", v, st.Problems)
}

// quantile is the nearest-rank q-quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func summarize(res *Results) {
	var direct float64
	for _, vr := range res.Variants {
		var tot, pre []float64
		vr.OK, vr.Failed = 0, 0
		for _, s := range vr.Samples {
			if s.OK {
				tot = append(tot, s.TotalMs)
				pre = append(pre, s.PreXfer)
				vr.OK++
			} else {
				vr.Failed++
			}
		}
		sort.Float64s(tot)
		sort.Float64s(pre)
		vr.MedianMs, vr.P90Ms, vr.MedianPre = median(tot), quantile(tot, 0.9), median(pre)
		if len(tot) > 0 {
			vr.MinMs, vr.MaxMs = tot[0], tot[len(tot)-1]
			vr.ExcessMs = vr.MedianMs - vr.Expected.Ms
		}
		if vr.Name == vDirect {
			direct = vr.MedianMs
		}
	}
	for _, vr := range res.Variants {
		vr.Ratio = 0
		if direct > 0 && vr.MedianMs > 0 {
			vr.Ratio = vr.MedianMs / direct
		}
	}
}

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
	return v
}
