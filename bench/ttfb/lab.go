package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/linktls"
)

// tputMaxTimeS bounds one throughput download, seconds: direct moves
// ~25 Mbit/s in this topology (a 32 MiB download takes ~11 s).
const tputMaxTimeS = 120

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
	if c.tputSize > 0 && ctx.Err() == nil {
		// The self-check so far covers the TTFB rounds; the one read at
		// the end covers the downloads too.
		b.readStatus()
		res.TTFBValid, res.Valid, res.Problems = res.Valid, nil, nil
		b.throughput(ctx)
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
	return labpeer.Relayctl(ctx, b.c.relayctl, args...)
}

func (b *bench) relayd() string { return filepath.Join(filepath.Dir(b.c.relayctl), "relayd") }

// startRelayd starts an extra relayd on node with SOCKS5 at port and any
// extra flags (--next, --relay-listen, --pool-max-idle). It listens on the
// node's lab address, open and allowing private destinations, like the
// lab's own relayd.
func (b *bench) startRelayd(node string, port int, extra ...string) error {
	n := b.node(node)
	relayd, err := filepath.Abs(b.relayd())
	if err != nil {
		return err
	}
	argv := []string{relayd, "run", "--name", relaydName(node, port),
		"--socks", fmt.Sprintf("%s:%d", n.Addr, port), "--http", "", "--admin", "",
		"--open", "--allow-private", "--log-format", "json"}
	if !slices.Contains(extra, "--identity-cert") {
		argv = append(argv, "--fleet-secret-file", filepath.Join(b.state.Dir, "fleet-secret"))
	}
	argv = append(argv, extra...)
	return b.startDaemon("relayd", node, port, filepath.Join(b.state.Dir, fmt.Sprintf("%s.relayd-%d.log", node, port)), -1, -1, argv...)
}

// relaydName is the name of the extra relayd on node whose SOCKS5 port is
// port (and, on identities, the name its certificate carries).
func relaydName(node string, port int) string { return fmt.Sprintf("%s-%d", node, port) }

// startNativeIdentity is startNative with pools on and every relay on its
// own identity from an operator CA made in the lab's state directory: the
// entry names the relays it expects at r2 and r3.
func (b *bench) startNativeIdentity(socksPort, relayPort int) error {
	dir := filepath.Join(b.state.Dir, "identities")
	ca, err := linktls.NewCA("ttfb bench CA", 24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, ca.CertPEM(), 0o644); err != nil {
		return err
	}
	identity := func(node string) ([]string, error) {
		f, err := ca.WriteIdentity(dir, caPath, relaydName(node, socksPort), linktls.RoleRelay, 24*time.Hour)
		return f.Flags(), err
	}
	for _, r := range []string{"r3", "r2"} {
		id, err := identity(r)
		if err != nil {
			return err
		}
		listen := fmt.Sprintf("%s:%d", b.node(r).Addr, relayPort)
		if err := b.startRelayd(r, socksPort, append([]string{"--relay-listen", listen, "--pool-max-idle", "4"}, id...)...); err != nil {
			return err
		}
	}
	id, err := identity("r1")
	if err != nil {
		return err
	}
	return b.startRelayd("r1", socksPort, append([]string{"--pool-max-idle", "4",
		"--next", fmt.Sprintf("relaymesh://r2:%d?name=%s", relayPort, relaydName("r2", socksPort)),
		"--next", fmt.Sprintf("relaymesh://r3:%d?name=%s", relayPort, relaydName("r3", socksPort))}, id...)...)
}

// startNative starts a native chain r1 -> r2 -> r3 of extra relayd: the
// entry on r1 (SOCKS5 at socksPort) names r2 and r3 in one header; r2 and
// r3 serve the native protocol on relayPort. pool is --pool-max-idle;
// extra goes to every relayd (e.g. --transport tls).
func (b *bench) startNative(socksPort, relayPort, pool int, extra ...string) error {
	poolArg := append([]string{"--pool-max-idle", strconv.Itoa(pool)}, extra...)
	for _, r := range []string{"r3", "r2"} {
		// Their SOCKS5 port is unused; the relay listener is what counts.
		listen := fmt.Sprintf("%s:%d", b.node(r).Addr, relayPort)
		if err := b.startRelayd(r, socksPort, append([]string{"--relay-listen", listen}, poolArg...)...); err != nil {
			return err
		}
	}
	return b.startRelayd("r1", socksPort, append([]string{
		"--next", fmt.Sprintf("relaymesh://r2:%d", relayPort), "--next", fmt.Sprintf("relaymesh://r3:%d", relayPort)}, poolArg...)...)
}

