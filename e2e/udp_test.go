package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/relaymesh/relaymesh/pkg/socks5"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// SOCKS5 UDP ASSOCIATE end to end: real relayd processes, PySocks (Debian
// python3-socks) and dnspython (python3-dnspython) as the clients that
// applications use, through one relay and a 3-relay TLS chain.

// pyUDPEcho sends count datagrams of assorted sizes through a SOCKS5
// proxy with PySocks, one at a time, and checks each echo. With "hold" it
// then prints "holding" and waits to be killed.
const pyUDPEcho = `
import json, os, socket, sys, time
import socks
proxy, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ph, pp = proxy.rsplit(":", 1)
s = socks.socksocket(socket.AF_INET, socket.SOCK_DGRAM)
s.set_proxy(socks.SOCKS5, ph, int(pp))
s.settimeout(5)
sizes = [1, 100, 512, 1400, 8000, 60000]
bad = 0
for i in range(count):
    msg = b"%d:" % i + os.urandom(sizes[i % len(sizes)])
    s.sendto(msg, (host, port))
    data, _ = s.recvfrom(65535)
    if data != msg:
        bad += 1
print(json.dumps({"sent": count, "bad": bad}), flush=True)
if len(sys.argv) > 5 and sys.argv[5] == "hold":
    print("holding", flush=True)
    time.sleep(600)
`

// pyDNSQuery asks a DNS server for name's A records with dnspython, over
// a PySocks UDP socket, and prints the addresses.
const pyDNSQuery = `
import socket, sys
import socks, dns.message, dns.query
proxy, server, port, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ph, pp = proxy.rsplit(":", 1)
s = socks.socksocket(socket.AF_INET, socket.SOCK_DGRAM)
s.set_proxy(socks.SOCKS5, ph, int(pp))
q = dns.message.make_query(name, "A")
r = dns.query.udp(q, server, port=port, timeout=5, sock=s)
print(" ".join(rr.address for rrset in r.answer for rr in rrset))
`

// python is a python3 that has modules: the one on the PATH, else
// Debian's (where scripts/test-deps.sh installs them), else the test is
// skipped (failed under CI=true).
func python(t *testing.T, modules ...string) string {
	t.Helper()
	check := "import " + strings.Join(modules, ", ")
	var tried []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		out, err := exec.Command(py, "-c", check).CombinedOutput()
		if err == nil {
			return py
		}
		tried = append(tried, fmt.Sprintf("%s: %s", py, strings.TrimSpace(lastLine(string(out), err))))
	}
	testenv.Need(t, "no python3 with %s (%s): make test-deps installs Debian's python3-socks and python3-dnspython as root",
		strings.Join(modules, ", "), strings.Join(tried, "; "))
	return ""
}

func lastLine(out string, err error) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return err.Error()
	}
	return out[strings.LastIndex(out, "\n")+1:]
}

// writeScript writes a Python script; its name must not be a module's it
// imports (dns.py would shadow dnspython).
func writeScript(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// udpEcho is a UDP server that answers every datagram with itself, and
// counts them.
type udpEcho struct {
	conn *net.UDPConn
	got  atomic.Int64
	from atomic.Pointer[netip.AddrPort] // the last datagram's source
}

func startUDPEcho(t *testing.T, addr string) *udpEcho {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	e := &udpEcho{conn: conn}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			e.got.Add(1)
			e.from.Store(&from)
			_, _ = conn.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return e
}

func (e *udpEcho) addr() netip.AddrPort { return e.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// dnsAnswer is what the test's DNS server answers for every A question.
var dnsAnswer = [4]byte{192, 0, 2, 53}

// startDNSServer is a small DNS server on loopback: every A question gets
// dnsAnswer. It counts the queries it answered.
func startDNSServer(t *testing.T) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var answered atomic.Int64
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if resp, ok := dnsReply(buf[:n]); ok {
				answered.Add(1)
				_, _ = conn.WriteToUDPAddrPort(resp, from)
			}
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr).AddrPort(), &answered
}

