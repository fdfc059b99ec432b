// Command relaybench measures single-stream loopback throughput and relay CPU
// cost through chains of SOCKS5 / HTTP CONNECT relays.
//
// For every relay kind, hop count and direction it starts the relay processes
// on loopback ephemeral ports (last hop first, each pointing at the next),
// connects through the chain to an in-process source/sink server, moves
// -size bytes over one TCP connection and records wall time and the CPU time
// (utime+stime, including reaped children) of all relay processes. Runs are
// interleaved round-robin across kinds and the table reports medians.
//
// Only loopback addresses are ever used.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

const (
	gibBytes       = 1 << 30
	patternBytes   = 1 << 20 // cyclic payload pattern
	ioBufBytes     = 1 << 20 // read buffer of the client and the sink
	probeBytes     = 1 << 20 // verified warm-up transfer per direction
	probeAttempts  = 6
	startTimeout   = 15 * time.Second
	handshakeLimit = 10 * time.Second
	floorKind      = "copyrelay" // the io.Copy relay all ratios refer to
)

// kindSpec describes one relay implementation.
type kindSpec struct {
	name    string
	front   string // "socks5", "http" or "none" (direct)
	maxHops int    // 0: direct only; -1: unlimited
	minHops int    // fewer hops are n/a (note says why)
	note    string // printed in the table, e.g. why hops are limited
	// binary returns the executable or a reason to skip the kind.
	binary func(c *config) (string, error)
	// args writes any config files into in.dir and returns the argv
	// (without argv[0]); it may set in.entryPort.
	args func(c *config, in *instance) ([]string, error)
}

// instance is one relay process of a chain.
type instance struct {
	idx       int // 0 = entry relay (client side)
	dir       string
	port      int   // port the previous hop (or the client) dials
	nextPort  int   // 0 = last hop, dials the target
	rest      []int // ports of every later hop, in order (native chains name them all)
	entryPort int   // port the client dials on the entry relay (defaults to port)
	alloc     func() int
}

type config struct {
	kinds      []string
	hops       []int
	dirs       []string
	sizeBytes  int64
	runs       int
	outDir     string
	name       string
	binDir     string
	paths      map[string]string // kind -> explicit binary path
	relaydSkip string
	verify     bool
	cmdline    string
	keep       bool
	timeout    time.Duration
	workDir    string
	clkTck     float64 // clock ticks per second of /proc/PID/stat
}

// result is one measured transfer (or a failure/skip placeholder).
type result struct {
	Kind             string  `json:"kind"`
	Front            string  `json:"front"`
	Hops             int     `json:"hops"`
	Direction        string  `json:"direction"`
	Run              int     `json:"run"`
	SizeBytes        int64   `json:"sizeBytes"`
	WallSeconds      float64 `json:"wallSeconds,omitempty"`
	RateBps          float64 `json:"rateBitsPerSecond,omitempty"`
	RelayCPUSeconds  float64 `json:"relayCpuSeconds,omitempty"`
	CPUSecondsPerGiB float64 `json:"relayCpuSecondsPerGiB,omitempty"`
	DriverCPUSeconds float64 `json:"driverCpuSeconds,omitempty"`
	RelayProcs       int     `json:"relayProcs,omitempty"`
	Status           string  `json:"status"` // ok, failed, skipped, n/a
	Reason           string  `json:"reason,omitempty"`
}

type summary struct {
	Kind             string  `json:"kind"`
	Front            string  `json:"front"`
	Hops             int     `json:"hops"`
	Direction        string  `json:"direction"`
	RunsOK           int     `json:"runsOk"`
	Runs             int     `json:"runs"`
	MedianRateBps    float64 `json:"medianRateBitsPerSecond,omitempty"`
	MinRateBps       float64 `json:"minRateBitsPerSecond,omitempty"`
	MaxRateBps       float64 `json:"maxRateBitsPerSecond,omitempty"`
	MedianCPUPerGiB  float64 `json:"medianRelayCpuSecondsPerGiB,omitempty"`
	RateRatioToFloor float64 `json:"rateRatioToCopyrelay,omitempty"`
	CPURatioToFloor  float64 `json:"cpuRatioToCopyrelay,omitempty"`
	Status           string  `json:"status"`
	Reason           string  `json:"reason,omitempty"`
}

var allKinds = []string{"direct", "copyrelay", "relayd", "relayd-http", "relayd-native", "relayd-tls", "glider", "glider-tls", "stunnel", "dante", "microsocks", "squid"}

func main() {
	c := parseFlags()
	installSignalHandler()
	code := run(c)
	killAll()
	os.Exit(code)
}