// startChains sets up every variant's chain on the relay nodes.
func (b *bench) startChains(ctx context.Context) error {
	dir := b.state.Dir
	set := func(v, setup, curl string) { b.byName[v].Setup, b.byName[v].Curl = setup, curl }
	set(vDirect, "no proxy", "")

	// relayd native, warm and cold: the entry sends one header naming r2
	// and r3. Own relay listeners per variant, so the cold chain's relays
	// never hold a warm connection from the warm one.
	if err := b.startNative(portNativeWarm, relayPortWarm, 4, "--transport", "plain"); err != nil {
		return err
	}
	set(vNativeWarm, fmt.Sprintf("extra relayd on r1:%d --next relaymesh://r2:%d --next relaymesh://r3:%d; r2, r3: extra relayd --relay-listen :%d; warm pools on (default --pool-max-idle 4); --transport plain",
		portNativeWarm, relayPortWarm, relayPortWarm, relayPortWarm), fmt.Sprintf("-x socks5h://r1:%d", portNativeWarm))
	if err := b.startNative(portTLSWarm, relayPortTLS, 4, "--transport", "tls"); err != nil {
		return err
	}
	set(vTLSWarm, fmt.Sprintf("as relayd-native-warm, on r1:%d and relay listeners :%d, every relay with --transport tls (TLS 1.3 links)",
		portTLSWarm, relayPortTLS), fmt.Sprintf("-x socks5h://r1:%d", portTLSWarm))
	if err := b.startNativeIdentity(portIDWarm, relayPortID); err != nil {
		return err
	}
	set(vIDWarm, fmt.Sprintf("as relayd-tls-warm, on r1:%d and relay listeners :%d, every relay on its own certificate from an operator CA (identity), hops named",
		portIDWarm, relayPortID), fmt.Sprintf("-x socks5h://r1:%d", portIDWarm))
	// An entry on the client's own host, as relayctl connect runs: r1, r2
	// and r3 are relay listeners (TLS), the entry names all three in one
	// header. The optimistic one answers "succeeded" before the chain is up.
	if err := b.startRelayd("r1", portLocal, "--relay-listen", fmt.Sprintf("%s:%d", b.node("r1").Addr, relayPortR1TLS), "--transport", "tls"); err != nil {
		return err
	}
	for _, e := range []struct {
		v     string
		port  int
		extra []string
	}{{vLocal, portLocal, nil}, {vOptimistic, portOptimistic, []string{"--optimistic-data"}}} {
		args := append([]string{"--transport", "tls", "--next", fmt.Sprintf("relaymesh://r1:%d", relayPortR1TLS),
			"--next", fmt.Sprintf("relaymesh://r2:%d", relayPortTLS), "--next", fmt.Sprintf("relaymesh://r3:%d", relayPortTLS)}, e.extra...)
		if err := b.startRelayd("client", e.port, args...); err != nil {
			return err
		}
		set(e.v, fmt.Sprintf("extra relayd on the client node :%d --transport tls --next relaymesh://r1:%d --next relaymesh://r2:%d --next relaymesh://r3:%d %s(r1: extra relayd --relay-listen :%d; r2, r3: relayd-tls-warm's)",
			e.port, relayPortR1TLS, relayPortTLS, relayPortTLS, strings.Join(append(e.extra, ""), " "), relayPortR1TLS), fmt.Sprintf("-x socks5h://client:%d", e.port))
	}
	if err := b.startNative(portNativeCold, relayPortCold, 0, "--transport", "plain"); err != nil {
		return err
	}
	set(vNativeCold, fmt.Sprintf("as warm, on r1:%d and relay listeners :%d, every relay with --pool-max-idle 0",
		portNativeCold, relayPortCold), fmt.Sprintf("-x socks5h://r1:%d", portNativeCold))

	// relayd hop by hop: every relay's next is only the next relay.
	if err := b.startRelayd("r2", portHopByHop, "--next", "socks5://r3:1080"); err != nil {
		return err
	}
	if err := b.startRelayd("r1", portHopByHop, "--next", fmt.Sprintf("socks5://r2:%d", portHopByHop)); err != nil {
		return err
	}
	set(vHopByHop, fmt.Sprintf("extra relayd r1:%d --next socks5://r2:%d; extra relayd r2:%d --next socks5://r3:1080; r3:1080 the lab's relayd (no next)", portHopByHop, portHopByHop, portHopByHop),
		fmt.Sprintf("-x socks5h://r1:%d", portHopByHop))

	// relayd nested SOCKS5 from the entry.
	if err := b.startRelayd("r1", portNested, "--next", "socks5://r2:1080", "--next", "socks5://r3:1080"); err != nil {
		return err
	}
	set(vNested, fmt.Sprintf("extra relayd on r1:%d --next socks5://r2:1080 --next socks5://r3:1080 (r2, r3: the lab's relayd, no next)", portNested),
		fmt.Sprintf("-x socks5h://r1:%d", portNested))

	// glider: plain SOCKS5 servers on r2 and r3, a forward chain on r1.
	glider, err := filepath.Abs(b.c.glider)
	if err != nil {
		return err
	}
	for _, r := range []string{"r3", "r2"} {
		if err := b.startDaemon("glider", r, portGlider, filepath.Join(dir, r+".glider.log"), -1, -1,
			glider, "-listen", fmt.Sprintf("socks5://%s:%d", b.node(r).Addr, portGlider)); err != nil {
			return err
		}
	}
	if err := b.startDaemon("glider", "r1", portGlider, filepath.Join(dir, "r1.glider.log"), -1, -1,
		glider, "-listen", fmt.Sprintf("socks5://%s:%d", b.node("r1").Addr, portGlider),
		"-forward", fmt.Sprintf("socks5://%s:%d,socks5://%s:%d", b.node("r2").Addr, portGlider, b.node("r3").Addr, portGlider)); err != nil {
		return err
	}
	set(vGlider, fmt.Sprintf("glider on r1:%d -forward socks5://r2:%d,socks5://r3:%d (a forwarder chain: r1 nests SOCKS5 through r2 to r3); r2, r3: glider -listen socks5://:%d",
		portGlider, portGlider, portGlider, portGlider), fmt.Sprintf("-x socks5h://r1:%d", portGlider))

	// The client's own nested chain through three plain dantes.
	if err := os.WriteFile(b.proxychainsConf(), []byte(b.proxychainsConfig()), 0o644); err != nil {
		return err
	}
	for _, r := range []string{"r1", "r2", "r3"} {
		conf := filepath.Join(dir, r+".dante-plain.conf")
		if err := os.WriteFile(conf, []byte(labpeer.DanteConfig(filepath.Join(dir, r+".dante-plain.log"), b.node(r).Addr, "", portDantePlain)), 0o644); err != nil {
			return err
		}
		if err := b.startDaemon("dante", r, portDantePlain, filepath.Join(dir, r+".dante-plain.out"), -1, -1,
			"/usr/sbin/danted", "-f", conf, "-p", filepath.Join(dir, r+".dante-plain.pid")); err != nil {
			return err
		}
	}
	set(vDanteNested, fmt.Sprintf("plain dante (no route) on r1, r2, r3 port %d; the client runs curl under proxychains4 (strict_chain r1, r2, r3), which nests the SOCKS5 handshakes", portDantePlain),
		"(no -x; proxychains4 -q -f <conf> curl http://<server addr>:8000/...)")
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
				(strings.Contains(cmdline, "relayd run --name") && (strings.Contains(cmdline, "--fleet-secret-file "+dir+"fleet-secret") ||
					strings.Contains(cmdline, "--identity-cert "+dir+"identities/"))))
	}, logf)
}

