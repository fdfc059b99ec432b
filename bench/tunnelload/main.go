// Command tunnelload holds many SOCKS5 tunnels open through one proxy and
// keeps them busy: what a relay costs per tunnel (file descriptors, memory)
// and how many round trips a second it carries for all of them at once.
//
// It runs its own echo server on loopback, opens -tunnels tunnels through
// the proxy to it (SOCKS5 CONNECT with golang.org/x/net/proxy, -dial-at-once
// handshakes at a time), then for -duration every open tunnel sends
// -payload bytes and waits for their echo, again and again. It reads the
// proxy's resident memory and open file descriptors from /proc/PID (-pid)
// before the tunnels, once they are open, and at the end of the busy phase,
// and prints one JSON object. With -report it turns run-load-bench.sh's
// runs into a Markdown table instead.
//
// Both ends of every tunnel are this process's: run it as root, or with a
// file limit above twice -tunnels (it raises its own soft limit to the
// hard one, and as root the hard one too).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/proxy"
)

type result struct {
	Proxy        string         `json:"proxy"`
	Tunnels      int            `json:"tunnels"`
	Opened       int            `json:"opened"`
	Failed       int            `json:"failed"`
	Errors       map[string]int `json:"errors,omitempty"`
	OpenS        float64        `json:"open_s"`
	BusyS        float64        `json:"busy_s"`
	RoundTrips   int64          `json:"round_trips"`
	RoundTripsPS float64        `json:"round_trips_per_s"`
	// BrokenInBusy counts tunnels that failed while busy.
	BrokenInBusy int64 `json:"broken_in_busy"`
	// The proxy's resident memory (KiB) and open fds: before any tunnel,
	// with every tunnel open and idle, and at the end of the busy phase.
	RSSBeforeKiB int     `json:"rss_before_kib"`
	RSSOpenKiB   int     `json:"rss_open_kib"`
	RSSBusyKiB   int     `json:"rss_busy_kib"`
	FDsBefore    int     `json:"fds_before"`
	FDsOpen      int     `json:"fds_open"`
	FDsBusy      int     `json:"fds_busy"`
	KiBPerTunnel float64 `json:"kib_per_tunnel"` // (busy - before) / opened
	FDsPerTunnel float64 `json:"fds_per_tunnel"` // (open - before) / opened
	// Where a Go proxy's memory goes (-metrics): its goroutine stacks and
	// its heap in use, at the end of the busy phase less before, per open
	// tunnel (go_memstats_stack_inuse_bytes, go_memstats_heap_inuse_bytes).
	StackKiBPerTunnel float64 `json:"stack_kib_per_tunnel,omitempty"`
	HeapKiBPerTunnel  float64 `json:"heap_kib_per_tunnel,omitempty"`
}