func parseFlags() *config {
	c := &config{paths: map[string]string{}}
	kinds := flag.String("kinds", strings.Join(allKinds, ","), "comma list of relay kinds: "+strings.Join(allKinds, ","))
	hops := flag.String("hops", "1,3", "comma list of hop counts")
	dirs := flag.String("dirs", "download,upload", "directions: download (server→client), upload (client→server)")
	size := flag.String("size", "2GiB", "bytes per transfer (suffixes KiB MiB GiB, KB MB GB)")
	flag.IntVar(&c.runs, "runs", 3, "repetitions per (kind, hops, direction); medians are reported")
	flag.StringVar(&c.outDir, "out", "bench/results", "directory for the markdown and JSON results")
	flag.StringVar(&c.name, "name", "relay-loopback", "base name of the result files")
	flag.StringVar(&c.binDir, "bin", "bench/.bin", "directory holding relayd, copyrelay and glider binaries")
	pathFlags := map[string]*string{}
	for _, k := range []string{"relayd", "copyrelay", "glider", "danted", "microsocks", "squid"} {
		pathFlags[k] = flag.String(k, "", "path of the "+k+" binary (default: -bin dir, $PATH, /usr/sbin)")
	}
	flag.StringVar(&c.relaydSkip, "relayd-skip", "", "skip relayd with this reason (e.g. build failed)")
	flag.BoolVar(&c.verify, "verify", false, "verify the payload pattern of every measured transfer (costs driver CPU)")
	flag.StringVar(&c.cmdline, "cmdline", "", "command line to record in the report (default: this process's argv)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory with relay configs and logs")
	flag.DurationVar(&c.timeout, "timeout", 0, "deadline per transfer (default 60s + 10 s/GiB)")
	flag.Parse()
	for k, p := range pathFlags {
		c.paths[k] = *p
	}

	var err error
	if c.sizeBytes, err = parseSize(*size); err != nil || c.sizeBytes <= 0 {
		fatalf("bad -size %q: %v", *size, err)
	}
	if c.runs < 1 {
		fatalf("-runs must be >= 1")
	}
	for _, k := range splitList(*kinds) {
		if !contains(allKinds, k) {
			fatalf("unknown kind %q (known: %s)", k, strings.Join(allKinds, ","))
		}
		c.kinds = append(c.kinds, k)
	}
	for _, h := range splitList(*hops) {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > 16 {
			fatalf("bad hop count %q", h)
		}
		c.hops = append(c.hops, n)
	}
	for _, d := range splitList(*dirs) {
		if d != "download" && d != "upload" {
			fatalf("bad direction %q", d)
		}
		c.dirs = append(c.dirs, d)
	}
	if c.timeout == 0 {
		c.timeout = 60*time.Second + time.Duration(float64(10*time.Second)*float64(c.sizeBytes)/gibBytes)
	}
	if c.cmdline == "" {
		c.cmdline = strings.Join(os.Args, " ")
	}
	c.clkTck = clockTicks()
	return c
}

// ---------------------------------------------------------------- kinds

func (c *config) lookup(name, binName string) (string, error) {
	if p := c.paths[name]; p != "" {
		return checkExec(p)
	}
	if p, err := checkExec(filepath.Join(c.binDir, binName)); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath(binName); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"} {
		if p, err := checkExec(filepath.Join(d, binName)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (looked in -%s, %s, $PATH)", binName, name, c.binDir)
}

func checkExec(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", p)
	}
	return filepath.Abs(p)
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

var specs = map[string]*kindSpec{
	"direct": {name: "direct", front: "none", maxHops: 0, note: "no relay: driver ceiling"},
	"copyrelay": {
		name: "copyrelay", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("copyrelay", "copyrelay") },
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"-listen", addr(in.port)}
			if in.nextPort != 0 {
				a = append(a, "-next", addr(in.nextPort))
			}
			return a, nil
		},
	},
	"relayd":        relaydSpec("relayd", false),
	"relayd-http":   relaydSpec("relayd-http", true),
	"relayd-native": relaydNativeSpec("relayd-native", "plain"),
	"relayd-tls":    relaydNativeSpec("relayd-tls", "tls"),
	"glider-tls": {
		name: "glider-tls", front: "socks5", maxHops: -1, note: "TLS between relays (self-signed, not verified)",
		binary: func(c *config) (string, error) { return c.lookup("glider", "glider") },
		args: func(c *config, in *instance) ([]string, error) {
			listen := "socks5://" + addr(in.port)
			if in.idx > 0 {
				cert, key, err := benchCert(c.workDir)
				if err != nil {
					return nil, err
				}
				listen = "tls://" + addr(in.port) + "?cert=" + cert + "&key=" + key + ",socks5://"
			}
			a := []string{"-listen", listen, "-check", "disable"}
			if in.nextPort != 0 {
				a = append(a, "-forward", "tls://"+addr(in.nextPort)+"?skipVerify=true,socks5://")
			}
			return a, nil
		},
	},
	"glider": {
		name: "glider", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("glider", "glider") },
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"-listen", "socks5://" + addr(in.port), "-check", "disable"}
			if in.nextPort != 0 {
				a = append(a, "-forward", "socks5://"+addr(in.nextPort))
			}
			return a, nil
		},
	},
	"stunnel": {
		// stunnel is a TLS tunnel, not a proxy: the entry takes the
		// client's bytes in clear and opens TLS to the next relay; a middle
		// relay ends that TLS and opens its own to the next (two services
		// joined over loopback); the exit ends TLS into microsocks, the
		// one SOCKS5 server of the chain, which dials the target.
		name: "stunnel", front: "socks5", maxHops: -1, minHops: 2,
		note: "TLS between relays (stunnel4, not verified); SOCKS5 by microsocks at the exit; needs 2+ hops",
		binary: func(c *config) (string, error) {
			if _, err := c.lookup("stunnel", "stunnel4"); err != nil {
				return "", err
			}
			if _, err := c.lookup("microsocks", "microsocks"); err != nil {
				return "", err
			}
			return "/bin/sh", nil
		},
		args: func(c *config, in *instance) ([]string, error) {
			stunnel, err := c.lookup("stunnel", "stunnel4")
			if err != nil {
				return nil, err
			}
			cert, key, err := benchCert(c.workDir)
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "foreground = yes\npid =\noutput = %s\ndebug = 4\n", filepath.Join(in.dir, "stunnel.log"))
			b.WriteString("socket = l:TCP_NODELAY=1\nsocket = r:TCP_NODELAY=1\n")
			inner := in.alloc() // the loopback port between a relay's two sides
			if in.idx == 0 {
				fmt.Fprintf(&b, "[out]\nclient = yes\naccept = %s\nconnect = %s\n", addr(in.port), addr(in.nextPort))
			} else {
				fmt.Fprintf(&b, "[in]\ncert = %s\nkey = %s\naccept = %s\nconnect = %s\n", cert, key, addr(in.port), addr(inner))
				if in.nextPort != 0 {
					fmt.Fprintf(&b, "[out]\nclient = yes\naccept = %s\nconnect = %s\n", addr(inner), addr(in.nextPort))
				}
			}
			conf := filepath.Join(in.dir, "stunnel.conf")
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			script := fmt.Sprintf("exec %s %s", stunnel, conf)
			if in.idx > 0 && in.nextPort == 0 {
				ms, err := c.lookup("microsocks", "microsocks")
				if err != nil {
					return nil, err
				}
				script = fmt.Sprintf("%s -i 127.0.0.1 -p %d & %s", ms, inner, script)
			}
			return []string{"-c", script}, nil
		},
	},
	"dante": {
		name: "dante", front: "socks5", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("danted", "danted") },
		args: func(c *config, in *instance) ([]string, error) {
			conf := filepath.Join(in.dir, "danted.conf")
			var b strings.Builder
			fmt.Fprintf(&b, "logoutput: %s\n", filepath.Join(in.dir, "danted.log"))
			fmt.Fprintf(&b, "internal: 127.0.0.1 port = %d\nexternal: 127.0.0.1\n", in.port)
			b.WriteString("clientmethod: none\nsocksmethod: none\n")
			b.WriteString("user.privileged: root\nuser.unprivileged: nobody\n")
			b.WriteString("client pass {\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}\n")
			b.WriteString("socks pass {\n  from: 0.0.0.0/0 to: 0.0.0.0/0\n  command: connect\n}\n")
			if in.nextPort != 0 {
				fmt.Fprintf(&b, "route {\n  from: 0.0.0.0/0 to: 0.0.0.0/0 via: 127.0.0.1 port = %d\n"+
					"  proxyprotocol: socks_v5\n  method: none\n}\n", in.nextPort)
			}
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			return []string{"-f", conf, "-p", filepath.Join(in.dir, "danted.pid"), "-N", "1"}, nil
		},
	},
	"microsocks": {
		name: "microsocks", front: "socks5", maxHops: 1, note: "cannot chain",
		binary: func(c *config) (string, error) { return c.lookup("microsocks", "microsocks") },
		args: func(c *config, in *instance) ([]string, error) {
			return []string{"-i", "127.0.0.1", "-p", strconv.Itoa(in.port)}, nil
		},
	},
	"squid": {
		name: "squid", front: "http", maxHops: -1,
		binary: func(c *config) (string, error) { return c.lookup("squid", "squid") },
		args: func(c *config, in *instance) ([]string, error) {
			// squid drops root privileges to "proxy": it needs a writable dir.
			if err := os.Chmod(in.dir, 0o777); err != nil {
				return nil, err
			}
			conf := filepath.Join(in.dir, "squid.conf")
			var b strings.Builder
			fmt.Fprintf(&b, "http_port 127.0.0.1:%d\n", in.port)
			fmt.Fprintf(&b, "pid_filename %s\ncache_log %s\ncoredump_dir %s\n",
				filepath.Join(in.dir, "squid.pid"), filepath.Join(in.dir, "cache.log"), in.dir)
			b.WriteString("access_log none\ncache_store_log none\ncache deny all\ncache_mem 8 MB\n")
			b.WriteString("netdb_filename none\npinger_enable off\nicp_port 0\nhtcp_port 0\n")
			b.WriteString("dns_nameservers 127.0.0.1\nvisible_hostname relaybench\n")
			b.WriteString("shutdown_lifetime 0 seconds\nvia off\nforwarded_for delete\n")
			b.WriteString("http_access allow all\n")
			if in.nextPort != 0 {
				fmt.Fprintf(&b, "cache_peer 127.0.0.1 parent %d 0 no-query no-digest no-netdb-exchange default name=next\n", in.nextPort)
				b.WriteString("never_direct allow all\n")
			}
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			return []string{"-N", "-f", conf}, nil
		},
	},
}