// curlArgs is the proxy part of curl's argv for v.
func (b *bench) curlArgs(v string) []string {
	switch v {
	case vDirect:
		return nil
	case vNativeWarm:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portNativeWarm)}
	case vNativeCold:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portNativeCold)}
	case vTLSWarm:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portTLSWarm)}
	case vIDWarm:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portIDWarm)}
	case vLocal:
		return []string{"-x", fmt.Sprintf("socks5h://client:%d", portLocal)}
	case vOptimistic:
		return []string{"-x", fmt.Sprintf("socks5h://client:%d", portOptimistic)}
	case vGlider:
		return []string{"-x", fmt.Sprintf("socks5h://r1:%d", portGlider)}
	case vDanteNested:
		return nil // proxychains4 wraps curl (curlArgv)
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

func (b *bench) proxychainsConf() string { return filepath.Join(b.state.Dir, "proxychains.conf") }

// proxychainsConfig: addresses, not names (proxychains4 reads no
// /etc/hosts for its proxy list), no remote DNS (the URL has an address).
func (b *bench) proxychainsConfig() string {
	var s strings.Builder
	s.WriteString("# Written by bench/ttfb.\nstrict_chain\nquiet_mode\ntcp_read_time_out 15000\ntcp_connect_time_out 8000\n[ProxyList]\n")
	for _, r := range []string{"r1", "r2", "r3"} {
		fmt.Fprintf(&s, "socks5 %s %d\n", b.node(r).Addr, portDantePlain)
	}
	return s.String()
}

