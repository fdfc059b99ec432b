package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// TestOutOfFDs is docs/reliability.md case 17: relayd with RLIMIT_NOFILE 128
// meets 200 idle clients. It counts the conns it holds against what its
// file limit allows (two descriptors each, with the onward conn) and closes
// one past that budget as it arrives, counted under the rule max_fds, so
// accept never runs out of descriptors: a client past the budget learns at
// once, where one left in the kernel's accept queue behind a failing
// accept waited for its own timeout (seconds, and with 9,000 clients on a
// 20,000 limit 32 s for the last 5,553). Then it serves again once the
// clients are gone.
func TestOutOfFDs(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		testenv.Need(t, "needs prlimit to lower relayd's fd limit: install the Debian package util-linux")
	}
	// The hard limit too: the Go runtime raises its soft limit to the hard
	// one. --max-conns asks for more than 128 descriptors hold: the budget
	// still applies (and relayd warns).
	r := startRelaydWrapped(t, []string{"prlimit", "--nofile=128:128", "--"},
		"--allow-private", "--max-conns", "1000", "--handshake-timeout", "60s")
	srv := startServer(t, echo)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range 200 {
		c, err := net.DialTimeout("tcp", r.socks, 2*time.Second)
		if err != nil {
			t.Fatalf("connect: %v (the kernel's queue should take every client)", err)
		}
		conns = append(conns, c)
	}
	// Every client learns within 2 s: held (its read times out) or closed.
	held, closed := 0, 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			held++
		} else {
			closed++
		}
	}
	if held == 0 || closed == 0 || held+closed != len(conns) {
		t.Fatalf("%d clients held, %d closed: want some held (the budget) and the rest closed at once\n%s", held, closed, r.logs())
	}
	if n := metricValue(t, r, `relaymesh_denials_total{reason="max_fds"}`); int(n) != closed {
		t.Fatalf("max_fds refusals counted %v, clients closed %d", n, closed)
	}
	if n := metricValue(t, r, `relaymesh_accept_errors_total{frontend="socks5"}`); n != 0 {
		t.Fatalf("accept failed %v times: the budget must keep accept from running out of descriptors", n)
	}
	if !strings.Contains(r.logs(), "the file limit (RLIMIT_NOFILE 128) holds") {
		t.Fatalf("no warning that --max-conns 1000 is over what 128 descriptors hold:\n%s", r.logs())
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	port := srv.ln.Addr().(*net.TCPAddr).Port
	deadline := time.Now().Add(5 * time.Second)
	for {
		rep, err := socksRaw(t, r.socks, connectReq("127.0.0.1", port))
		if err == nil && rep == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relayd does not serve again after the clients left: reply 0x%02x, %v", rep, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("with 128 descriptors: %d clients held, %d closed at once", held, closed)
}

// TestSlowReadersMemory is docs/reliability.md case 16: 1,000 clients that read
// nothing, each through relayd to a server that writes as fast as it can.
// The tunnels splice in the kernel, so relayd's resident memory grows by
// goroutine stacks and small buffers, far below 64 KiB per connection.
func TestSlowReadersMemory(t *testing.T) {
	const n = 1000
	const perConnBudget = 64 << 10
	// Measured on a relayd built without -race: the race detector's shadow
	// memory alone is several times the budget.
	bin := relaydBin
	if os.Getenv("RELAYMESH_E2E_RACE") != "" {
		bin = filepath.Join(t.TempDir(), "relayd")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/relayd").CombinedOutput(); err != nil {
			t.Fatalf("go build relayd: %v\n%s", err, out)
		}
	}
	r := startRelaydBin(t, bin, nil, "--allow-private", "--max-conns", "5000", "--log-level", "info")
	flood := startServer(t, func(c net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	time.Sleep(200 * time.Millisecond)
	base := rssBytes(t, r.cmd.Process.Pid)
	port := flood.ln.Addr().(*net.TCPAddr).Port
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.DialTimeout("tcp", r.socks, 5*time.Second)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		// Greeting and CONNECT in one write; read only the two replies.
		if _, err := c.Write(append([]byte{5, 1, 0}, connectReq("127.0.0.1", port)...)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		var rep [12]byte // method choice (2) + reply (10, IPv4 bound address)
		if _, err := io.ReadFull(c, rep[:]); err != nil || rep[3] != 0 {
			t.Fatalf("client %d: reply % x, %v", i, rep, err)
		}
	}
	time.Sleep(2 * time.Second) // the flood fills every socket buffer on the way
	rss := rssBytes(t, r.cmd.Process.Pid)
	t.Logf("relayd RSS %d MiB before, %d MiB with %d stalled tunnels (%.1f KiB each)",
		base>>20, rss>>20, n, float64(rss-base)/n/1024)
	if rss-base > n*perConnBudget {
		t.Fatalf("RSS grew %d MiB for %d slow readers: more than %d KiB each", (rss-base)>>20, n, perConnBudget>>10)
	}
}

// rssBytes reads a process's resident set size.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
