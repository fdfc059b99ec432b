// Command udpbench measures SOCKS5 UDP through one relayd on loopback: a
// client sends datagrams at a fixed rate through a UDP association to an
// echo server, which sends each back the same way; it counts every
// datagram at every stage (the client, the relay's counters at its entry
// and exit, the echo server) and the kernel's UDP drops (/proc/net/snmp,
// the whole host's), so a loss is placed where it happened.
//
// Usage (bench/run-udp-bench.sh builds and runs it):
//
//	udpbench -relayd bin/relayd [-rate 10000] [-duration 5s] [-size 200]
package main

import (
	"bufio"
	"encoding/binary"
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
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/relaymesh/relaymesh/pkg/socks5"
)

type config struct {
	relayd   string
	rate     int
	duration time.Duration
	size     int
}

func main() {
	var c config
	flag.StringVar(&c.relayd, "relayd", "bin/relayd", "relayd binary")
	flag.IntVar(&c.rate, "rate", 10000, "datagrams per second the client sends")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "how long it sends")
	flag.IntVar(&c.size, "size", 200, "UDP payload bytes per datagram (at least 8: a sequence number)")
	flag.Parse()
	if c.size < 8 || c.rate < 1 {
		log.Fatal("udpbench: -size at least 8, -rate at least 1")
	}
	if err := run(c); err != nil {
		log.Fatal("udpbench: ", err)
	}
}

func run(c config) error {
	relay, err := startRelayd(c.relayd)
	if err != nil {
		return err
	}
	defer relay.stop()
	echo, err := startEcho()
	if err != nil {
		return err
	}
	defer echo.conn.Close()
	client, err := associate(relay.socks)
	if err != nil {
		return err
	}
	defer client.close()

	kernel0, err := readUDPStats()
	if err != nil {
		return err
	}
	// Warm up: the first datagram opens the way (and must come back).
	if err := client.roundTrip(echo.addr()); err != nil {
		return fmt.Errorf("first datagram: %w", err)
	}
	before, err := relay.counters()
	if err != nil {
		return err
	}
	cpu0 := relay.cpuSeconds()
	echo0 := echo.got.Load()
	total := int64(float64(c.rate) * c.duration.Seconds())
	client.seen = make([]atomic.Bool, total)
	go client.receive()
	sent, took := client.sendAt(echo.addr(), c.rate, total, c.size)
	cpu := relay.cpuSeconds() - cpu0
	time.Sleep(time.Second) // stragglers
	after, err := relay.counters()
	if err != nil {
		return err
	}
	kernel1, err := readUDPStats()
	if err != nil {
		return err
	}
	r := result{
		sent: sent, rate: float64(sent) / took.Seconds(),
		entryUp: after["entry_up"] - before["entry_up"], exitUp: after["exit_up"] - before["exit_up"],
		echoed:   echo.got.Load() - echo0,
		exitDown: after["exit_down"] - before["exit_down"], entryDown: after["entry_down"] - before["entry_down"],
		received: client.got.Load(), dup: client.dup.Load(),
		relayCPU:   cpu / took.Seconds(),
		relayDrops: map[string]int64{},
		kernel:     map[string]int64{},
	}
	for k, v := range after {
		if strings.HasPrefix(k, "drop_") && v-before[k] > 0 {
			r.relayDrops[strings.TrimPrefix(k, "drop_")] = v - before[k]
		}
	}
	for k, v := range kernel1 {
		r.kernel[k] = v - kernel0[k]
	}
	r.print(c)
	return nil
}

type result struct {
	sent                               int64
	rate                               float64
	entryUp, exitUp, echoed            int64
	exitDown, entryDown, received, dup int64
	relayDrops, kernel                 map[string]int64
	relayCPU                           float64 // CPU-seconds a second, while sending
}

func (r result) print(c config) {
	fmt.Printf("| sent by the client | %d (%.0f datagrams/s for %v, %d B each) |\n", r.sent, r.rate, c.duration, c.size)
	stage := func(name string, n, prev int64) {
		fmt.Printf("| %s | %d (%d lost since the stage before) |\n", name, n, prev-n)
	}
	stage("taken by the relay from the client (entry up)", r.entryUp, r.sent)
	stage("sent by the relay to the echo server (exit up)", r.exitUp, r.entryUp)
	stage("received by the echo server and sent back", r.echoed, r.exitUp)
	stage("taken by the relay from the echo server (exit down)", r.exitDown, r.echoed)
	stage("sent by the relay to the client (entry down)", r.entryDown, r.exitDown)
	stage("received by the client", r.received, r.entryDown)
	fmt.Printf("| lost end to end | %d of %d (%.3f %%); %d duplicates |\n", r.sent-r.received, r.sent, 100*float64(r.sent-r.received)/float64(r.sent), r.dup)
	fmt.Printf("| relay drops (relaymesh_udp_drops_total) | %s |\n", counts(r.relayDrops))
	fmt.Printf("| kernel UDP counters over the run, whole host (/proc/net/snmp) | %s |\n", counts(r.kernel))
	fmt.Printf("| relayd CPU while sending (user + system, of one core) | %.0f %% |\n", 100*r.relayCPU)
}

func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range []string{"InDatagrams", "OutDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors", "NoPorts"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
			delete(m, k)
		}
	}
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

// relayd is the relay under test.
type relayd struct {
	cmd          *exec.Cmd
	socks, admin string
}

