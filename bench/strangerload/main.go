// Command strangerload measures whether a relay under a stranger's load
// still serves its fleet: one relayd (identities from an operator CA,
// credentials on its SOCKS5 and HTTP front ends, an admin token) on this
// network namespace's address, and side by side, in alternating blocks
// with and without a stranger holding -strangers idle connections to each
// of its four public ports (from -sources addresses, reconnecting as soon
// as the relay closes one), the time a client with credentials takes to
// get a byte echoed through a SOCKS5 CONNECT and an HTTP CONNECT, a peer
// relay through a new relay link with a route header, and relayctl (a
// client certificate) to read /v1/info over a new HTTPS connection.
//
// It needs addresses of its own: run it in a fresh network namespace with
// -addr on a dummy interface and the source addresses beside it
// (bench/run-stranger-bench.sh does). Results: -out/NAME.{md,json}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/proxy"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/route"
)

const (
	user, password = "bench", "bench-password"
	adminToken     = "strangerload-admin-token-0123456789"
	portSOCKS      = 1080
	portHTTP       = 8080
	portAdmin      = 9090
	portRelay      = 7000
	portEcho       = 9000
)

type config struct {
	relayd     string
	addr       string // the relay's address (and the echo server's)
	client     string // the legitimate clients' source address
	sourceBase string // first stranger source address
	sources    int
	strangers  int           // per port
	samples    int           // per kind and block
	every      time.Duration // between two rounds of samples
	blocks     int           // blocks per phase, alternating
	out, name  string
	cmdline    string
}

func main() {
	var c config
	flag.StringVar(&c.relayd, "relayd", "bench/.bin/relayd", "relayd binary")
	flag.StringVar(&c.addr, "addr", "10.98.0.1", "the relay's address, on an interface of this namespace")
	flag.StringVar(&c.client, "client", "10.98.0.2", "source address of the legitimate clients")
	flag.StringVar(&c.sourceBase, "source-base", "10.98.1.1", "first of -sources consecutive stranger source addresses")
	flag.IntVar(&c.sources, "sources", 64, "stranger source addresses")
	flag.IntVar(&c.strangers, "strangers", 1000, "idle stranger connections held to each public port")
	flag.IntVar(&c.samples, "samples", 30, "samples per kind in each block")
	flag.DurationVar(&c.every, "every", 500*time.Millisecond, "time between two rounds of samples (a block spans the relay's 10 s handshake timeout, so the stranger's connections are closed and reopened while it runs)")
	flag.IntVar(&c.blocks, "blocks", 2, "blocks of each phase (quiet, strangers), alternating")
	flag.StringVar(&c.out, "out", "bench/results", "output directory")
	flag.StringVar(&c.name, "name", "stranger-load", "output file name (without extension)")
	flag.StringVar(&c.cmdline, "cmdline", "", "the command that ran this, for the report")
	flag.Parse()
	if err := run(c); err != nil {
		log.Fatal(err)
	}
}

// kinds of legitimate request timed, in table order.
var kinds = []string{"socks5-connect", "http-connect", "relay-link", "admin-info"}

type sample struct {
	kind, phase string
	ms          float64
	err         error
}

