package e2e

import (
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
// meets 200 idle clients. Accept fails with EMFILE; the accept loop backs
// off and logs instead of exiting or spinning, and serves again once the
// clients are gone.
func TestOutOfFDs(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		testenv.Need(t, "needs prlimit to lower relayd's fd limit: install the Debian package util-linux")
	}
	// The hard limit too: the Go runtime raises its soft limit to the hard one.
	r := startRelaydWrapped(t, []string{"prlimit", "--nofile=128:128", "--"},
		"--allow-private", "--max-conns", "1000", "--handshake-timeout", "60s")
	srv := startServer(t, echo)
	var conns []net.Conn
	for range 200 {
		c, err := net.DialTimeout("tcp", r.socks, 2*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.logs(), "accept failed; backing off") {
		if time.Now().After(deadline) {
			t.Fatalf("no back-off logged with %d idle clients and 128 fds:\n%s", len(conns), r.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // out of fds for a while: a spinning loop would log and count thousands
	for _, c := range conns {
		c.Close()
	}
	// Back to serving within the longest back-off (1 s) and then some.
	port := srv.ln.Addr().(*net.TCPAddr).Port
	deadline = time.Now().Add(5 * time.Second)
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
	select {
	case <-r.exited:
		t.Fatal("relayd exited")
	default:
	}
	if n := metricValue(t, r, `relaymesh_accept_errors_total{frontend="socks5"}`); n < 1 || n > 100 {
		t.Fatalf("accept errors counted: %v; want some, and few (back-off from 5 ms to 1 s over ~2 s)", n)
	}
	if n := strings.Count(r.logs(), "accept failed; backing off"); n > 10 {
		t.Fatalf("back-off logged %d times in ~2 s: it must log at its first and its longest step only", n)
	}
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