func main() {
	socks := flag.String("socks", "", "the proxy's SOCKS5 address, host:port (required)")
	pid := flag.Int("pid", 0, "the proxy's process id, for its memory and file descriptors (0: not read)")
	tunnels := flag.Int("tunnels", 1000, "tunnels to open")
	atOnce := flag.Int("dial-at-once", 256, "SOCKS5 handshakes in flight at a time")
	openTimeout := flag.Duration("open-timeout", 10*time.Second, "a tunnel not open within this counts as failed")
	openWithin := flag.Duration("open-within", 60*time.Second, "no tunnel is started after this (the rest count as failed): a proxy that hangs the ones past its limit would take tunnels/dial-at-once × open-timeout")
	duration := flag.Duration("duration", 10*time.Second, "how long every open tunnel does round trips")
	payload := flag.Int("payload", 64, "bytes per round trip")
	settle := flag.Duration("settle", 2*time.Second, "wait after opening before reading the proxy's idle memory")
	metricsURL := flag.String("metrics", "", "the proxy's Prometheus metrics URL, for its Go stacks and heap in use (empty: not read)")
	reportOf := flag.String("report", "", "write the Markdown table of this JSON-lines file of runs (run-load-bench.sh's) and exit")
	cmdline := flag.String("cmdline", "", "with -report: the command that made the runs, for the table's header")
	flag.Parse()
	if *reportOf != "" {
		if err := report(os.Stdout, *reportOf, *cmdline); err != nil {
			fmt.Fprintln(os.Stderr, "tunnelload:", err)
			os.Exit(1)
		}
		return
	}
	if *socks == "" {
		fmt.Fprintln(os.Stderr, "tunnelload: -socks host:port is required")
		os.Exit(2)
	}
	// Both ends of every tunnel, the handshakes in flight, and room.
	raiseFileLimit(2**tunnels + 2**atOnce + 1024)
	res, err := run(*socks, *pid, *metricsURL, *tunnels, *atOnce, *openTimeout, *openWithin, *duration, *payload, *settle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tunnelload:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func run(socks string, pid int, metricsURL string, n, atOnce int, openTimeout, openWithin, duration time.Duration, payload int, settle time.Duration) (*result, error) {
	echo, err := startEcho()
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	res := &result{Proxy: socks, Tunnels: n, Errors: map[string]int{}}
	res.RSSBeforeKiB, res.FDsBefore = readProc(pid)
	memBefore, memErr := readGoMemory(metricsURL)

	start := time.Now()
	conns, errs := openTunnels(socks, echo.Addr().String(), n, atOnce, openTimeout, start.Add(openWithin))
	res.OpenS = time.Since(start).Seconds()
	for _, e := range errs {
		res.Errors[e]++
	}
	res.Opened, res.Failed = len(conns), len(errs)
	time.Sleep(settle)
	res.RSSOpenKiB, res.FDsOpen = readProc(pid)

	trips, broken, busy := busyPhase(conns, duration, payload)
	res.RSSBusyKiB, res.FDsBusy = readProc(pid)
	memBusy, err := readGoMemory(metricsURL)
	if memErr != nil || err != nil {
		return nil, fmt.Errorf("reading -metrics: %w", errors.Join(memErr, err))
	}
	res.RoundTrips, res.BrokenInBusy, res.BusyS = trips, broken, busy.Seconds()
	if busy > 0 {
		res.RoundTripsPS = float64(trips) / busy.Seconds()
	}
	if res.Opened > 0 && pid != 0 {
		res.KiBPerTunnel = float64(res.RSSBusyKiB-res.RSSBeforeKiB) / float64(res.Opened)
		res.FDsPerTunnel = float64(res.FDsOpen-res.FDsBefore) / float64(res.Opened)
	}
	if res.Opened > 0 && metricsURL != "" {
		res.StackKiBPerTunnel = (memBusy.stackBytes - memBefore.stackBytes) / 1024 / float64(res.Opened)
		res.HeapKiBPerTunnel = (memBusy.heapBytes - memBefore.heapBytes) / 1024 / float64(res.Opened)
	}
	for _, c := range conns {
		c.Close()
	}
	return res, nil
}

// openTunnels opens n tunnels to target through socks, atOnce at a time,
// none started after startBy; it returns the open ones and, for each that
// failed or was not tried, a short reason.
func openTunnels(socks, target string, n, atOnce int, timeout time.Duration, startBy time.Time) ([]net.Conn, []string) {
	var mu sync.Mutex
	var conns []net.Conn
	var errs []string
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		if time.Now().After(startBy) {
			<-sem
			mu.Lock()
			errs = append(errs, "not tried: the open phase was over")
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := openOne(socks, target, timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, reason(err))
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return conns, errs
}

// openOne is one SOCKS5 CONNECT and one round trip through it: a proxy
// that answers "succeeded" before it has dialed is not counted open until
// the echo came back.
func openOne(socks, target string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := proxy.SOCKS5("tcp", socks, nil, &net.Dialer{})
	if err != nil {
		return nil, err
	}
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if err := roundTrip(c, []byte{1}, make([]byte, 1)); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// busyPhase makes every conn do round trips of payload bytes until
// duration is over; it returns the round trips done, the tunnels that
// broke, and how long the phase took.
func busyPhase(conns []net.Conn, duration time.Duration, payload int) (int64, int64, time.Duration) {
	var trips, broken atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, in := make([]byte, payload), make([]byte, payload)
			_ = c.SetDeadline(start.Add(duration + 10*time.Second))
			for !stop.Load() {
				if err := roundTrip(c, out, in); err != nil {
					broken.Add(1)
					return
				}
				trips.Add(1)
			}
		}()
	}
	time.Sleep(duration)
	stop.Store(true)
	elapsed := time.Since(start)
	wg.Wait()
	return trips.Load(), broken.Load(), elapsed
}

func roundTrip(c net.Conn, out, in []byte) error {
	if _, err := c.Write(out); err != nil {
		return err
	}
	_, err := io.ReadFull(c, in)
	return err
}

// startEcho serves an echo on a loopback port.
func startEcho() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			go echoConn(c)
		}
	}()
	return ln, nil
}

// echoConn sends back what c sends, through a small buffer: io.Copy from
// a TCP conn to itself would splice and hold a pipe (two descriptors) for
// the conn's life, doubling this process's descriptors per tunnel.
func echoConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// reason is a failure's kind, short enough to count: the error text
// without addresses and ports.
func reason(err error) string { return addrs.ReplaceAllString(err.Error(), "ADDR") }

var addrs = regexp.MustCompile(`\[?[0-9a-f.:]+\]?:[0-9]+`)

// readProc is pid's resident memory (KiB) and open file descriptors; zeros
// for pid 0 or when /proc cannot tell.
func readProc(pid int) (rssKiB, fds int) {
	if pid == 0 {
		return 0, 0
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				rssKiB, _ = strconv.Atoi(f[1])
			}
		}
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	return rssKiB, fds
}

// raiseFileLimit makes room for want descriptors: the soft limit up to the
// hard one, and (as root) the hard one too.
func raiseFileLimit(want int) {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	if uint64(want) > lim.Max {
		raised := lim
		raised.Cur, raised.Max = uint64(want), uint64(want)
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return
		}
	}
	lim.Cur = lim.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// goMemory is what a Go process's Prometheus collector says of its memory.
type goMemory struct{ stackBytes, heapBytes float64 }

// readGoMemory reads the goroutine stacks and heap in use from a Go
// process's metrics (the client_golang Go collector's gauges); zeros when
// url is empty.
func readGoMemory(url string) (goMemory, error) {
	var m goMemory
	if url == "" {
		return m, nil
	}
	resp, err := http.Get(url)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("%s: %s", url, resp.Status)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_memstats_stack_inuse_bytes":
			dst = &m.stackBytes
		case "go_memstats_heap_inuse_bytes":
			dst = &m.heapBytes
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(value, 64); err != nil {
			return m, fmt.Errorf("%s: %s: %w", url, name, err)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if found != 2 {
		return m, fmt.Errorf("%s: no go_memstats_stack_inuse_bytes and go_memstats_heap_inuse_bytes: not a Go process's metrics?", url)
	}
	return m, nil
}