// curlArgv is the command run on the client node for v fetching path.
func (b *bench) curlArgv(v, path, format string) []string {
	host := "server"
	var argv []string
	if v == vDanteNested {
		host = b.node("server").Addr
		argv = []string{"proxychains4", "-q", "-f", b.proxychainsConf()}
	}
	maxTime := b.c.maxTime
	if path != "/bytes/1" {
		maxTime = tputMaxTimeS
	}
	argv = append(argv, "curl", "-sS", "-o", "/dev/null", "--max-time", strconv.Itoa(maxTime), "-w", format)
	argv = append(argv, b.curlArgs(v)...)
	return append(argv, fmt.Sprintf("http://%s:%d%s", host, lab.TrafficPort, path))
}

func (b *bench) curl(ctx context.Context, v string) curlResult {
	args := []string{"lab", "--state-dir", b.c.stateRoot, "exec", "--lab", b.name, "client", "--"}
	args = append(args, b.curlArgv(v, "/bytes/1",
		`%{time_namelookup} %{time_connect} %{time_pretransfer} %{time_starttransfer} %{time_total} %{size_download} %{http_code}\n`)...)
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

func (b *bench) measure(ctx context.Context, v string, round, order int) Sample {
	s := Sample{Round: round, Order: order}
	for attempt := 1; attempt <= 2; attempt++ {
		labpeer.FlushTCPMetrics(ctx, b.state)
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
	valid, problems := labpeer.LabStatus(ctx, b.c.relayctl, b.c.stateRoot, b.name)
	b.res.Problems = append(b.res.Problems, problems...)
	if valid == nil {
		return
	}
	b.res.Valid = valid
	logf("lab self-check valid=%v %v", *valid, problems)
}

// quantile is the nearest-rank q-quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
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
		vr.MedianMs, vr.P90Ms, vr.MedianPre = labpeer.Median(tot), quantile(tot, 0.9), labpeer.Median(pre)
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
	var directTput float64
	for _, tr := range res.Throughput {
		xs := append([]float64(nil), tr.MbitPerS...)
		sort.Float64s(xs)
		tr.Median = labpeer.Median(xs)
		if tr.Name == vDirect {
			directTput = tr.Median
		}
	}
	for _, tr := range res.Throughput {
		if directTput > 0 {
			tr.Ratio = tr.Median / directTput
		}
	}
}

func versions(c *config) map[string]string {
	v := map[string]string{}
	for _, pkg := range []string{"dante-server", "squid", "curl", "proxychains4"} {
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
	if bi, err := buildinfo.ReadFile(c.glider); err == nil {
		v["glider"] = bi.Main.Path + " " + bi.Main.Version
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		v["git_head"] = strings.TrimSpace(string(out))
	}
	return v
}

// throughput downloads c.tputSize bytes per variant per round (order
// rotated) and records curl's %{speed_download}.
func (b *bench) throughput(ctx context.Context) {
	b.res.TputSize = b.c.tputSize
	byName := map[string]*TputResult{}
	for _, v := range tputVariants {
		tr := &TputResult{Name: v}
		b.res.Throughput = append(b.res.Throughput, tr)
		byName[v] = tr
	}
	path := fmt.Sprintf("/bytes/%d", b.c.tputSize)
	for round := 0; round < b.c.tputRuns && ctx.Err() == nil; round++ {
		for i := range tputVariants {
			v := tputVariants[(i+round)%len(tputVariants)]
			args := []string{"lab", "--state-dir", b.c.stateRoot, "exec", "--lab", b.name, "client", "--"}
			args = append(args, b.curlArgv(v, path, `%{speed_download} %{size_download} %{http_code}\n`)...)
			cctx, cancel := context.WithTimeout(ctx, time.Duration(tputMaxTimeS+30)*time.Second)
			out, err := exec.CommandContext(cctx, b.c.relayctl, args...).Output()
			cancel()
			f := strings.Fields(string(out))
			ok := err == nil && len(f) == 3 && f[2] == "200" && f[1] == strconv.FormatInt(b.c.tputSize, 10)
			if !ok {
				byName[v].Failed++
				logf("throughput %s round %d FAILED: %v %q", v, round+1, err, out)
				continue
			}
			bps, _ := strconv.ParseFloat(f[0], 64)
			byName[v].MbitPerS = append(byName[v].MbitPerS, bps*8/1e6)
			logf("throughput %s round %d: %.1f Mbit/s", v, round+1, bps*8/1e6)
		}
	}
}