func dnsReply(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	if q.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
		if b.AResource(rh, dnsmessage.AResource{A: dnsAnswer}) != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// pyEcho runs pyUDPEcho with py through socks to host:port and checks
// every echo.
func pyEcho(t *testing.T, py, script, socks, host string, port uint16, count int) {
	t.Helper()
	out, err := exec.Command(py, script, socks, host, strconv.Itoa(int(port)), strconv.Itoa(count)).CombinedOutput()
	if err != nil {
		t.Fatalf("PySocks echo through %s to %s:%d: %v\n%s", socks, host, port, err, out)
	}
	var res struct{ Sent, Bad int }
	if err := json.Unmarshal(out, &res); err != nil || res.Sent != count || res.Bad != 0 {
		t.Fatalf("PySocks echo: %s (%v)", out, err)
	}
}

// udpSetup is where the UDP tests send their clients: the entry's SOCKS5
// address, and the relays to read metrics from (entry first, exit last).
type udpSetup struct {
	name   string
	relays []*relayd
}

func (u udpSetup) entry() *relayd { return u.relays[0] }
func (u udpSetup) exit() *relayd  { return u.relays[len(u.relays)-1] }

// udpSetups starts one relay, and a 3-relay native chain over TLS links
// (the fleet secret's certificates): every relay with all, the exit (the
// one relay, the chain's last) with exit too.
func udpSetups(t *testing.T, all, exit []string) []udpSetup {
	t.Helper()
	one := startRelayd(t, append(append([]string{"--allow-private"}, all...), exit...)...)
	secretFile := fleetSecretFile(t)
	chain := make([]*relayd, 3)
	var hops []string
	for i := len(chain) - 1; i >= 0; i-- {
		args := append([]string{"--allow-private", "--fleet-secret-file", secretFile}, all...)
		if i == len(chain)-1 {
			args = append(args, exit...)
		}
		if i > 0 {
			addr := freeAddr(t)
			args = append(args, "--relay-listen", addr)
			hops = append([]string{"--next", "relaymesh://" + addr}, hops...)
		} else {
			args = append(args, hops...)
		}
		chain[i] = startRelayd(t, args...)
	}
	return []udpSetup{{"one relay", []*relayd{one}}, {"3-relay TLS chain", chain}}
}

// TestUDPAssociate: PySocks datagrams of 1 B to 60 KB, to an IP and to a
// name the last relay resolves, come back intact through one relay and
// through a 3-relay TLS chain; dnspython's query through them is
// answered. The exit counts what it sent, the middle relay only tunnels.
func TestUDPAssociate(t *testing.T) {
	py := python(t, "socks", "dns.query")
	echoScript, dnsScript := writeScript(t, "udp_echo.py", pyUDPEcho), writeScript(t, "query_dns.py", pyDNSQuery)
	// Every address of this host: "localhost" may resolve to ::1 first.
	echo := startUDPEcho(t, "[::]:0")
	dns, answered := startDNSServer(t)
	for i, u := range udpSetups(t, nil, nil) {
		t.Run(u.name, func(t *testing.T) {
			const n = 30
			pyEcho(t, py, echoScript, u.entry().socks, "127.0.0.1", echo.addr().Port(), n)
			pyEcho(t, py, echoScript, u.entry().socks, "localhost", echo.addr().Port(), 6)
			out, err := exec.Command(py, dnsScript, u.entry().socks, dns.Addr().String(), strconv.Itoa(int(dns.Port())), "relaymesh.test").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != netip.AddrFrom4(dnsAnswer).String() {
				t.Fatalf("dnspython through %s: %q, %v", u.name, out, err)
			}
			if got := answered.Load(); got != int64(i+1) {
				t.Fatalf("DNS server answered %d queries, want %d", got, i+1)
			}
			// Three associations (two echo runs, one query): n+6+1
			// datagrams each way at the entry and at the exit.
			want := float64(n + 6 + 1)
			for _, side := range []string{"entry", "exit"} {
				r := u.entry()
				if side == "exit" {
					r = u.exit()
				}
				for _, dir := range []string{"up", "down"} {
					name := `relaymesh_udp_datagrams_total{direction="` + dir + `",side="` + side + `"}`
					if v := metricValue(t, r, name); v != want {
						t.Errorf("%s = %v, want %v", name, v, want)
					}
				}
			}
			if len(u.relays) > 1 {
				if v := metricValue(t, u.relays[1], `relaymesh_udp_associations_opened_total{side="exit"}`); v != 0 {
					t.Errorf("the middle relay was an exit %v times: it only tunnels the link", v)
				}
				if v := metricValue(t, u.exit(), `relaymesh_udp_associations_opened_total{side="exit"}`); v != 3 {
					t.Errorf("the exit opened %v associations, want 3", v)
				}
			}
			for _, r := range []*relayd{u.entry(), u.exit()} {
				for _, side := range []string{"entry", "exit"} {
					metricReaches(t, r, `relaymesh_udp_associations_active{side="`+side+`"}`, 0)
				}
			}
		})
	}
}

// TestUDPDeniedDestination: the exit applies its destination policy to
// the address each datagram's destination resolves to, before sending.
// Datagrams to a denied IP, and to a name that resolves to it, never reach
// the canary listening there; the association goes on carrying the
// others; every denial is counted.
func TestUDPDeniedDestination(t *testing.T) {
	py := python(t, "socks")
	script := writeScript(t, "udp_echo.py", pyUDPEcho)
	canary := startUDPEcho(t, "127.0.0.1:0")
	echo := startUDPEcho(t, "127.0.0.3:0")
	// Only at the exit: the chain's relays link at 127.0.0.1, and a
	// denied range is denied to relay hops too.
	for _, u := range udpSetups(t, nil, []string{"--deny", "127.0.0.1/32", "--deny", "::1/128"}) {
		t.Run(u.name, func(t *testing.T) {
			c := associate(t, u.entry().socks)
			for _, dst := range []socks5.Addr{
				{IP: canary.addr().Addr(), Port: canary.addr().Port()},
				{Host: "localhost", Port: canary.addr().Port()},
			} {
				c.send(t, dst, []byte("must not arrive"))
			}
			c.send(t, socks5.Addr{IP: echo.addr().Addr(), Port: echo.addr().Port()}, []byte("allowed"))
			if from, got := c.recv(t, 5*time.Second); string(got) != "allowed" || from != echo.addr() {
				t.Fatalf("after the denied datagrams: %q from %v, want the echo", got, from)
			}
			// A literal address the entry itself denies is dropped
			// there (the one relay); the rest at the exit, resolved.
			deniedAt := func() float64 {
				return metricValue(t, u.entry(), `relaymesh_udp_drops_total{reason="denied",side="entry"}`) +
					metricValue(t, u.exit(), `relaymesh_udp_drops_total{reason="denied",side="exit"}`)
			}
			if !within(func() bool { return deniedAt() == 2 }) {
				t.Fatalf("%v datagrams counted denied, want 2", deniedAt())
			}
			if len(u.relays) > 1 {
				if v := metricValue(t, u.exit(), `relaymesh_udp_drops_total{reason="denied",side="exit"}`); v != 2 {
					t.Fatalf("the exit denied %v datagrams, want both: only its policy denies the canary", v)
				}
			}
			pyEcho(t, py, script, u.entry().socks, "127.0.0.3", echo.addr().Port(), 3)
			if n := canary.got.Load(); n != 0 {
				t.Fatalf("the canary at a denied address received %d datagrams", n)
			}
		})
	}
}

// TestUDPClientVanishes: an association ends with its client. A PySocks
// client killed (SIGKILL: its kernel closes the control connection) ends
// its association at once, at the entry and at the exit of a chain; a
// client whose control connection stays open but which sends nothing
// more is ended at limits.udp_idle_timeout, its control connection
// closed by the relay.
func TestUDPClientVanishes(t *testing.T) {
	py := python(t, "socks")
	script := writeScript(t, "udp_echo.py", pyUDPEcho)
	cfg := filepath.Join(t.TempDir(), "udp.yaml")
	const idle = 2 * time.Second
	if err := os.WriteFile(cfg, []byte("limits:\n  udp_idle_timeout: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	echo := startUDPEcho(t, "127.0.0.1:0")
	for _, u := range udpSetups(t, []string{"--config", cfg}, nil) {
		t.Run(u.name+", killed", func(t *testing.T) {
			cmd := exec.Command(py, script, u.entry().socks, "127.0.0.1", strconv.Itoa(int(echo.addr().Port())), "3", "hold")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() && sc.Text() != "holding" {
			}
			metricReaches(t, u.entry(), `relaymesh_udp_associations_active{side="entry"}`, 1)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			start := time.Now()
			waitMetric(t, u.entry(), `relaymesh_udp_associations_active{side="entry"}`, 0, idle)
			waitMetric(t, u.exit(), `relaymesh_udp_associations_active{side="exit"}`, 0, idle)
			t.Logf("association ended %v after the client was killed", time.Since(start).Round(time.Millisecond))
			if v := metricValue(t, u.entry(), `relaymesh_udp_associations_closed_total{reason="client_closed",side="entry"}`); v != 1 {
				t.Errorf("entry: %v associations closed by their client, want 1", v)
			}
		})
		t.Run(u.name+", silent", func(t *testing.T) {
			c := associate(t, u.entry().socks)
			c.send(t, socks5.Addr{IP: echo.addr().Addr(), Port: echo.addr().Port()}, []byte("once"))
			c.recv(t, 5*time.Second)
			start := time.Now()
			_ = c.ctrl.SetReadDeadline(time.Now().Add(idle + 3*time.Second))
			if _, err := c.ctrl.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
				t.Fatalf("control connection after %v: %v, want closed by the relay", time.Since(start), err)
			}
			if d := time.Since(start); d < idle-500*time.Millisecond || d > idle+time.Second {
				t.Fatalf("association ended after %v of silence, want the idle timeout %v", d, idle)
			}
			waitMetric(t, u.exit(), `relaymesh_udp_associations_active{side="exit"}`, 0, time.Second)
			metricReaches(t, u.entry(), `relaymesh_udp_associations_closed_total{reason="idle_timeout",side="entry"}`, 1)
		})
	}
}

// TestUDPStranger: the association's port takes datagrams only from its
// client. A stranger on another address before the client's first
// datagram, and one on the client's address but another port after it,
// are dropped without reaching the destination; so is a fragment. And the
// exit's port takes answers only from where it sent: a stranger who
// learnt it cannot send to the client through it.
func TestUDPStranger(t *testing.T) {
	echo := startUDPEcho(t, "127.0.0.1:0")
	r := startRelayd(t, "--allow-private")
	c := associate(t, r.socks)
	dst := socks5.Addr{IP: echo.addr().Addr(), Port: echo.addr().Port()}
	strangerSend := func(from string) {
		s, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		msg := append(socks5.AppendUDPHeader(nil, dst), "stranger"...)
		if _, err := s.WriteToUDPAddrPort(msg, c.relay); err != nil {
			t.Fatal(err)
		}
	}
	strangerSend("127.0.0.2:0") // before the client: another address
	metricReaches(t, r, `relaymesh_udp_drops_total{reason="stranger",side="entry"}`, 1)
	c.send(t, dst, []byte("client"))
	if _, got := c.recv(t, 5*time.Second); string(got) != "client" {
		t.Fatalf("client's echo: %q", got)
	}
	strangerSend("127.0.0.1:0") // after: the client's address, another port
	metricReaches(t, r, `relaymesh_udp_drops_total{reason="stranger",side="entry"}`, 2)
	frag := append(socks5.AppendUDPHeader(nil, dst), "fragment"...)
	frag[2] = 1
	if _, err := c.udp.WriteToUDPAddrPort(frag, c.relay); err != nil {
		t.Fatal(err)
	}
	metricReaches(t, r, `relaymesh_udp_drops_total{reason="fragmented",side="entry"}`, 1)
	if n := echo.got.Load(); n != 1 {
		t.Fatalf("the destination received %d datagrams, want only the client's 1", n)
	}

	exitPort := *echo.from.Load() // the relay's socket toward destinations
	injector, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer injector.Close()
	if _, err := injector.WriteToUDPAddrPort([]byte("injected"), exitPort); err != nil {
		t.Fatal(err)
	}
	metricReaches(t, r, `relaymesh_udp_drops_total{reason="unsolicited",side="exit"}`, 1)
	_ = c.udp.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := c.udp.ReadFromUDPAddrPort(make([]byte, 2048)); err == nil {
		t.Fatalf("the client received %d bytes a stranger sent to the exit's port", n)
	}
}

// udpClient is a minimal SOCKS5 UDP client (pkg/socks5's codec) for what
// PySocks cannot be made to do: stay silent, be a stranger, fragment.
type udpClient struct {
	ctrl  net.Conn
	udp   *net.UDPConn
	relay netip.AddrPort
}

// associate opens an association on socks (no authentication), naming
// 0.0.0.0:0 as its source, as most clients do.
func associate(t *testing.T, socks string) *udpClient {
	t.Helper()
	ctrl, err := net.DialTimeout("tcp", socks, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	_ = ctrl.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := ctrl.Write(socks5.MarshalGreeting(socks5.MethodNoAuth)); err != nil {
		t.Fatal(err)
	}
	if m, err := socks5.ReadMethodChoice(ctrl); err != nil || m != socks5.MethodNoAuth {
		t.Fatalf("method %v, %v", m, err)
	}
	if _, err := ctrl.Write(socks5.MarshalRequest(socks5.CmdUDPAssociate, socks5.Addr{IP: netip.IPv4Unspecified()})); err != nil {
		t.Fatal(err)
	}
	rep, bound, err := socks5.ReadReply(ctrl)
	if err != nil || rep != socks5.ReplySucceeded {
		t.Fatalf("UDP ASSOCIATE: %v, %v", rep, err)
	}
	_ = ctrl.SetDeadline(time.Time{})
	if !bound.IP.IsValid() || bound.IP.IsUnspecified() || bound.Port == 0 {
		t.Fatalf("BND %s: want an address the client can send to", bound)
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	return &udpClient{ctrl: ctrl, udp: udp, relay: netip.AddrPortFrom(bound.IP, bound.Port)}
}

func (c *udpClient) send(t *testing.T, dst socks5.Addr, payload []byte) {
	t.Helper()
	if _, err := c.udp.WriteToUDPAddrPort(append(socks5.AppendUDPHeader(nil, dst), payload...), c.relay); err != nil {
		t.Fatal(err)
	}
}

func (c *udpClient) recv(t *testing.T, timeout time.Duration) (netip.AddrPort, []byte) {
	t.Helper()
	buf := make([]byte, 65536)
	_ = c.udp.SetReadDeadline(time.Now().Add(timeout))
	n, from, err := c.udp.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("no datagram from the relay: %v", err)
	}
	if unmapAP(from) != c.relay {
		t.Fatalf("datagram from %v, not the relay's %v", from, c.relay)
	}
	src, payload, err := socks5.ParseUDPDatagram(buf[:n])
	if err != nil {
		t.Fatalf("relay's datagram: %v", err)
	}
	return netip.AddrPortFrom(src.IP, src.Port), payload
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// waitMetric waits up to within for r's gauge name to read want.
func waitMetric(t *testing.T, r *relayd, name string, want float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		v := metricValue(t, r, name)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after %v, want %v", name, v, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUDPThroughConnect: relayctl connect answers UDP ASSOCIATE on its
// SOCKS5 listener and routes an association by its rule file, as it
// routes a connection: PySocks' datagrams to 127.0.0.1 go DIRECT (connect
// is the exit), to localhost through the relay CHAIN:r2 names (r2 is the
// exit); a datagram to a name a REJECT rule refuses never leaves connect,
// and the association goes on.
func TestUDPThroughConnect(t *testing.T) {
	py := python(t, "socks")
	script := writeScript(t, "udp_echo.py", pyUDPEcho)
	echo := startUDPEcho(t, "[::]:0")
	lab := startRulesLab(t)
	exitUp := `relaymesh_udp_datagrams_total{direction="up",side="exit"}`
	// r2's admin API wants the lab's token.
	metricValue := func(t *testing.T, r *relayd, name string) float64 {
		t.Helper()
		for _, line := range strings.Split(adminGet(t, r, "/metrics", "e2e-token-0123456789"), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %q", name, line)
				}
				return f
			}
		}
		t.Fatalf("no %s in /metrics", name)
		return 0
	}

	pyEcho(t, py, script, lab.socks, "127.0.0.1", echo.addr().Port(), 6)
	if v := metricValue(t, lab.r2, exitUp); v != 0 {
		t.Fatalf("DIRECT: r2 sent %v datagrams, want none", v)
	}
	pyEcho(t, py, script, lab.socks, "localhost", echo.addr().Port(), 6)
	if v := metricValue(t, lab.r2, exitUp); v != 6 {
		t.Fatalf("CHAIN:r2: r2 sent %v datagrams, want 6", v)
	}

	c := associate(t, lab.socks)
	here := socks5.Addr{Host: "localhost", Port: echo.addr().Port()}
	c.send(t, here, []byte("first"))
	c.recv(t, 5*time.Second)
	c.send(t, socks5.Addr{Host: "ads.blocked.test", Port: echo.addr().Port()}, []byte("rejected"))
	c.send(t, here, []byte("after"))
	if _, got := c.recv(t, 5*time.Second); string(got) != "after" {
		t.Fatalf("after the rejected datagram: %q", got)
	}
	if v := metricValue(t, lab.r2, exitUp); v != 8 {
		t.Fatalf("r2 sent %v datagrams, want 8: the rejected one reached it", v)
	}
	if v := metricValue(t, lab.r2, `relaymesh_udp_drops_total{reason="resolve",side="exit"}`); v != 0 {
		t.Fatalf("r2 tried to resolve %v names: the rejected one reached it", v)
	}
}

// TestUDPIdentityChain: on a fleet of identities from an operator CA (no
// fleet secret anywhere), an association's header names each relay and
// is keyed by its link, as a tunnel's is: PySocks' datagrams cross three
// relays and come back intact, the last relay their exit.
func TestUDPIdentityChain(t *testing.T) {
	py := python(t, "socks")
	script := writeScript(t, "udp_echo.py", pyUDPEcho)
	echo := startUDPEcho(t, "127.0.0.1:0")
	ca := newOpCA(t)
	c := ca.identityRelay("c")
	b := ca.identityRelay("b")
	a := ca.identityRelay("a", "--next", namedHop("b", b.relayAddr), "--next", namedHop("c", c.relayAddr))
	pyEcho(t, py, script, a.socks, "127.0.0.1", echo.addr().Port(), 12)
	if v := metricValue(t, c.relayd, `relaymesh_udp_datagrams_total{direction="up",side="exit"}`); v != 12 {
		t.Fatalf("the last relay sent %v datagrams, want 12", v)
	}
	if v := metricValue(t, b.relayd, `relaymesh_udp_associations_opened_total{side="exit"}`); v != 0 {
		t.Fatalf("the middle relay was an exit %v times", v)
	}
}