// relaydBinary is relayd's executable, unless -relayd-skip says why not.
func relaydBinary(c *config) (string, error) {
	if c.relaydSkip != "" {
		return "", errors.New(c.relaydSkip)
	}
	return c.lookup("relayd", "relayd")
}

func relaydSpec(name string, httpFront bool) *kindSpec {
	front := "socks5"
	if httpFront {
		front = "http"
	}
	return &kindSpec{
		name: name, front: front, maxHops: -1,
		binary: relaydBinary,
		args: func(c *config, in *instance) ([]string, error) {
			a := []string{"run", "--socks", addr(in.port), "--admin", addr(in.alloc()),
				"--allow-private", "--log-level", "warn"}
			if httpFront && in.idx == 0 {
				in.entryPort = in.alloc()
				a = append(a, "--http", addr(in.entryPort))
			} else {
				a = append(a, "--http", "") // the default 127.0.0.1:8080 would collide
			}
			if in.nextPort != 0 {
				a = append(a, "--next", "socks5://"+addr(in.nextPort))
			}
			return a, nil
		},
	}
}

// relaydNativeSpec: relayd chained with its native protocol over plain or
// TLS links. The entry serves SOCKS5 and names every later relay in one
// header; the others serve only their relay listener.
func relaydNativeSpec(name, transport string) *kindSpec {
	note := "native protocol, clear-text links"
	if transport == "tls" {
		note = "native protocol, TLS 1.3 links (fleet certificates)"
	}
	return &kindSpec{
		name: name, front: "socks5", maxHops: -1, note: note,
		binary: relaydBinary,
		args: func(c *config, in *instance) ([]string, error) {
			secret := filepath.Join(c.workDir, "fleet-secret")
			if _, err := os.Stat(secret); err != nil {
				if err := os.WriteFile(secret, []byte("relaybench-fleet-secret-0123456789"), 0o600); err != nil {
					return nil, err
				}
			}
			a := []string{"run", "--admin", addr(in.alloc()), "--http", "", "--allow-private", "--log-level", "warn",
				"--fleet-secret-file", secret, "--transport", transport}
			if in.idx == 0 {
				a = append(a, "--socks", addr(in.port))
				for _, p := range in.rest {
					a = append(a, "--next", "relaymesh://"+addr(p))
				}
			} else {
				a = append(a, "--socks", "", "--relay-listen", addr(in.port))
			}
			return a, nil
		},
	}
}

// benchCert writes (once) a self-signed ECDSA certificate and key for the
// peers' TLS listeners and returns their paths.
func benchCert(dir string) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, "bench-cert.pem"), filepath.Join(dir, "bench-key.pem")
	if _, err := os.Stat(keyPath); err == nil {
		return certPath, keyPath, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
}