func startRelayd(bin string) (*relayd, error) {
	cmd := exec.Command(bin, "run", "--socks", "127.0.0.1:0", "--http", "", "--admin", "127.0.0.1:0",
		"--allow-private", "--log-format", "json", "--log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &relayd{cmd: cmd}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `"relayd listening"`) {
			continue
		}
		r.socks, r.admin = field(sc.Text(), "socks"), field(sc.Text(), "admin")
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		return r, nil
	}
	r.stop()
	return nil, errors.New("relayd exited before listening")
}

// field is a string field of a JSON log line (relayd's addresses).
func field(line, name string) string {
	_, rest, ok := strings.Cut(line, `"`+name+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func (r *relayd) stop() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() }

// cpuSeconds is the CPU time relayd has used, user and system
// (/proc/PID/stat, in clock ticks of 1/100 s).
func (r *relayd) cpuSeconds() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th of them.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// counters reads the relay's UDP counters: datagrams by side and
// direction, and drops by reason.
func (r *relayd) counters() (map[string]int64, error) {
	resp, err := http.Get("http://" + r.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "relaymesh_udp_datagrams_total{"):
			out[label(name, "side")+"_"+label(name, "direction")] = int64(v)
		case strings.HasPrefix(name, "relaymesh_udp_drops_total{"):
			out["drop_"+label(name, "side")+"_"+label(name, "reason")] = int64(v)
		}
	}
	return out, sc.Err()
}

func label(series, name string) string {
	_, rest, _ := strings.Cut(series, name+`="`)
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// echo sends every datagram back to its sender.
type echo struct {
	conn *net.UDPConn
	got  atomic.Int64
}

func startEcho() (*echo, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		return nil, err
	}
	e := &echo{conn: conn}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			e.got.Add(1)
			_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return e, nil
}

func (e *echo) addr() netip.AddrPort { return e.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// client is a SOCKS5 UDP client: its control connection, its socket.
type client struct {
	ctrl  net.Conn
	udp   *net.UDPConn
	relay netip.AddrPort
	got   atomic.Int64
	dup   atomic.Int64
	seen  []atomic.Bool
}

func associate(socks string) (*client, error) {
	ctrl, err := net.DialTimeout("tcp", socks, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = ctrl.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := ctrl.Write(socks5.MarshalGreeting(socks5.MethodNoAuth)); err != nil {
		return nil, err
	}
	if m, err := socks5.ReadMethodChoice(ctrl); err != nil || m != socks5.MethodNoAuth {
		return nil, fmt.Errorf("method %v: %v", m, err)
	}
	if _, err := ctrl.Write(socks5.MarshalRequest(socks5.CmdUDPAssociate, socks5.Addr{IP: netip.IPv4Unspecified()})); err != nil {
		return nil, err
	}
	rep, bound, err := socks5.ReadReply(ctrl)
	if err != nil || rep != socks5.ReplySucceeded {
		return nil, fmt.Errorf("UDP ASSOCIATE: %v: %v", rep, err)
	}
	_ = ctrl.SetDeadline(time.Time{})
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		return nil, err
	}
	return &client{ctrl: ctrl, udp: udp, relay: netip.AddrPortFrom(bound.IP, bound.Port)}, nil
}

func (c *client) close() { c.ctrl.Close(); c.udp.Close() }

func (c *client) roundTrip(dst netip.AddrPort) error {
	msg := socks5.AppendUDPHeader(nil, socks5.Addr{IP: dst.Addr(), Port: dst.Port()})
	msg = append(msg, "warm-up!"...)
	if _, err := c.udp.WriteToUDPAddrPort(msg, c.relay); err != nil {
		return err
	}
	_ = c.udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65536)
	_, _, err := c.udp.ReadFromUDPAddrPort(buf)
	_ = c.udp.SetReadDeadline(time.Time{})
	return err
}

// sendAt sends total datagrams numbered 0, 1, ... at rate, as many as are
// due each millisecond; it returns how many and how long it took.
func (c *client) sendAt(dst netip.AddrPort, rate int, total int64, size int) (int64, time.Duration) {
	hdr := socks5.AppendUDPHeader(nil, socks5.Addr{IP: dst.Addr(), Port: dst.Port()})
	msg := append(hdr, make([]byte, size)...)
	seq := msg[len(hdr) : len(hdr)+8]
	start := time.Now()
	var sent int64
	for sent < total {
		due := min(int64(time.Since(start).Seconds()*float64(rate)), total)
		for ; sent < due; sent++ {
			binary.BigEndian.PutUint64(seq, uint64(sent))
			_, _ = c.udp.WriteToUDPAddrPort(msg, c.relay)
		}
		time.Sleep(time.Millisecond)
	}
	return sent, time.Since(start)
}

// receive counts the echoes, each sequence number once.
func (c *client) receive() {
	buf := make([]byte, 65536)
	for {
		n, _, err := c.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		_, payload, err := socks5.ParseUDPDatagram(buf[:n])
		if err != nil || len(payload) < 8 {
			continue
		}
		i := binary.BigEndian.Uint64(payload)
		if i >= uint64(len(c.seen)) {
			continue
		}
		if c.seen[i].Swap(true) {
			c.dup.Add(1)
			continue
		}
		c.got.Add(1)
	}
}

// readUDPStats is the kernel's UDP counters (/proc/net/snmp's Udp lines).
func readUDPStats() (map[string]int64, error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return nil, err
	}
	var names, values []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Udp: "); ok {
			if names == nil {
				names = strings.Fields(rest)
			} else {
				values = strings.Fields(rest)
			}
		}
	}
	if len(names) == 0 || len(names) != len(values) {
		return nil, errors.New("/proc/net/snmp: no Udp counters")
	}
	out := map[string]int64{}
	for i, n := range names {
		v, _ := strconv.ParseInt(values[i], 10, 64)
		out[n] = v
	}
	return out, nil
}