func run(c config) error {
	dir, err := os.MkdirTemp("", "strangerload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ids, err := makeIdentities(dir)
	if err != nil {
		return err
	}
	echo, err := startEcho(net.JoinHostPort(c.addr, fmt.Sprint(portEcho)))
	if err != nil {
		return err
	}
	defer echo.Close()
	stop, err := startRelayd(c, dir)
	if err != nil {
		return err
	}
	defer stop()

	legit := newLegit(c, ids)
	var all []sample
	var held []int
	for b := 0; b < c.blocks; b++ {
		for _, phase := range []string{"quiet", "strangers"} {
			var s *stranger
			if phase == "strangers" {
				s = startStranger(c)
				time.Sleep(3 * time.Second) // let it fill what the relay lets it hold
			}
			for i := 0; i < c.samples; i++ {
				for _, k := range kinds {
					ms, err := legit.time(k)
					all = append(all, sample{kind: k, phase: phase, ms: ms, err: err})
				}
				if s != nil {
					held = append(held, int(s.open.Load()))
				}
				time.Sleep(c.every)
			}
			if s != nil {
				log.Printf("block %d: the stranger held %d connections at most, %d refused or closed by the relay", b+1, slices.Max(held), s.closed.Load())
				s.stop()
				time.Sleep(2 * time.Second) // the relay's slots drain
			}
		}
	}
	return report(c, all, held)
}

// identities is the relay's, a peer relay's and a relayctl user's.
type identities struct {
	caPath                string
	relay, peer, relayctl *linktls.Identity
	relayFiles            linktls.Files
}

func makeIdentities(dir string) (*identities, error) {
	ca, err := linktls.NewCA("strangerload CA", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	ids := &identities{caPath: caPath}
	issue := func(name, role string) (linktls.Files, *linktls.Identity, error) {
		f, err := ca.WriteIdentity(dir, caPath, name, role, 24*time.Hour)
		if err != nil {
			return f, nil, err
		}
		id, err := linktls.Load(f)
		return f, id, err
	}
	if ids.relayFiles, ids.relay, err = issue("r1", linktls.RoleRelay); err != nil {
		return nil, err
	}
	if _, ids.peer, err = issue("r2", linktls.RoleRelay); err != nil {
		return nil, err
	}
	if _, ids.relayctl, err = issue("alice", linktls.RoleClient); err != nil {
		return nil, err
	}
	return ids, nil
}

func startEcho(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln, nil
}

// startRelayd runs the relay on c.addr with every public port open to
// the namespace, and waits until it listens.
func startRelayd(c config, dir string) (func(), error) {
	hp := func(p int) string { return net.JoinHostPort(c.addr, fmt.Sprint(p)) }
	cmd := exec.Command(c.relayd, "run", "--name", "r1",
		"--socks", hp(portSOCKS), "--http", hp(portHTTP), "--admin", hp(portAdmin), "--relay-listen", hp(portRelay),
		"--admin-token", adminToken, "--user", user, "--allow-private", "--log-level", "warn", "--log-format", "json",
		"--identity-ca", filepath.Join(dir, "ca.crt"), "--identity-cert", filepath.Join(dir, "r1.crt"), "--identity-key", filepath.Join(dir, "r1.key"))
	cmd.Env = append(os.Environ(), "RELAYD_PASSWORD="+password)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"error"`) {
				log.Printf("relayd: %s", sc.Text())
			}
		}
	}()
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err := net.Dial("tcp", hp(portAdmin)); err == nil {
			conn.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("relayd did not listen within 10 s")
		}
	}
}

// legit times what the fleet's members and clients ask of the relay, each
// on a new connection from c.client.
type legit struct {
	c      config
	dialer *net.Dialer
	admin  *http.Client
	peer   *linktls.Identity
}

func newLegit(c config, ids *identities) *legit {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.client)}}
	tr := &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext, TLSClientConfig: ids.relayctl.AdminClientConfig()}
	return &legit{c: c, dialer: d, admin: &http.Client{Transport: tr, Timeout: 10 * time.Second}, peer: ids.peer}
}

func (l *legit) hp(p int) string { return net.JoinHostPort(l.c.addr, fmt.Sprint(p)) }

func (l *legit) time(kind string) (float64, error) {
	start := time.Now()
	var err error
	switch kind {
	case "socks5-connect":
		err = l.socks()
	case "http-connect":
		err = l.httpConnect()
	case "relay-link":
		err = l.relayLink()
	case "admin-info":
		err = l.adminInfo()
	}
	return float64(time.Since(start).Microseconds()) / 1000, err
}

// echoByte sends one byte over c and waits for it back.
func echoByte(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	return err
}

func (l *legit) socks() error {
	d, err := proxy.SOCKS5("tcp", l.hp(portSOCKS), &proxy.Auth{User: user, Password: password}, l.dialer)
	if err != nil {
		return err
	}
	c, err := d.Dial("tcp", l.hp(portEcho))
	if err != nil {
		return err
	}
	defer c.Close()
	return echoByte(c)
}

func (l *legit) httpConnect() error {
	c, err := l.dialer.Dial("tcp", l.hp(portHTTP))
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := &http.Request{Method: http.MethodConnect, Host: l.hp(portEcho), Header: http.Header{}, URL: nil}
	req.SetBasicAuth(user, password)
	auth := req.Header.Get("Authorization")
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", l.hp(portEcho), l.hp(portEcho), auth); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT: %s", resp.Status)
	}
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	_, err = br.ReadByte()
	return err
}

func (l *legit) relayLink() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := l.dialer.DialContext(ctx, "tcp", l.hp(portRelay))
	if err != nil {
		return err
	}
	c, err := l.peer.Client(ctx, raw, "r1")
	if err != nil {
		return err
	}
	defer c.Close()
	if err := (route.Client{}).ThroughRoute(ctx, c, []chain.Hop(nil), l.hp(portEcho), nil); err != nil {
		return err
	}
	return echoByte(c)
}

func (l *legit) adminInfo() error {
	resp, err := l.admin.Get("https://" + l.hp(portAdmin) + "/v1/info")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/v1/info: %s", resp.Status)
	}
	return nil
}

// stranger holds up to c.strangers silent connections to each public port,
// spread over c.sources source addresses, and opens a new one as soon as
// the relay closes one.
type stranger struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	open   atomic.Int64
	closed atomic.Int64
}

func startStranger(c config) *stranger {
	s := &stranger{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	base := netip.MustParseAddr(c.sourceBase)
	for _, port := range []int{portSOCKS, portHTTP, portAdmin, portRelay} {
		dst := net.JoinHostPort(c.addr, fmt.Sprint(port))
		src := base
		for i := 0; i < c.strangers; i++ {
			if i%(c.strangers/c.sources+1) == 0 && i > 0 {
				src = src.Next()
			}
			s.wg.Add(1)
			go s.hold(src, dst)
		}
	}
	return s
}

// hold keeps one silent connection from src to dst open, reconnecting
// after the relay closes it (a short pause, as a determined client would).
func (s *stranger) hold(src netip.Addr, dst string) {
	defer s.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	for s.ctx.Err() == nil {
		c, err := d.DialContext(s.ctx, "tcp", dst)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.open.Add(1)
		done := make(chan struct{})
		go func() {
			select {
			case <-s.ctx.Done():
				c.Close()
			case <-done:
			}
		}()
		_, _ = c.Read(make([]byte, 1)) // until the relay closes it
		close(done)
		c.Close()
		s.open.Add(-1)
		s.closed.Add(1)
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *stranger) stop() {
	s.cancel()
	s.wg.Wait()
}

// row is one kind in one phase.
type row struct {
	Kind     string  `json:"kind"`
	Phase    string  `json:"phase"`
	N        int     `json:"n"`
	Failed   int     `json:"failed"`
	MedianMs float64 `json:"median_ms"`
	P95Ms    float64 `json:"p95_ms"`
	MaxMs    float64 `json:"max_ms"`
}

func report(c config, all []sample, held []int) error {
	var rows []row
	errs := map[string]string{}
	for _, k := range kinds {
		for _, phase := range []string{"quiet", "strangers"} {
			r := row{Kind: k, Phase: phase}
			var ms []float64
			for _, s := range all {
				if s.kind != k || s.phase != phase {
					continue
				}
				r.N++
				if s.err != nil {
					r.Failed++
					errs[k+" "+phase] = s.err.Error()
					continue
				}
				ms = append(ms, s.ms)
			}
			if len(ms) > 0 {
				slices.Sort(ms)
				r.MedianMs, r.P95Ms, r.MaxMs = ms[len(ms)/2], ms[(len(ms)*95)/100], ms[len(ms)-1]
			}
			rows = append(rows, r)
		}
	}
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	heldMax := 0
	if len(held) > 0 {
		heldMax = slices.Max(held)
	}
	res := map[string]any{
		"date": time.Now().UTC().Format(time.RFC3339), "commit": strings.TrimSpace(string(commit)), "command": c.cmdline,
		"strangers_per_port": c.strangers, "stranger_sources": c.sources, "stranger_held_max": heldMax,
		"rows": rows, "errors": errs,
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(c.out, c.name+".json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# A relay under a stranger's load\n\n- date: %s\n- commit: %s\n- command: `%s`\n", res["date"], res["commit"], c.cmdline)
	fmt.Fprintf(&b, "- one relayd (identity from an operator CA, credentials, admin token), in a network namespace of its own; legitimate requests from %s, each on a new connection\n", c.client)
	fmt.Fprintf(&b, "- the stranger: %d silent connections to each of the SOCKS5, HTTP, admin and relay ports from %d addresses, each reopened 50 ms after the relay closes it; at most %d were open at once while samples were taken (the rest refused or closed by the relay's caps)\n", c.strangers, c.sources, heldMax)
	fmt.Fprintf(&b, "- %d blocks of each phase, alternating (quiet, strangers, ...), %d samples of each kind a block, a round every %s\n\n", c.blocks, c.samples, c.every)
	b.WriteString("| request | phase | n | failed | median ms | p95 ms | max ms | median ÷ quiet |\n|---|---|---|---|---|---|---|---|\n")
	quiet := map[string]float64{}
	for _, r := range rows {
		if r.Phase == "quiet" {
			quiet[r.Kind] = r.MedianMs
		}
	}
	for _, r := range rows {
		ratio := "–"
		if q := quiet[r.Kind]; q > 0 && r.MedianMs > 0 {
			ratio = fmt.Sprintf("%.2f", r.MedianMs/q)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.2f | %.2f | %.2f | %s |\n", r.Kind, r.Phase, r.N, r.Failed, r.MedianMs, r.P95Ms, r.MaxMs, ratio)
	}
	if len(errs) > 0 {
		b.WriteString("\nLast error of each failing row:\n\n")
		for k, e := range errs {
			fmt.Fprintf(&b, "- %s: %s\n", k, e)
		}
	}
	b.WriteString(`
Requests: socks5-connect, a SOCKS5 client with credentials (golang.org/x/net/proxy) reaching an echo server and getting one byte back; http-connect, the same through HTTP CONNECT with Proxy-Authorization; relay-link, a peer relay (its own certificate) opening a TLS relay link, sending a route header to the echo server and getting one byte back; admin-info, relayctl's client certificate reading /v1/info over a new HTTPS connection.
`)
	return os.WriteFile(filepath.Join(c.out, c.name+".md"), []byte(b.String()), 0o644)
}