// ---------------------------------------------------------------- processes

type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
	once    sync.Once
}

var (
	procsMu sync.Mutex
	live    = map[*proc]bool{}
)

func startProc(name, bin string, args []string, dir string) (*proc, error) {
	logPath := filepath.Join(dir, "output.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group (so forked workers are killed too); SIGKILL if the
	// driver dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	procsMu.Lock()
	defer procsMu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	live[p] = true
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop terminates the process group: SIGTERM, 3 s grace, then SIGKILL.
func (p *proc) stop() {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
		}
		syscall.Kill(-pgid, syscall.SIGKILL) // leftover workers, if any
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
		}
		procsMu.Lock()
		delete(live, p)
		procsMu.Unlock()
	})
}

func killAll() {
	procsMu.Lock()
	ps := make([]*proc, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	procsMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
}

var workDirToRemove string

func installSignalHandler() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		fmt.Fprintf(os.Stderr, "\nrelaybench: %v: stopping relays\n", s)
		killAll()
		if workDirToRemove != "" {
			os.RemoveAll(workDirToRemove)
		}
		os.Exit(130)
	}()
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	// Relay-specific logs next to output.log are useful too.
	for _, extra := range []string{"danted.log", "cache.log"} {
		if e, err := os.ReadFile(filepath.Join(filepath.Dir(p.logPath), extra)); err == nil {
			b = append(b, e...)
		}
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 4 {
		lines = lines[len(lines)-4:]
	}
	s := strings.Join(lines, " | ")
	if len(s) > 400 {
		s = s[len(s)-400:]
	}
	return s
}

// ---------------------------------------------------------------- ports

var (
	portsMu   sync.Mutex
	usedPorts = map[int]bool{}
)

// freePort returns a loopback port that the kernel just handed out and that
// this driver has not handed out before.
func freePort() int {
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fatalf("allocating a port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !usedPorts[port] {
			usedPorts[port] = true
			return port
		}
	}
}

// ---------------------------------------------------------------- chains

type chain struct {
	procs []*proc
	entry string // host:port the client dials
	front string
}

func (ch *chain) stop() {
	// Stop entry first so no new connections go down the chain.
	for _, p := range ch.procs {
		p.stop()
	}
}

func (ch *chain) pids() []int {
	var ps []int
	for _, p := range ch.procs {
		ps = append(ps, p.cmd.Process.Pid)
	}
	return ps
}

// startChain starts hops relays, last hop first, each pointing at the next.
func startChain(c *config, k *kindSpec, hops int, tag string) (*chain, error) {
	bin, err := k.binary(c)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ch, err, retry := tryStartChain(c, k, bin, hops, fmt.Sprintf("%s-a%d", tag, attempt))
		if err == nil {
			return ch, nil
		}
		lastErr = err
		if !retry {
			break
		}
	}
	return nil, lastErr
}

func tryStartChain(c *config, k *kindSpec, bin string, hops int, tag string) (*chain, error, bool) {
	ports := make([]int, hops)
	for i := range ports {
		ports[i] = freePort()
	}
	ch := &chain{front: k.front, procs: make([]*proc, hops)}
	for i := hops - 1; i >= 0; i-- {
		in := &instance{idx: i, port: ports[i], alloc: freePort}
		if i+1 < hops {
			in.nextPort = ports[i+1]
			in.rest = ports[i+1:]
		}
		in.dir = filepath.Join(c.workDir, fmt.Sprintf("%s-%s-h%d-r%d", tag, k.name, hops, i))
		if err := os.MkdirAll(in.dir, 0o755); err != nil {
			return nil, err, false
		}
		args, err := k.args(c, in)
		if err != nil {
			ch.stopStarted()
			return nil, err, false
		}
		if in.entryPort == 0 {
			in.entryPort = in.port
		}
		p, err := startProc(fmt.Sprintf("%s[%d]", k.name, i), bin, args, in.dir)
		if err != nil {
			ch.stopStarted()
			return nil, fmt.Errorf("start %s: %v", k.name, err), false
		}
		ch.procs[i] = p
		for _, port := range uniqueInts(in.port, in.entryPort) {
			if err := waitListening(p, port); err != nil {
				tail := p.logTail()
				ch.stopStarted()
				inUse := strings.Contains(strings.ToLower(tail), "address already in use")
				return nil, fmt.Errorf("relay %d of %d (%s %s): %v; log: %s",
					i+1, hops, filepath.Base(bin), strings.Join(args, " "), err, tail), inUse
			}
		}
		if i == 0 {
			ch.entry = addr(in.entryPort)
		}
	}
	return ch, nil, false
}

func (ch *chain) stopStarted() {
	for _, p := range ch.procs {
		if p != nil {
			p.stop()
		}
	}
}

func waitListening(p *proc, port int) error {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("exited before listening on %d: %v", port, p.waitErr)
		default:
		}
		cn, err := net.DialTimeout("tcp", addr(port), 200*time.Millisecond)
		if err == nil {
			cn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening on %d after %v", port, startTimeout)
}

func uniqueInts(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

// ---------------------------------------------------------------- clients

// dialSOCKS5 performs a no-auth SOCKS5 CONNECT to target through proxy and
// returns the raw connection.
func dialSOCKS5(proxy string, target *net.TCPAddr) (*net.TCPConn, error) {
	cn, err := net.DialTimeout("tcp", proxy, handshakeLimit)
	if err != nil {
		return nil, err
	}
	c := cn.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(handshakeLimit))
	fail := func(err error) (*net.TCPConn, error) { c.Close(); return nil, err }
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return fail(err)
	}
	var b [262]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return fail(fmt.Errorf("socks5 greeting: %w", err))
	}
	if b[0] != 5 || b[1] != 0 {
		return fail(fmt.Errorf("socks5 greeting reply % x", b[:2]))
	}
	ip4 := target.IP.To4()
	req := append([]byte{5, 1, 0, 1}, ip4...)
	req = binary.BigEndian.AppendUint16(req, uint16(target.Port))
	if _, err := c.Write(req); err != nil {
		return fail(err)
	}
	if _, err := io.ReadFull(c, b[:5]); err != nil {
		return fail(fmt.Errorf("socks5 connect reply: %w", err))
	}
	if b[0] != 5 || b[1] != 0 {
		return fail(fmt.Errorf("socks5 connect refused, REP=%d", b[1]))
	}
	var rest int
	switch b[3] {
	case 1:
		rest = 3 + 2
	case 3:
		rest = int(b[4]) + 2
	case 4:
		rest = 15 + 2
	default:
		return fail(fmt.Errorf("socks5 reply ATYP %d", b[3]))
	}
	if _, err := io.ReadFull(c, b[5:5+rest]); err != nil {
		return fail(fmt.Errorf("socks5 connect reply: %w", err))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// dialHTTPConnect opens a tunnel with HTTP CONNECT, reading the response
// byte by byte so no payload is buffered away from the raw connection.
func dialHTTPConnect(proxy string, target *net.TCPAddr) (*net.TCPConn, error) {
	cn, err := net.DialTimeout("tcp", proxy, handshakeLimit)
	if err != nil {
		return nil, err
	}
	c := cn.(*net.TCPConn)
	c.SetDeadline(time.Now().Add(handshakeLimit))
	fail := func(err error) (*net.TCPConn, error) { c.Close(); return nil, err }
	t := target.String()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", t, t); err != nil {
		return fail(err)
	}
	var resp []byte
	var one [1]byte
	for !bytes.HasSuffix(resp, []byte("\r\n\r\n")) {
		if len(resp) > 16<<10 {
			return fail(errors.New("http connect: response header too long"))
		}
		if _, err := io.ReadFull(c, one[:]); err != nil {
			return fail(fmt.Errorf("http connect response: %w (got %q)", err, resp))
		}
		resp = append(resp, one[0])
	}
	status := strings.SplitN(string(resp), "\r\n", 2)[0]
	f := strings.Fields(status)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || f[1] != "200" {
		return fail(fmt.Errorf("http connect: %q", status))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func dialThrough(front, entry string, target *net.TCPAddr) (*net.TCPConn, error) {
	switch front {
	case "socks5":
		return dialSOCKS5(entry, target)
	case "http":
		return dialHTTPConnect(entry, target)
	default:
		cn, err := net.DialTimeout("tcp", target.String(), handshakeLimit)
		if err != nil {
			return nil, err
		}
		return cn.(*net.TCPConn), nil
	}
}

// ---------------------------------------------------------------- source / sink

// Wire protocol of the in-process server: 10-byte header 'R', mode, size
// (uint64 big endian). Mode 'D'/'d': the server sends size bytes, then waits
// for the client to close. Mode 'U'/'u': the server reads size bytes and
// answers one byte ('K', or 'X' on a pattern mismatch). Lower case: verify.
// No half-close is needed in either direction.
type server struct {
	ln      *net.TCPListener
	pattern []byte
	timeout time.Duration
}

func newServer(timeout time.Duration) (*server, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	pat := make([]byte, patternBytes)
	rand.New(rand.NewSource(2)).Read(pat)
	s := &server{ln: ln, pattern: pat, timeout: timeout}
	go s.serve()
	return s, nil
}

func (s *server) addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

func (s *server) serve() {
	for {
		c, err := s.ln.AcceptTCP()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

func (s *server) handle(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.timeout))
	var h [10]byte
	if _, err := io.ReadFull(c, h[:]); err != nil || h[0] != 'R' {
		return
	}
	sizeBytes := int64(binary.BigEndian.Uint64(h[2:]))
	switch h[1] {
	case 'D', 'd':
		if err := writePattern(c, s.pattern, sizeBytes); err != nil {
			return
		}
		io.Copy(io.Discard, c) // until the client closes
	case 'U', 'u':
		ok, err := readPattern(c, s.pattern, sizeBytes, h[1] == 'u')
		if err != nil {
			return
		}
		ack := []byte{'K'}
		if !ok {
			ack[0] = 'X'
		}
		c.Write(ack)
		io.Copy(io.Discard, c)
	}
}

func writePattern(w io.Writer, pat []byte, sizeBytes int64) error {
	for off := int64(0); off < sizeBytes; {
		p := pat[off%int64(len(pat)):]
		if rem := sizeBytes - off; int64(len(p)) > rem {
			p = p[:rem]
		}
		n, err := w.Write(p)
		off += int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// readPattern reads exactly sizeBytes; with verify it compares against the
// cyclic pattern and reports whether all bytes matched.
func readPattern(r io.Reader, pat []byte, sizeBytes int64, verify bool) (bool, error) {
	buf := make([]byte, ioBufBytes)
	ok := true
	for off := int64(0); off < sizeBytes; {
		want := buf
		if rem := sizeBytes - off; int64(len(want)) > rem {
			want = want[:rem]
		}
		n, err := r.Read(want)
		if verify && ok && n > 0 {
			ok = matchesPattern(pat, off, want[:n])
		}
		off += int64(n)
		if err != nil {
			if off >= sizeBytes {
				break
			}
			return false, fmt.Errorf("after %d of %d bytes: %w", off, sizeBytes, err)
		}
	}
	return ok, nil
}

func matchesPattern(pat []byte, off int64, data []byte) bool {
	for len(data) > 0 {
		p := pat[off%int64(len(pat)):]
		n := min(len(p), len(data))
		if !bytes.Equal(p[:n], data[:n]) {
			return false
		}
		data, off = data[n:], off+int64(n)
	}
	return true
}

// transfer moves sizeBytes over conn in the given direction and returns the
// wall time from the request header to the last byte (download) or the
// server's acknowledgement (upload).
func transfer(c *net.TCPConn, pat []byte, dir string, sizeBytes int64, verify bool, timeout time.Duration) (time.Duration, error) {
	c.SetDeadline(time.Now().Add(timeout))
	mode := byte('D')
	if dir == "upload" {
		mode = 'U'
	}
	if verify {
		mode += 'a' - 'A'
	}
	h := make([]byte, 10)
	h[0], h[1] = 'R', mode
	binary.BigEndian.PutUint64(h[2:], uint64(sizeBytes))
	t0 := time.Now()
	if _, err := c.Write(h); err != nil {
		return 0, err
	}
	if dir == "download" {
		ok, err := readPattern(c, pat, sizeBytes, verify)
		el := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("download: %w", err)
		}
		if !ok {
			return 0, errors.New("download: payload corrupted")
		}
		return el, nil
	}
	if err := writePattern(c, pat, sizeBytes); err != nil {
		return 0, fmt.Errorf("upload: %w", err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return 0, fmt.Errorf("upload: waiting for the sink's acknowledgement: %w", err)
	}
	el := time.Since(t0)
	if ack[0] != 'K' {
		return 0, errors.New("upload: payload corrupted")
	}
	return el, nil
}

// ---------------------------------------------------------------- CPU accounting

// clockTicks reads AT_CLKTCK from the auxiliary vector (sysconf(_SC_CLK_TCK)
// without cgo); falls back to 100 Hz.
func clockTicks() float64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err == nil {
		for i := 0; i+16 <= len(b); i += 16 {
			typ := binary.NativeEndian.Uint64(b[i:])
			val := binary.NativeEndian.Uint64(b[i+8:])
			if typ == 17 && val > 0 { // AT_CLKTCK
				return float64(val)
			}
		}
	}
	return 100
}

type procStat struct {
	ppid  int
	ticks uint64 // utime + stime + cutime + cstime
}

func readProcStats() map[int]procStat {
	m := map[int]procStat{}
	procs, err := procfs.AllProcs()
	if err != nil {
		return m
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // gone meanwhile
		}
		// Reaped children's time is in cutime/cstime; negative values
		// (the kernel's long type) are treated as none.
		m[p.PID] = procStat{ppid: st.PPID, ticks: uint64(st.UTime + st.STime + uint(max(st.CUTime, 0)) + uint(max(st.CSTime, 0)))}
	}
	return m
}

// treeCPUSeconds sums the CPU time of the given processes and all their live
// descendants (reaped children are included through cutime/cstime).
func treeCPUSeconds(roots []int, clkTck float64) (float64, int) {
	st := readProcStats()
	kids := map[int][]int{}
	for pid, s := range st {
		kids[s.ppid] = append(kids[s.ppid], pid)
	}
	seen := map[int]bool{}
	var ticks uint64
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if s, ok := st[pid]; ok {
			ticks += s.ticks
		}
		queue = append(queue, kids[pid]...)
	}
	return float64(ticks) / clkTck, len(seen)
}

func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// ---------------------------------------------------------------- main loop

func run(c *config) int {
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	wd, err := os.MkdirTemp("", "relaybench-")
	if err != nil {
		fatalf("%v", err)
	}
	os.Chmod(wd, 0o755) // squid workers run as "proxy" and must traverse it
	c.workDir = wd
	if !c.keep {
		workDirToRemove = wd
		defer os.RemoveAll(wd)
	} else {
		fmt.Printf("work dir (kept): %s\n", wd)
	}
	srv, err := newServer(c.timeout + time.Minute)
	if err != nil {
		fatalf("sink: %v", err)
	}
	target := srv.addr()

	// Resolve binaries up front; skipped kinds are reported once.
	skip := map[string]string{}
	bins := map[string]string{}
	for _, k := range c.kinds {
		s := specs[k]
		if s.binary == nil {
			continue
		}
		bin, err := s.binary(c)
		if err != nil {
			skip[k] = err.Error()
			fmt.Printf("NOTE: skipping %s: %v\n", k, err)
			continue
		}
		bins[k] = bin
	}

	var results []result
	add := func(r result) {
		results = append(results, r)
		switch r.Status {
		case "ok":
			fmt.Printf("  %-12s hops=%d %-8s run=%d  %6.2f Gbit/s  %5.2f CPU-s/GiB  (%d procs, %.2fs)\n",
				r.Kind, r.Hops, r.Direction, r.Run, r.RateBps/1e9, r.CPUSecondsPerGiB, r.RelayProcs, r.WallSeconds)
		default:
			fmt.Printf("  %-12s hops=%d %-8s run=%d  %s: %s\n", r.Kind, r.Hops, r.Direction, r.Run, r.Status, r.Reason)
		}
	}

	fmt.Printf("relaybench: size=%d bytes runs=%d kinds=%s hops=%v dirs=%v clk_tck=%.0f\n",
		c.sizeBytes, c.runs, strings.Join(c.kinds, ","), c.hops, c.dirs, c.clkTck)
	for run := 1; run <= c.runs; run++ {
		// Rotate the kind order every run so position effects hit all alike.
		order := append(append([]string(nil), c.kinds[(run-1)%len(c.kinds):]...), c.kinds[:(run-1)%len(c.kinds)]...)
		fmt.Printf("run %d/%d\n", run, c.runs)
		for hi, hops := range c.hops {
			for _, k := range order {
				s := specs[k]
				h := hops
				if s.maxHops == 0 {
					if hi != 0 {
						continue // direct: once per run
					}
					h = 0
				}
				base := result{Kind: k, Front: s.front, Hops: h, Run: run, SizeBytes: c.sizeBytes}
				placeholder := func(status, reason string) {
					if run > 1 && status != "failed" {
						return // skips and n/a are recorded once
					}
					for _, d := range c.dirs {
						r := base
						r.Direction, r.Status, r.Reason = d, status, reason
						add(r)
					}
				}
				if why, ok := skip[k]; ok {
					placeholder("skipped", why)
					continue
				}
				if (s.maxHops > 0 && h > s.maxHops) || h < s.minHops {
					placeholder("n/a", s.note)
					continue
				}
				measureKind(c, s, h, run, srv, target, base, add, placeholder)
			}
		}
	}
	killAll()

	sums := summarize(c, results)
	meta := collectMeta(c, bins)
	md := renderMarkdown(c, meta, sums)
	fmt.Println()
	fmt.Print(md)
	mdPath := filepath.Join(c.outDir, c.name+".md")
	jsonPath := filepath.Join(c.outDir, c.name+".json")
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		fatalf("%v", err)
	}
	js, _ := json.MarshalIndent(map[string]any{"meta": meta, "summary": sums, "results": results}, "", "  ")
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		fatalf("%v", err)
	}
	fmt.Printf("\nwrote %s and %s\n", mdPath, jsonPath)
	return 0
}

func measureKind(c *config, s *kindSpec, hops, run int, srv *server, target *net.TCPAddr,
	base result, add func(result), placeholder func(string, string)) {
	ch := &chain{front: s.front}
	if hops > 0 {
		var err error
		ch, err = startChain(c, s, hops, fmt.Sprintf("run%d", run))
		if err != nil {
			placeholder("failed", "start: "+err.Error())
			return
		}
	}
	defer ch.stop()
	// Warm-up and end-to-end check: small verified transfers both ways.
	// Retried because some relays fail the first CONNECT after start.
	var probeErr error
	for attempt := 0; attempt < probeAttempts; attempt++ {
		if probeErr = probe(ch, srv, target); probeErr == nil {
			break
		}
		time.Sleep(time.Duration(200*(attempt+1)) * time.Millisecond)
	}
	if probeErr != nil {
		reason := "probe: " + probeErr.Error()
		for _, p := range ch.procs {
			if t := p.logTail(); t != "" {
				reason += "; " + p.name + " log: " + t
			}
		}
		placeholder("failed", reason)
		return
	}
	for _, d := range c.dirs {
		r := base
		r.Direction = d
		if err := measureOnce(c, ch, srv, target, &r); err != nil {
			r.Status, r.Reason = "failed", err.Error()
		} else {
			r.Status = "ok"
		}
		add(r)
	}
}

func probe(ch *chain, srv *server, target *net.TCPAddr) error {
	for _, d := range []string{"download", "upload"} {
		cn, err := dialThrough(ch.front, ch.entry, target)
		if err != nil {
			return fmt.Errorf("%s connect: %w", d, err)
		}
		_, err = transfer(cn, srv.pattern, d, probeBytes, true, 20*time.Second)
		cn.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func measureOnce(c *config, ch *chain, srv *server, target *net.TCPAddr, r *result) error {
	cn, err := dialThrough(ch.front, ch.entry, target)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cn.Close()
	pids := ch.pids()
	cpu0, _ := treeCPUSeconds(pids, c.clkTck)
	self0 := selfCPUSeconds()
	el, err := transfer(cn, srv.pattern, r.Direction, c.sizeBytes, c.verify, c.timeout)
	cpu1, n := treeCPUSeconds(pids, c.clkTck)
	self1 := selfCPUSeconds()
	if err != nil {
		return err
	}
	r.WallSeconds = el.Seconds()
	r.RateBps = float64(c.sizeBytes) * 8 / el.Seconds()
	r.RelayCPUSeconds = cpu1 - cpu0
	r.CPUSecondsPerGiB = r.RelayCPUSeconds / (float64(c.sizeBytes) / gibBytes)
	r.DriverCPUSeconds = self1 - self0
	r.RelayProcs = n
	return nil
}

// ---------------------------------------------------------------- reporting

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(c *config, rs []result) []summary {
	type key struct {
		kind, dir string
		hops      int
	}
	var order []key
	groups := map[key][]result{}
	for _, r := range rs {
		k := key{r.Kind, r.Direction, r.Hops}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	// Stable presentation: by hops, direction, then the -kinds order.
	kindIdx := map[string]int{}
	for i, k := range c.kinds {
		kindIdx[k] = i
	}
	dirIdx := map[string]int{"download": 0, "upload": 1}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.hops != b.hops {
			return a.hops < b.hops
		}
		if a.dir != b.dir {
			return dirIdx[a.dir] < dirIdx[b.dir]
		}
		return kindIdx[a.kind] < kindIdx[b.kind]
	})
	var out []summary
	floor := map[key]summary{}
	for _, k := range order {
		g := groups[k]
		s := summary{Kind: k.kind, Front: g[0].Front, Hops: k.hops, Direction: k.dir}
		var rates, cpus []float64
		var reasons []string
		for _, r := range g {
			if r.Status == "ok" {
				rates = append(rates, r.RateBps)
				cpus = append(cpus, r.CPUSecondsPerGiB)
				continue
			}
			if r.Status == "failed" {
				s.Runs++
			}
			if r.Reason != "" && !contains(reasons, r.Reason) {
				reasons = append(reasons, r.Reason)
			}
			s.Status = r.Status
		}
		s.RunsOK = len(rates)
		s.Runs += len(rates)
		s.Reason = strings.Join(reasons, " // ")
		if len(rates) > 0 {
			s.Status = "ok"
			if s.RunsOK < s.Runs {
				s.Status = "partial"
			}
			s.MedianRateBps = median(rates)
			s.MedianCPUPerGiB = median(cpus)
			sort.Float64s(rates)
			s.MinRateBps, s.MaxRateBps = rates[0], rates[len(rates)-1]
		}
		if k.kind == floorKind && len(rates) > 0 {
			floor[key{"", k.dir, k.hops}] = s
		}
		out = append(out, s)
	}
	for i := range out {
		s := &out[i]
		f, ok := floor[key{"", s.Direction, s.Hops}]
		if !ok || s.MedianRateBps == 0 {
			continue
		}
		s.RateRatioToFloor = s.MedianRateBps / f.MedianRateBps
		if f.MedianCPUPerGiB > 0 {
			s.CPURatioToFloor = s.MedianCPUPerGiB / f.MedianCPUPerGiB
		}
	}
	return out
}

type meta struct {
	Date          string            `json:"date"`
	Command       string            `json:"command"`
	DriverArgs    string            `json:"driverArgs"`
	NProc         int               `json:"nproc"`
	Kernel        string            `json:"kernel"`
	CPUModel      string            `json:"cpuModel"`
	GoVersion     string            `json:"goVersion"`
	SizeBytes     int64             `json:"sizeBytes"`
	Runs          int               `json:"runs"`
	ClockTicksHz  float64           `json:"clockTicksHz"`
	Sysctls       map[string]string `json:"sysctls"`
	PeerVersions  map[string]string `json:"peerVersions"`
	PeerBinaries  map[string]string `json:"peerBinaries"`
	VerifyPayload bool              `json:"verifyPayload"`
}

func collectMeta(c *config, bins map[string]string) meta {
	m := meta{
		Date: time.Now().Format(time.RFC3339), Command: c.cmdline, DriverArgs: strings.Join(os.Args, " "),
		NProc: runtime.NumCPU(), Kernel: readTrim("/proc/sys/kernel/osrelease"),
		GoVersion: runtime.Version(), SizeBytes: c.sizeBytes, Runs: c.runs, ClockTicksHz: c.clkTck,
		Sysctls: map[string]string{}, PeerVersions: map[string]string{}, PeerBinaries: bins,
		VerifyPayload: c.verify,
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i >= 0 {
					m.CPUModel = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	for _, s := range []string{"net/ipv4/tcp_congestion_control", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem", "net/core/rmem_max", "net/core/wmem_max"} {
		m.Sysctls[strings.ReplaceAll(s, "/", ".")] = readTrim("/proc/sys/" + s)
	}
	m.Sysctls["lo.mtu"] = readTrim("/sys/class/net/lo/mtu")
	pkgs := map[string]string{"dante": "dante-server", "squid": "squid", "microsocks": "microsocks"}
	for k, bin := range bins {
		if pkg, ok := pkgs[k]; ok {
			out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
			if err == nil {
				m.PeerVersions[k] = pkg + " " + string(out)
			}
			continue
		}
		if bi, err := buildinfo.ReadFile(bin); err == nil {
			v := bi.Main.Path + " " + bi.Main.Version
			for _, d := range bi.Deps {
				if strings.HasSuffix(d.Path, "/"+strings.TrimSuffix(k, "-http")) {
					v = d.Path + " " + d.Version
				}
			}
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v += " rev " + s.Value
				}
			}
			m.PeerVersions[k] = v + " (" + bi.GoVersion + ")"
		}
	}
	return m
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.Join(strings.Fields(string(b)), " ")
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func renderMarkdown(c *config, m meta, sums []summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Relay loopback benchmark (single TCP stream)\n\n")
	fmt.Fprintf(&b, "- date: %s\n- command: `%s`\n", m.Date, m.Command)
	if m.DriverArgs != m.Command {
		fmt.Fprintf(&b, "- driver: `%s`\n", m.DriverArgs)
	}
	fmt.Fprintf(&b, "- machine: nproc %d, kernel %s, %s\n", m.NProc, m.Kernel, m.CPUModel)
	fmt.Fprintf(&b, "- %s; loopback MTU %s; congestion control %s; tcp_rmem %s; tcp_wmem %s\n",
		m.GoVersion, m.Sysctls["lo.mtu"], m.Sysctls["net.ipv4.tcp_congestion_control"],
		m.Sysctls["net.ipv4.tcp_rmem"], m.Sysctls["net.ipv4.tcp_wmem"])
	fmt.Fprintf(&b, "- transfer: %s per run (%d bytes), %d run(s) interleaved round-robin, medians shown\n",
		humanBytes(c.sizeBytes), c.sizeBytes, c.runs)
	if c.sizeBytes < 2*gibBytes {
		fmt.Fprintf(&b, "- **size below the 2 GiB of the issue: a smoke test, not the benchmark**\n")
	}
	var names []string
	for k := range m.PeerVersions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "- %s: %s\n", k, m.PeerVersions[k])
	}
	b.WriteString("\nGbit/s = payload bits / wall time (10-byte request header to last byte or upload ack). " +
		"CPU-s/GiB = utime+stime of all relay processes and their children (/proc/PID/stat) per GiB moved. " +
		"Ratios are to the io.Copy relay (copyrelay) at the same hops and direction. " +
		"download = server→client, upload = client→server. Chains are hop by hop (each relay points at the next).\n\n")
	b.WriteString("| kind | front | hops | direction | Gbit/s | CPU-s/GiB | Gbit/s ÷ io.Copy | CPU ÷ io.Copy | runs ok | note |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		rate, cpu := "–", "–"
		if s.RunsOK > 0 {
			rate = fmt.Sprintf("%.2f", s.MedianRateBps/1e9)
			if s.RunsOK > 1 {
				rate += fmt.Sprintf(" (%.2f–%.2f)", s.MinRateBps/1e9, s.MaxRateBps/1e9)
			}
			if s.Hops > 0 {
				cpu = fmt.Sprintf("%.2f", s.MedianCPUPerGiB)
			}
		}
		note := s.Reason
		if s.Status != "ok" {
			note = s.Status + ": " + note
		}
		if s.Status == "ok" && specs[s.Kind].note != "" {
			note = specs[s.Kind].note
		}
		note = strings.ReplaceAll(note, "|", "\\|")
		if len(note) > 300 {
			note = note[:300] + "…"
		}
		runs := fmt.Sprintf("%d/%d", s.RunsOK, s.Runs)
		if s.Status == "skipped" || s.Status == "n/a" {
			runs = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Kind, s.Front, s.Hops, s.Direction, rate, cpu,
			fmtRatio(s.RateRatioToFloor), fmtRatio(s.CPURatioToFloor), runs, note)
	}
	return b.String()
}

// ---------------------------------------------------------------- helpers

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suf)), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return int64(f * float64(mult)), nil
}

func humanBytes(n int64) string {
	switch {
	case n >= gibBytes && n%(gibBytes/16) == 0:
		return strconv.FormatFloat(float64(n)/gibBytes, 'f', -1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB"
	default:
		return strconv.FormatInt(n, 10) + " B"
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "relaybench: "+format+"\n", a...)
	killAll()
	os.Exit(2)
}
